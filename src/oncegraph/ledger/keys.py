"""The ledger's keys: command ids, effect ids (= idempotency keys) and request hashes.

One place computes each (DESIGN.md section 1):

* ``command_id``: the agent's intent inside a run: ``<assistant message id>:<tool_call_id>``
  for a tool call (message ids are persisted before tools run, so the pair is stable) or
  ``<node>:<step>:<n>`` for the n-th effect made directly inside a node;
* ``effect_id``: ``sha256(run_id : effect_type : command_id)``, hex: every attempt at one
  external result, and the idempotency key handed to providers;
* ``request_hash``: ``sha256:`` of the canonical JSON of the request (law 6: the same key
  must carry the same request).
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from oncegraph._json import canonical
from oncegraph.ids import CommandId, EffectId

if TYPE_CHECKING:
    from oncegraph.runtime.context import TaskContext


def effect_id_for(run_id: str, effect_type: str, command_id: str) -> EffectId:
    """``sha256(run_id : effect_type : command_id)``, hex; also the provider idempotency key."""
    raw = f"{run_id}:{effect_type}:{command_id}".encode()
    return EffectId(hashlib.sha256(raw).hexdigest())


def request_hash(value: Any) -> str:
    """``sha256:<hex>`` of the canonical JSON of ``value``."""
    return "sha256:" + hashlib.sha256(canonical(value)).hexdigest()


def tool_command_id(message_id: str, tool_call_id: str) -> CommandId:
    """``<assistant message id>:<tool_call_id>``: stable because message ids are persisted."""
    return CommandId(f"{message_id}:{tool_call_id}")


def node_command_id(node: str, step: int, n: int) -> CommandId:
    """``<node>:<step>:<n>`` for effects made directly inside a node, by position."""
    return CommandId(f"{node}:{step}:{n}")


def next_command_id(ctx: TaskContext) -> CommandId:
    """The command id of the next effect the running node makes (by position in it).

    A re-run node makes its effects in the same order, so its n-th effect finds the n-th
    record: keep the order of effects inside a node stable.
    """
    n = ctx.effect_count
    ctx.effect_count += 1
    return node_command_id(ctx.node, ctx.step, n)


__all__ = [
    "effect_id_for",
    "next_command_id",
    "node_command_id",
    "request_hash",
    "tool_command_id",
]
