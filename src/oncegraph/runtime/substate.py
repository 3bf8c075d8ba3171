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


STARTS = "subgraph_starts"
"""The key of a time travel run's stored config naming, per subgraph thread, the
checkpoint its first call starts from (``oncegraph.runs.subtravel.STARTS``)."""

_NEXT_STEP_KEYS = ("sends", "joins", "deferred")  # what a checkpoint says about the step after it


async def replay_point(ctx: TaskContext) -> tuple[str, dict[str, str]] | None:
    """The checkpoint of the parent's thread that this task's run went back to, and the
    subgraph checkpoints it named to start from (None: the run is no time travel)."""
    run = await ctx.store.get_run(ctx.run_id)
    if run is None or run.launch_reason != TIME_TRAVEL or not run.parent_checkpoint_id:
        return None
    starts = run.config.get(STARTS) if isinstance(run.config, dict) else None
    return run.parent_checkpoint_id, dict(starts or {})


async def back_to_replay_point(
    ctx: TaskContext, spec: GraphSpec, heads: Heads, thread: str, head: Head, call: str
) -> Head:
    """The head a stateful subgraph's call ``call`` on ``thread`` starts from (see the
    module docstring): ``head`` itself, or a new head holding the state of the replay
    point, or, when the run went back to one of this subgraph's own checkpoints, a copy
    of that checkpoint that this call goes on from (its next nodes run again)."""
    cp = head.checkpoint
    if not cp.checkpoint_id or cp.run_id == ctx.run_id:  # nothing yet, or visited already
        return head
    found = await replay_point(ctx)
    if found is None:
        return head
    point, starts = found
    source: CheckpointRecord | None = None
    start = starts.get(thread)
    if start is not None:
        source = await ctx.store.get_checkpoint(thread, start)
    if source is None:
        for old in await ctx.store.list_checkpoints(thread):  # newest first
            if old.checkpoint_id < point:  # ids sort by the time they were made
                source = old
                break
        if source is not None and source.checkpoint_id == cp.checkpoint_id:
            return head  # the head is already the state of that time
    resumed = start is not None and source is not None
    branch = head.version + 1  # unique on the thread: the version this commit makes
    counts = dict(logkeys.counts(source.logs)) if source is not None else {}
    logs = logkeys.branched({c: counts.get(c, 0) for c in spec.schema.log_channels()}, branch)
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
        next=tuple(source.next) if resumed and source is not None else (),
        metadata={
            "source": "fork",
            "call": call if resumed else f"replay:{ctx.run_id}:{point}",
            "forked_from": {
                "thread_id": thread,
                "checkpoint_id": source.checkpoint_id if source is not None else None,
            },
            **(
                {k: source.metadata[k] for k in _NEXT_STEP_KEYS if k in source.metadata}
                if resumed and source is not None
                else {}
            ),
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


__all__ = ["STARTS", "TIME_TRAVEL", "back_to_replay_point", "replay_point"]
