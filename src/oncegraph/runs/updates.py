"""``update_state`` used as input: LangGraph lets an update start a thread's turn.

* ``update_state(config, values, as_node="__input__")`` (on a new thread, or on the head
  of a thread whose latest run finished) is the input of a new turn: a NEW run whose
  input is ``values`` and whose first checkpoint is the input checkpoint ``invoke(values,
  config)`` would make (the history shows it the same way);
* ``update_state(config, values, as_node=<node>)`` (or no ``as_node``) on a thread that
  has no checkpoint yet makes the thread's first checkpoint, as if that node (``None``:
  the input) had written ``values``; ``invoke(None, config)`` runs what comes after it.

Each is a new run with lineage, as every other fork (:mod:`oncegraph.runs.timetravel`):
``launch_reason="time_travel"``, ``parent_run_id`` / ``parent_checkpoint_id`` naming the
head it stands on (None on a new thread), status ``paused`` until ``invoke(None,
config)`` runs it (``completed`` when nothing is left to run). It never continues or
drops an unfinished run: an unfinished latest run refuses it (an edit nobody ran yet is
superseded, with an audit record, as by any later update).

``update_state(config, None, as_node="__end__")`` (:func:`end_by_update`) ends the
thread's turn at a checkpoint: a child of it with the same state and nothing left to run
(``source="update"``), under a NEW ``completed`` run with lineage. On the head of a run
waiting for an answer it is the caller's explicit word that the question is dropped: that
run is ended (``abandoned``, with an audit record naming the actor), unless one of its
effects has an unknown outcome (that one is settled first, ``app.resolve_effect``). Any
other unfinished run refuses it, as every fork.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from oncegraph.errors import ConfigError, RunNotFoundError, RunStateError, UnfinishedRunError
from oncegraph.graph.constants import END, START
from oncegraph.runs import audits, stopping
from oncegraph.runs.forks import COPY, TIME_TRAVEL, Fork, fork
from oncegraph.runtime.config import RunConfig
from oncegraph.runtime.engine import (
    Head,
    TaskResult,
    advance,
    decode_result,
    empty_head,
    is_breakpoint,
)
from oncegraph.runtime.moves import open_interrupts
from oncegraph.runtime.replay import ReplayPolicy
from oncegraph.runtime.sends import decode_send
from oncegraph.storage.records import (
    CheckpointRecord,
    EffectStatus,
    RunRecord,
    RunStatus,
    StepCommit,
    ThreadRecord,
    WriteKind,
)

if TYPE_CHECKING:
    from oncegraph.runs.timetravel import TimeTravel
    from oncegraph.storage.protocols import Checkpointer

INPUT = "__input__"
"""LangGraph's ``as_node`` for an update that is a turn's input."""


def starts_a_turn(thread: ThreadRecord | None, as_node: str | None) -> bool:
    """Whether an update with ``as_node`` on ``thread`` is an input (see the module
    docstring): an ``__input__`` update, or any update of a thread with no checkpoint."""
    return as_node == INPUT or thread is None or thread.head_checkpoint_id is None


async def start_by_update(
    travel: TimeTravel,
    thread_id: str,
    thread: ThreadRecord | None,
    latest: RunRecord | None,
    values: Mapping[str, Any] | None,
    as_node: str | None,
    *,
    checkpoint_id: str | None,
    actor: str,
    reason: str,
) -> Fork:
    """The new run and first checkpoint of an update used as input (module docstring)."""
    ctx = travel.ctx
    spec, heads = ctx.graph_heads()
    fresh = thread is None or thread.head_checkpoint_id is None
    if as_node in (COPY, END):
        what = "copy" if as_node == COPY else "end"
        raise RunNotFoundError(
            f"thread {thread_id!r} has no checkpoint to {what} yet; start it with "
            "invoke(input, config) or update_state(config, values)"
        )
    if values is not None and not isinstance(values, Mapping):
        raise ConfigError(f"values must be a dict of state fields; got {values!r}")
    as_input = as_node in (None, INPUT, START)
    if not as_input and as_node not in spec.nodes:
        raise ConfigError(
            f"as_node {as_node!r} is not a node of this graph; nodes: {sorted(spec.nodes)}"
        )
    if not fresh and checkpoint_id not in (None, thread.head_checkpoint_id if thread else None):
        raise ConfigError(
            "update_state(config, values, as_node='__input__') starts a new turn from the "
            "thread's head; leave checkpoint_id out of the config, or go back first with "
            "update_state(past_config, None, as_node='__copy__')"
        )
    if latest is not None:
        await travel._supersede(thread_id, latest, "update_state")  # refuses the unfinished
    head: Head = empty_head(spec, thread_id) if fresh else await heads.load(thread_id)
    origin = None if fresh else await ctx.get_run(head.checkpoint.run_id)
    cfg = (
        RunConfig.parse({"thread_id": thread_id})
        if origin is None
        else RunConfig.from_stored(origin.config, thread_id)
    )
    patch = dict(values or {})
    made = travel.new_run(thread_id, patch if as_input else None, cfg, RunStatus.PAUSED, None)
    run = made.replace(
        parent_run_id=None if origin is None else origin.run_id,
        parent_checkpoint_id=head.checkpoint.checkpoint_id or None,
        launch_reason=TIME_TRAVEL,
        mode="live",
    )
    writer = START if as_input else str(as_node)
    update = spec.schema.to_update(writer, patch)
    nxt, entries, writes = advance(
        spec,
        head,
        run.run_id,
        [TaskResult(writer, update)],
        step=-1 if as_input or fresh else head.checkpoint.step + 1,
        source="input" if as_input else "update",
    )
    status = RunStatus.PAUSED if nxt.checkpoint.next else RunStatus.COMPLETED
    run = run.replace(status=status)
    version = head.version if not fresh or thread is None else thread.version
    commit = StepCommit(thread_id, version, nxt.checkpoint, entries, new_run=run)
    edited = (run.parent_run_id, run.parent_checkpoint_id)
    changed = sorted(writes.changed)
    await commit_update(
        ctx.store, commit, run, edited, as_node, changed, actor=actor, reason=reason
    )
    return Fork(run, nxt.checkpoint.checkpoint_id, ())


async def end_by_update(
    travel: TimeTravel,
    thread: ThreadRecord,
    latest: RunRecord | None,
    values: Any,
    *,
    checkpoint_id: str | None,
    actor: str,
    reason: str,
    allow_irreversible: Iterable[str],
    also: Sequence[tuple[Any, str]],
) -> Fork:
    """``update_state(config, None, as_node="__end__")``: the checkpoint (the head by
    default) ended, nothing left to run (see the module docstring)."""
    if values is not None or also:
        raise ConfigError(
            "update_state(config, None, as_node='__end__') ends the turn: it clears the "
            "next tasks and takes no values (and no other update in its step); pass None "
            "as values, or write the values as a node with as_node=<node name>"
        )
    ctx = travel.ctx
    spec, heads = ctx.graph_heads()
    thread_id = thread.thread_id
    cp = await travel.checkpoint(thread_id, checkpoint_id or str(thread.head_checkpoint_id))
    at_head = cp.checkpoint_id == thread.head_checkpoint_id
    if (
        latest is not None
        and latest.status is RunStatus.INTERRUPTED
        and at_head
        and cp.run_id == latest.run_id
    ):
        await _dismiss(travel, latest, actor=actor, reason=reason)
        reopened, latest = await ctx.open_thread(thread_id)
        assert reopened is not None
        thread = reopened
    else:
        await travel._supersede(thread_id, latest, "update_state")  # refuses the unfinished
        reopened, latest = await ctx.open_thread(thread_id)
        assert reopened is not None
        thread = reopened
    origin = await ctx.get_run(cp.run_id)
    cfg = RunConfig.from_stored(origin.config, thread_id)
    policy = ReplayPolicy.of(
        "live", origin.run_id, allow_irreversible=frozenset(allow_irreversible), refire=True
    )
    made_run = travel.new_run(thread_id, None, cfg, RunStatus.COMPLETED, None)
    run = travel._lineage(made_run, origin, cp, policy)
    done = await _finished(travel, cp)  # a finished sibling's writes are kept
    made = await fork(spec, heads, ctx.store, cp, run, source="update", thread=thread, results=done)
    metadata = {
        k: v
        for k, v in made.checkpoint.metadata.items()
        if k not in ("sends", "joins", "deferred")  # nothing is left to run
    }
    checkpoint = dataclasses.replace(made.checkpoint, next=(), step=cp.step + 1, metadata=metadata)
    commit = StepCommit(thread_id, thread.version, checkpoint, made.log, new_run=run)
    edited = (cp.run_id, cp.checkpoint_id)
    await commit_update(ctx.store, commit, run, edited, END, [], actor=actor, reason=reason)
    return Fork(run, checkpoint.checkpoint_id, ())


async def input_again(
    travel: TimeTravel,
    thread: ThreadRecord,
    latest: RunRecord | None,
    cp: CheckpointRecord,
    values: Any,
    *,
    actor: str,
    reason: str,
    allow_irreversible: Iterable[str],
) -> Fork:
    """``update_state(<a run's input entry>, [StateUpdate(values, "__start__")],
    as_node="__copy__")``: that run's input given again as ``values``, on the state
    before it (``cp`` is the run's input checkpoint): a NEW paused run with lineage whose
    input checkpoint is a sibling of ``cp``; ``invoke(None, config)`` runs it."""
    if values is not None and not isinstance(values, Mapping):
        raise ConfigError(f"values must be a dict of state fields; got {values!r}")
    ctx = travel.ctx
    spec, heads = ctx.graph_heads()
    thread_id = thread.thread_id
    await travel._supersede(thread_id, latest, "update_state")  # refuses the unfinished
    reopened, latest = await ctx.open_thread(thread_id)
    assert reopened is not None
    before = (
        None
        if cp.parent_checkpoint_id is None
        else await travel.checkpoint(thread_id, cp.parent_checkpoint_id)
    )
    base = before or CheckpointRecord(  # the thread before its first input: no state
        checkpoint_id="",
        thread_id=thread_id,
        run_id=cp.run_id,
        step=cp.step - 1,
        version=0,
        parent_checkpoint_id=None,
        values={},
        logs={},
        next=(),
        metadata={},
    )
    origin = await ctx.get_run(cp.run_id)
    cfg = RunConfig.from_stored(origin.config, thread_id)
    policy = ReplayPolicy.of(
        "live", origin.run_id, allow_irreversible=frozenset(allow_irreversible), refire=True
    )
    patch = dict(values or {})
    run = travel._lineage(
        travel.new_run(thread_id, patch, cfg, RunStatus.PAUSED, None), origin, cp, policy
    )
    made = await fork(
        spec,
        heads,
        ctx.store,
        base,
        run,
        source="input",
        thread=reopened,
        sibling=before is None,
        results=(TaskResult(START, spec.schema.to_update(START, patch)),),
    )
    metadata = {
        "source": "input",
        "writes": [START],
        "forked_from": {
            "thread_id": thread_id,
            "checkpoint_id": cp.checkpoint_id,
            "run_id": cp.run_id,
        },
        **{k: v for k, v in made.checkpoint.metadata.items() if k in ("sends", "deferred")},
    }
    checkpoint = dataclasses.replace(made.checkpoint, step=cp.step, metadata=metadata)
    status = RunStatus.PAUSED if checkpoint.next else RunStatus.COMPLETED
    run = run.replace(status=status)
    commit = StepCommit(thread_id, reopened.version, checkpoint, made.log, new_run=run)
    edited = (cp.run_id, cp.checkpoint_id)
    changed = [c.channel for c in made.diff]
    await commit_update(ctx.store, commit, run, edited, START, changed, actor=actor, reason=reason)
    return Fork(run, checkpoint.checkpoint_id, made.diff)


async def _finished(travel: TimeTravel, cp: CheckpointRecord) -> tuple[TaskResult, ...]:
    """What the tasks of the step after ``cp`` that finished wrote (a sibling of a task
    that asked a question), kept as task writes."""
    spec = travel.ctx.graph
    sends = cp.metadata.get("sends") or ()
    nodes = {n: n for n in cp.next[: len(cp.next) - len(sends)]}
    for i, stored in enumerate(sends):
        node = decode_send(spec, stored).node
        nodes[f"{node}:{i}"] = node
    writes = await travel.store.get_task_writes(cp.thread_id, cp.checkpoint_id)
    return tuple(
        decode_result(spec, w.task, nodes[w.task], w.value)
        for w in writes
        if w.kind is WriteKind.WRITES and w.task in nodes
    )


async def _dismiss(
    travel: TimeTravel,
    run: RunRecord,
    *,
    actor: str,
    reason: str,
    action: str = "end",
    error: str = "ended by update_state(config, None, as_node='__end__'): its question dropped",
    details: Mapping[str, Any] | None = None,
) -> None:
    """End ``run``, stopped at its head, at its caller's explicit word (``as_node=
    "__end__"`` on its head; an update at its static breakpoint, :func:`at_breakpoint`):
    ``abandoned``, with an audit record; refused while one of its effects has an
    unknown outcome."""
    ctx = travel.ctx
    unknown = await ctx.store.list_effects(run_id=run.run_id, statuses=[EffectStatus.PENDING])
    if unknown:
        raise UnfinishedRunError(
            f"run {run.run_id} of thread {run.thread_id!r} has an effect whose outcome is "
            f"unknown ({unknown[0].effect_id}, {unknown[0].effect_type}): ending the run "
            "would drop it unsettled. Settle it first (check at the recipient, then "
            "app.resolve_effect(effect_id, outcome, ...)), then end the run"
        )

    def still_waiting(found: RunRecord) -> RunRecord:
        if found.status is not RunStatus.INTERRUPTED:
            raise RunStateError(
                f"run {found.run_id} is no longer stopped where it was ({found.status}); "
                "read the thread again with app.get_state(config) and decide anew"
            )
        return found

    before = {"before": str(run.status), **(details or {"as_node": END})}
    audit = audits.for_run(run, action, actor=actor, reason=reason, details=before)
    await stopping.give_up(ctx, run, still_waiting, by="update_state", error=error, audit=audit)


async def at_breakpoint(
    travel: TimeTravel, thread: ThreadRecord, latest: RunRecord | None, cp: CheckpointRecord
) -> bool:
    """Whether ``cp`` is the head of ``latest``, stopped at a static breakpoint
    (``interrupt_before`` / ``interrupt_after``) and asking no question: it owes no
    answer, so an update there may take its place (:func:`pass_breakpoint`)."""
    if latest is None or latest.status is not RunStatus.INTERRUPTED:
        return False
    if cp.checkpoint_id != thread.head_checkpoint_id or cp.run_id != latest.run_id:
        return False
    waiting = open_interrupts(await travel.store.get_task_writes(cp.thread_id, cp.checkpoint_id))
    return bool(waiting) and all(is_breakpoint(w.task, w.value) for w in waiting.values())


async def pass_breakpoint(travel: TimeTravel, run: RunRecord, *, actor: str, reason: str) -> None:
    """An update at ``run``'s static breakpoint: the update's new run takes its place
    (``run`` is ``abandoned``, with an audit record saying by what); ``invoke(None,
    config)`` goes on from the edited state."""
    await _dismiss(
        travel,
        run,
        actor=actor,
        reason=reason,
        action="supersede",
        error="superseded by an update_state at its breakpoint: the edited state goes on "
        "in the run that update made",
        details={"at": "breakpoint"},
    )


async def commit_update(
    store: Checkpointer,
    commit: StepCommit,
    run: RunRecord,
    edited: tuple[str | None, str | None],
    as_node: str | None,
    changed: list[str],
    *,
    actor: str,
    reason: str | None,
) -> None:
    """An ``update_state``'s step committed, then its audit record: ``run``, the run the
    commit makes or moves on, who edited which checkpoint (``edited``: its run id and
    checkpoint id) as which node, and the channels it changed."""
    await store.commit(commit)
    audit = audits.for_update(
        run,
        actor=actor,
        reason=reason,
        parent_run_id=edited[0],
        checkpoint_id=edited[1],
        new_checkpoint_id=commit.checkpoint.checkpoint_id,
        as_node=as_node,
        changed=changed,
    )
    await store.append_audit(audit)


__all__ = [
    "INPUT",
    "at_breakpoint",
    "commit_update",
    "end_by_update",
    "input_again",
    "pass_breakpoint",
    "start_by_update",
    "starts_a_turn",
]
