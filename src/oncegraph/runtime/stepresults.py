"""What each task of a step wrote, kept with the checkpoint the step made, so a thread's
history shows a past step's task results (LangGraph's ``StateSnapshot.tasks[i].result``)
after the step's own task writes are gone.

The step's checkpoint keeps, under ``metadata["results"]``, each task's update by task key
(the node's name, ``node:i`` for the i-th ``Send``), value fields encoded as the schema
stores them. A log field (a message list) is left out: its entries are stored once, in
the thread's log, and the checkpoint's state holds them; repeating them here would store
every message twice. A task whose update has nothing else is not listed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from oncegraph.state.channels import StateSchema, public

RESULTS = "results"
"""The metadata key of a checkpoint's step results."""


def encode_results(schema: StateSchema, results: Sequence[Any]) -> dict[str, Any]:
    """Each task's update in ``results`` (``TaskResult``), log fields left out, by task
    key; empty when no task wrote a value field."""
    out: dict[str, Any] = {}
    for r in results:
        merged: dict[str, Any] = {}
        for update in (r.update, *r.more):
            for key, value in update.items():
                if not schema.channel(key).log:
                    merged[key] = value
        if merged:
            out[r.key] = schema.encode_update(merged)
    return out


def decode_results(schema: StateSchema, metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The task results a checkpoint's metadata keeps (see :func:`encode_results`), typed
    again, as LangGraph shows them (a root-value state's: the value itself)."""
    stored = metadata.get(RESULTS)
    if not isinstance(stored, Mapping):
        return {}
    out: dict[str, Any] = {}
    for key, update in stored.items():
        try:
            out[str(key)] = public(schema.decode_update(update))
        except (ValueError, TypeError, KeyError):  # an older schema's field: as stored
            out[str(key)] = update
    return out


__all__ = ["RESULTS", "decode_results", "encode_results"]
