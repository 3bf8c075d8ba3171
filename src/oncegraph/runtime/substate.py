"""A stateful subgraph's state when its parent's run went back in time.

A subgraph compiled with ``checkpointer=True`` keeps one thread of checkpoints per node
of its parent's thread (:mod:`oncegraph.runtime.subgraph`), and each call goes on from
that thread's head. When the parent goes back to one of its past checkpoints (a time
travel run: ``invoke(None, {"checkpoint_id": old})`` or a run after ``update_state``),
the subgraph goes back with it, as in LangGraph: its FIRST call in that run starts from
the state it had when the checkpoint gone back to was current (its newest checkpoint made
before that one; none: an empty state), and any later call of the same run (a loop, a
resume after an interrupt or a crash) from its own head again.

Going back writes a new checkpoint on the subgraph's thread (its history keeps every
older one): a copy of the old state, with its log channels on a branch of their own
(:mod:`oncegraph.runtime.logkeys`), committed under the parent run's id and fence like
every other checkpoint of the subgraph. The copy is made by this run, so a resume of the
run (which sees it as its own head) never goes back a second time.
"""

from __future__ import annotations

from oncegraph.graph.spec import GraphSpec
from oncegraph.ids import new_checkpoint_id
from oncegraph.runtime import logkeys
from oncegraph.runtime.context import TaskContext
from oncegraph.runtime.engine import Head
from oncegraph.runtime.heads import Heads
from oncegraph.storage.records import CheckpointRecord, LogEntry, StepCommit

TIME_TRAVEL = "time_travel"
"""The ``launch_reason`` of a run made by going back to a past checkpoint of its thread
(the same value as ``oncegraph.runs.timetravel.TIME_TRAVEL``)."""


async def replay_point(ctx: TaskContext) -> str | None:
    """The checkpoint of the parent's thread that this task's run went back to (None: the
    run is no time travel on its own thread)."""
    run = await ctx.store.get_run(ctx.run_id)
    if run is None or run.launch_reason != TIME_TRAVEL or not run.parent_checkpoint_id:
        return None
    return run.parent_checkpoint_id


async def back_to_replay_point(
    ctx: TaskContext, spec: GraphSpec, heads: Heads, thread: str, head: Head
) -> Head:
    """The head a stateful subgraph's call on ``thread`` starts from (see the module
    docstring): ``head`` itself, or a new head holding the state of the replay point."""
    cp = head.checkpoint
    if not cp.checkpoint_id or cp.run_id == ctx.run_id:  # nothing yet, or visited already
        return head
    point = await replay_point(ctx)
    if point is None:
        return head
    source: CheckpointRecord | None = None
    for old in await ctx.store.list_checkpoints(thread):  # newest first
        if old.checkpoint_id < point:  # ids sort by the time they were made
            source = old
            break
    if source is not None and source.checkpoint_id == cp.checkpoint_id:
        return head  # the head is already the state of that time
    branch = head.version + 1  # unique on the thread: the version this commit makes
    counts = dict(logkeys.counts(source.logs)) if source is not None else {}
    logs = logkeys.branched(
        {c: counts.get(c, 0) for c in spec.schema.log_channels()}, branch
    )
    log: list[LogEntry] = []
    if source is not None:
        for channel, count in logkeys.counts(source.logs):  # the prefix it stands on
            if not count:
                continue
            entries = await ctx.store.read_log(
                thread, logkeys.stored_channel(source.logs, channel), count
            )
            target = logkeys.stored_channel(logs, channel)
            log.extend(LogEntry(target, seq, value) for seq, value in enumerate(entries))
    checkpoint = CheckpointRecord(
        checkpoint_id=new_checkpoint_id(),
        thread_id=thread,
        run_id=ctx.run_id,
        step=source.step if source is not None else -1,
        version=branch,
        parent_checkpoint_id=cp.checkpoint_id,
        values=dict(source.values) if source is not None else {},
        logs=logs,
        next=(),
        metadata={
            "source": "fork",
            "call": f"replay:{ctx.run_id}:{point}",
            "forked_from": {
                "thread_id": thread,
                "checkpoint_id": source.checkpoint_id if source is not None else None,
            },
        },
    )
    await ctx.store.commit(
        StepCommit(
            thread_id=thread,
            expected_version=head.version,
            checkpoint=checkpoint,
            log=tuple(log),
            fence=ctx.claim.token if ctx.claim is not None else None,
        )
    )
    restored = Head(checkpoint, await heads.materialize(checkpoint))
    heads.remember(restored)
    return restored


__all__ = ["TIME_TRAVEL", "back_to_replay_point", "replay_point"]
