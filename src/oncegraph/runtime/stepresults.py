"""What each task of a step wrote, kept with the checkpoint the step made, so a thread's
history shows a past step's task results (LangGraph's ``StateSnapshot.tasks[i].result``)
after the step's own task writes are gone.

The step's checkpoint keeps, under ``metadata["results"]``, each task's update by task key
(the node's name, ``node:i`` for the i-th ``Send``), value fields encoded as the schema
stores them (a field the task wrote several times: each write, shown as LangGraph's
``{"$writes": [...]}``). A log field (a message list) is left out: its entries are stored once, in
the thread's log, and the checkpoint's state holds them; repeating them here would store
every message twice. A field with no reducer that one task wrote is only named: its
value is the checkpoint's own. A task whose update has nothing else is not listed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from oncegraph.state.channels import StateSchema, public

RESULTS = "results"
"""The metadata key of a checkpoint's step results."""


def encode_results(schema: StateSchema, results: Sequence[Any]) -> dict[str, Any]:
    """Each task's update in ``results`` (``TaskResult``), log fields left out, by task
    key: ``{"update": <encoded fields>, "same": [<fields>]}``, where a field without a
    reducer that only this task wrote is named in ``same`` instead: its value is the
    checkpoint's own (stored once). Empty when no task wrote a value field."""
    writers: dict[str, int] = {}
    for r in results:
        for key in {k for update in (r.update, *r.more) for k in update}:
            writers[key] = writers.get(key, 0) + 1
    out: dict[str, Any] = {}
    for r in results:
        merged: dict[str, list[Any]] = {}
        same: list[str] = []
        for update in (r.update, *r.more):
            for key, value in update.items():
                channel = schema.channel(key)
                if channel.log:
                    continue
                if channel.reducer is None and writers[key] == 1:
                    if key not in same:
                        same.append(key)
                    merged.pop(key, None)
                else:
                    merged.setdefault(key, []).append(value)
        kept: dict[str, Any] = {}
        once = {k: vs[0] for k, vs in merged.items() if len(vs) == 1}
        if once:
            kept["update"] = schema.encode_update(once)
        many = {k: vs for k, vs in merged.items() if len(vs) > 1}
        if many:  # a field the task wrote several times: each write, in order
            kept["writes"] = {
                k: [schema.encode_update({k: v})[k] for v in vs] for k, vs in many.items()
            }
        if same:
            kept["same"] = same
        if kept:
            out[r.key] = kept
    return out


def _decoded(schema: StateSchema, name: str, raw: Any) -> Any:
    """One stored write of field ``name``, typed again (an older schema's: as stored)."""
    try:
        return schema.decode_update({name: raw})[name]
    except (ValueError, TypeError, KeyError):
        return raw


def decode_results(
    schema: StateSchema, metadata: Mapping[str, Any], values: Mapping[str, Any]
) -> dict[str, Any]:
    """The task results a checkpoint's metadata keeps (see :func:`encode_results`), typed
    again, as LangGraph shows them (a root-value state's: the value itself); ``values``:
    that checkpoint's values, typed (what ``same`` names)."""
    stored = metadata.get(RESULTS)
    if not isinstance(stored, Mapping):
        return {}
    out: dict[str, Any] = {}
    for key, kept in stored.items():
        if not isinstance(kept, Mapping):
            continue
        update: dict[str, Any] = {}
        raw = kept.get("update") or {}
        try:
            update.update(schema.decode_update(raw))
        except (ValueError, TypeError, KeyError):  # an older schema's field: as stored
            update.update(raw)
        for name, each in (kept.get("writes") or {}).items():
            update[name] = {"$writes": [_decoded(schema, name, raw) for raw in each]}
        for name in kept.get("same") or ():
            if name in values:
                update[name] = values[name]
        out[str(key)] = public(update)
    return out


__all__ = ["RESULTS", "decode_results", "encode_results"]
