"""Reads of a thread's checkpoints that need no graph: what an operator reads from the
database alone (``oncegraph state`` and ``history`` without the app's code).

A checkpoint stores its plain channels as JSON and, for each log channel (a list the
graph appends to, such as ``messages``), how many entries of the thread's log it holds;
:func:`raw_state` gives the plain values and each log's entries as stored, in order,
without the channel's reducer (an entry that replaced an earlier one, by message id, is
listed as written). The caller masks what it shows. Reads go through the run service's
context, so a checkpoint outside its scope is refused (guarantee 15).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from oncegraph.errors import RunNotFoundError
from oncegraph.runs.context import RunContext
from oncegraph.runs.scope import check_checkpoints
from oncegraph.storage.records import CheckpointRecord


@dataclass(frozen=True, slots=True)
class StoredState:
    checkpoint: CheckpointRecord
    values: dict[str, Any]  # plain channels, then log channels as their stored entries
    logs: tuple[str, ...]  # which of ``values`` are log channels


async def raw_state(
    ctx: RunContext, thread_id: str, checkpoint_id: str | None = None
) -> StoredState:
    """The thread's head checkpoint (or ``checkpoint_id``) as stored."""
    await ctx.setup()
    await ctx.check_thread(thread_id)
    cp = await ctx.store.get_checkpoint(thread_id, checkpoint_id)
    if cp is None:
        where = f"no checkpoint {checkpoint_id!r}" if checkpoint_id else "no checkpoint yet"
        raise RunNotFoundError(
            f"thread {thread_id!r} has {where}; list its checkpoints with oncegraph history "
            f"{thread_id}"
        )
    await check_checkpoints(ctx.store, ctx.scope, [cp])
    values: dict[str, Any] = dict(cp.values)
    for channel, end in sorted(cp.logs.items()):
        values[channel] = await ctx.store.read_log(thread_id, channel, end) if end else []
    return StoredState(cp, values, tuple(sorted(cp.logs)))


async def raw_history(
    ctx: RunContext, thread_id: str, *, run_id: str | None = None, limit: int | None = None
) -> list[CheckpointRecord]:
    """The thread's checkpoints, newest first (their records: no values decoded)."""
    await ctx.setup()
    await ctx.check_thread(thread_id)
    found = await ctx.store.list_checkpoints(thread_id, run_id=run_id, limit=limit)
    await check_checkpoints(ctx.store, ctx.scope, found)
    return found


__all__ = ["StoredState", "raw_history", "raw_state"]
