"""LangGraph's time travel, kept safe (guarantee 9): every fork is a NEW run.

LangGraph goes back in a thread's history two ways, and both work here as they do there:

* ``invoke(None, {"configurable": {"thread_id": t, "checkpoint_id": c}})`` (and
  ``ainvoke``, ``stream``, ``astream``; new input instead of ``None`` is applied on top):
  the nodes after ``c`` run again, from a fork of ``c`` (``source="fork"``), which
  becomes the thread's head; the history shows both branches;
* ``update_state(config, values, as_node=None)`` on any checkpoint of the thread (its head
  by default): a checkpoint with the edit (``source="update"``; ``as_node="__copy__"``: an
  unchanged copy, ``source="fork"``) becomes the head, and ``invoke(None, config)`` (the
  returned config or the thread's) runs what comes after it (an edit that leaves nothing
  to run ends its run ``completed``); on a thread with no checkpoint yet, or with
  ``as_node="__input__"``, the update is the input of a new turn
  (:mod:`oncegraph.runs.updates`).

Unlike LangGraph, each fork is a NEW run on the thread with lineage: ``parent_run_id``
(the run the checkpoint belongs to), ``parent_checkpoint_id``, ``launch_reason=
"time_travel"`` and mode ``live`` (real calls under the new run's own effect ids, so the
original's records are never reused as if they were this run's), where an
``irreversible`` tool is blocked (the run parks and names the effect) unless the call's
config lists it: ``{"configurable": {..., "allow_irreversible": ["refund"]}}``. Its
interrupts ask again, as LangGraph's do. Each fork has its own audit record.

A fork never continues, wakes or silently abandons an unfinished run: on a thread whose
latest run is unfinished (interrupted, parked, failed, running) it is refused, naming the
ways on (finish it, ``app.abandon(config)``, or ``app.branch(...)`` onto a new thread).
Two exceptions keep LangGraph's everyday calls working without hiding anything:
``Command(resume=...)`` with a config naming a checkpoint of the thread's latest,
interrupted run answers that run (it is the run the question belongs to); and an edit
nobody ran yet (a ``paused`` time-travel run) is superseded by the next fork (it is
``abandoned``, with an audit record saying by what), or, when the next
``update_state`` is on its own head, goes on being edited.

``invoke(None, config)`` on a thread whose latest run completed returns its state and
runs nothing (LangGraph's "replay from the final checkpoint").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from oncegraph.errors import ConfigError, RunNotFoundError, UnfinishedRunError
from oncegraph.graph.constants import END, START
from oncegraph.graph.spec import GraphSpec
from oncegraph.hitl.command import Command
from oncegraph.runs import audits, claims, stopping, subtravel
from oncegraph.runs.context import RunContext, RunResult
from oncegraph.runs.forks import COPY, TIME_TRAVEL, Fork, fork, last_writer
from oncegraph.runs.launch import Launch
from oncegraph.runs.lifecycle import thread_of
from oncegraph.runs.snapshots import INPUT_SUFFIX
from oncegraph.runs.updates import (
    INPUT,
    at_breakpoint,
    commit_update,
    end_by_update,
    input_again,
    pass_breakpoint,
    start_by_update,
    starts_a_turn,
)
from oncegraph.runtime.config import RunConfig
from oncegraph.runtime.driver import Emit
from oncegraph.runtime.engine import TaskResult
from oncegraph.runtime.replay import ReplayPolicy
from oncegraph.runtime.sends import decode_send
from oncegraph.storage.records import (
    UNFINISHED_STATUSES,
    CheckpointRecord,
    RunRecord,
    RunStatus,
    StepCommit,
    TaskWrite,
    ThreadRecord,
    WriteKind,
)

NewRun = Callable[[str, Any, RunConfig, RunStatus, Launch | None], RunRecord]
"""Builds a run record of the service's graph: ``(thread_id, input, cfg, status, launch)``."""


def allowed_irreversible(cfg: RunConfig) -> frozenset[str]:
    """The irreversible tools a time-travel call's config lets its live run send."""
    raw = cfg.configurable.get("allow_irreversible", ())
    names = (raw,) if isinstance(raw, str) else raw
    if not isinstance(names, list | tuple | set | frozenset) or not all(
        isinstance(n, str) for n in names
    ):
        raise ConfigError(
            "allow_irreversible takes a list of tool names, e.g. "
            f"{{'configurable': {{'allow_irreversible': ['refund']}}}}; got {raw!r}"
        )
    return frozenset(names)


def refuse_unfinished(thread_id: str, latest: RunRecord | None) -> None:
    """Time travel leaves no unfinished run behind: the error naming the ways on."""
    if latest is None or latest.status not in UNFINISHED_STATUSES:
        return
    answer = (
        " or invoke(Command(resume=...), config)" if latest.status is RunStatus.INTERRUPTED else ""
    )
    raise UnfinishedRunError(
        f"thread {thread_id!r} has an unfinished run {latest.run_id} ({latest.status}): "
        "going back to an earlier checkpoint would leave it behind with what it still owes "
        "(an answer, an effect to settle). Finish it first (invoke(None, config)"
        f"{answer}), give it up with app.abandon(config), or try the change on a thread "
        "of its own with app.branch(run_id, checkpoint_id, patch=..., reason=..., actor=...)"
    )


class TimeTravel:
    """Time travel over one :class:`~oncegraph.runs.context.RunContext`."""

    def __init__(self, ctx: RunContext, new_run: NewRun) -> None:
        self.ctx = ctx
        self.store = ctx.store
        self.new_run = new_run

    # -- invoke(input, {"checkpoint_id": old}) ------------------------------------------------

    async def target(
        self,
        thread_id: str,
        checkpoint_id: str,
        input: Any,
        latest: RunRecord | None,
        *,
        starts: Mapping[str, str] | None = None,
    ) -> CheckpointRecord | None:
        """The checkpoint a call goes back to, or None when the call is no time travel:
        an answer to the latest run's open question, which names one of its checkpoints
        (``starts``: a stateful subgraph's checkpoint, :mod:`oncegraph.runs.subtravel`;
        also the one the latest run went back to)."""
        cp = await self.checkpoint(thread_id, checkpoint_id)
        answering = isinstance(input, Command) and input.has_resume
        if (
            answering
            and latest is not None
            and latest.status is RunStatus.INTERRUPTED
            and (
                cp.run_id == latest.run_id
                or (starts and latest.config.get(subtravel.STARTS) == dict(starts))
            )
        ):
            return None
        return cp

    async def run(
        self,
        cp: CheckpointRecord,
        input: Any,
        cfg: RunConfig,
        emit: Emit,
        thread: ThreadRecord,
        latest: RunRecord | None,
        *,
        launch: Launch | None = None,
        starts: Mapping[str, str] | None = None,
    ) -> RunResult:
        """A new live run from a fork of ``cp`` (see the module docstring); ``starts``:
        where its stateful subgraphs' first calls start (:mod:`oncegraph.runs.subtravel`)."""
        thread_id = thread_of(cfg)
        answer: Any = None
        answering = isinstance(input, Command) and input.has_resume
        if answering:
            assert isinstance(input, Command)
            answer, input = input.resume, None
        await self._supersede(thread_id, latest, "time travel")
        origin = await self.ctx.get_run(cp.run_id)
        policy = ReplayPolicy.of(
            "live", origin.run_id, allow_irreversible=allowed_irreversible(cfg), refire=True
        )
        run = self._lineage(
            self.new_run(thread_id, input, cfg, RunStatus.RUNNING, launch), origin, cp, policy
        )
        if starts:
            run = run.replace(config={**run.config, subtravel.STARTS: dict(starts)})
        spec, heads = self.ctx.graph_heads()
        async with claims.new(self.store, run) as claim:
            made = await fork(spec, heads, self.store, cp, run, source="fork", thread=thread)
            await self.store.commit(
                StepCommit(
                    thread_id=thread_id,
                    expected_version=thread.version,
                    checkpoint=made.checkpoint,
                    log=made.log,
                    new_run=run,
                    fence=run.fencing_token,
                )
            )
            await self.store.append_audit(self._audit(run, cp, launch, cfg, policy))
            head = await heads.load(thread_id)
            driver = self.ctx.make_driver(cfg, emit, claim, policy)
            if answering:
                await self._answer(head.checkpoint, answer, run, claim.token)
            if run.input is not None:
                head = await driver.commit_input(head, run, new=False)
            return await self.ctx.drive(driver, head, run)

    # -- update_state ------------------------------------------------------------------------

    async def update(
        self,
        thread_id: str,
        values: Mapping[str, Any] | None,
        *,
        checkpoint_id: str | None = None,
        as_node: str | None = None,
        actor: str = "update_state",
        reason: str = "update_state",
        allow_irreversible: Iterable[str] = (),
        also: Sequence[tuple[Any, str]] = (),
    ) -> Fork:
        """LangGraph's ``update_state``: a checkpoint with the edit becomes the thread's
        head, under a new ``paused`` run (see the module docstring); ``allow_irreversible``
        (from the call's config) is what that live run may send. ``values`` may be a
        ``Command`` (its update, and its ``goto`` / ``Send`` routes); ``also``: more
        ``(values, as_node)`` written in the same step (a superstep of
        ``bulk_update_state``)."""
        spec, heads = self.ctx.graph_heads()
        await self.ctx.setup()
        thread, latest = await self.ctx.open_thread(thread_id)
        if starts_a_turn(thread, as_node):  # an input, or a new thread's first checkpoint
            if also:
                raise ConfigError(
                    "a superstep of several updates goes on a thread's head; start the "
                    "thread with an update of its own first (as_node='__input__')"
                )
            return await start_by_update(
                self,
                thread_id,
                thread,
                latest,
                values,
                as_node,
                checkpoint_id=checkpoint_id,
                actor=actor,
                reason=reason,
            )
        assert thread is not None and thread.head_checkpoint_id is not None
        if as_node == END:  # the turn ended there: nothing left to run
            return await end_by_update(
                self,
                thread,
                latest,
                values,
                checkpoint_id=checkpoint_id,
                actor=actor,
                reason=reason,
                allow_irreversible=allow_irreversible,
                also=also,
            )
        cp = await self.checkpoint(thread_id, checkpoint_id or thread.head_checkpoint_id)
        if as_node == START and _is_input_of(cp, latest, values, spec):
            assert latest is not None  # LangGraph's __start__ after __input__: applied already
            return Fork(latest, cp.checkpoint_id, ())
        copy = as_node == COPY
        if copy:
            if values is not None:  # a copy, then a step of updates on it
                (first, first_node), *more = _copy_updates(values, also)
                entry = (checkpoint_id or "").endswith(INPUT_SUFFIX)
                if entry and not more and first_node in (START, INPUT):  # its input anew
                    return await input_again(
                        self,
                        thread,
                        latest,
                        cp,
                        first,
                        actor=actor,
                        reason=reason,
                        allow_irreversible=allow_irreversible,
                    )
                copied = await self.update(
                    thread_id,
                    None,
                    checkpoint_id=checkpoint_id,
                    as_node=COPY,
                    actor=actor,
                    reason=reason,
                    allow_irreversible=allow_irreversible,
                )
                return await self.update(
                    thread_id,
                    first,
                    checkpoint_id=copied.checkpoint_id,
                    as_node=first_node,
                    actor=actor,
                    reason=reason,
                    allow_irreversible=allow_irreversible,
                    also=more,
                )
            writer = None
        else:
            for v, node in ((values, as_node), *also):
                if v is not None and not isinstance(v, Mapping | Command):
                    raise ConfigError(f"values must be a dict of state fields; got {v!r}")
                if node is not None and node not in spec.nodes and node != START:
                    raise ConfigError(
                        f"as_node {node!r} is not a node of this graph; nodes: {sorted(spec.nodes)}"
                    )
            writer = as_node or last_writer(spec, cp)
        results = (
            ()
            if copy or writer is None
            else tuple(_result(spec, node, v) for v, node in ((values, writer), *also))
        )
        if not also and not isinstance(values, Command):
            results = ()  # one node's fields: fork's patch as that node
        results = _as_tasks(spec, cp, results)
        editing = (
            latest is not None
            and latest.status is RunStatus.PAUSED
            and latest.launch_reason == TIME_TRAVEL
            and cp.checkpoint_id == thread.head_checkpoint_id
            and cp.run_id == latest.run_id
        )
        if editing:
            assert latest is not None
            run, new = latest, False
        else:
            if latest is not None and await at_breakpoint(self, thread, latest, cp):
                await pass_breakpoint(self, latest, actor=actor, reason=reason)
            else:
                await self._supersede(thread_id, latest, "update_state")
            origin = await self.ctx.get_run(cp.run_id)
            cfg = RunConfig.from_stored(origin.config, thread_id)
            policy = ReplayPolicy.of(
                "live", origin.run_id, allow_irreversible=frozenset(allow_irreversible), refire=True
            )
            made_run = self.new_run(thread_id, None, cfg, RunStatus.PAUSED, None)
            run, new = self._lineage(made_run, origin, cp, policy), True
        made = await fork(
            spec,
            heads,
            self.store,
            cp,
            run,
            source="fork" if copy else "update",
            patch=None if copy or results else dict(values or {}),
            as_node=writer,
            thread=thread,
            sibling=copy,
            results=results,
        )
        done = not made.checkpoint.next  # nothing left to run: the edit is the run's end
        if done and new:
            run = run.replace(status=RunStatus.COMPLETED)
        commit = StepCommit(
            thread_id,
            thread.version,
            made.checkpoint,
            made.log,
            new_run=run if new else None,
            run_status=RunStatus.COMPLETED if done and not new else None,
        )
        changed = [c.channel for c in made.diff]
        edited = (cp.run_id, cp.checkpoint_id)
        await commit_update(
            self.store, commit, run, edited, as_node, changed, actor=actor, reason=reason
        )
        return Fork(run, made.checkpoint.checkpoint_id, made.diff)

    # -- helpers -----------------------------------------------------------------------------

    async def checkpoint(self, thread_id: str, checkpoint_id: str) -> CheckpointRecord:
        """The stored checkpoint ``checkpoint_id`` names; a history's entry of a run's
        input (``<id>.input``) goes back to that run's input checkpoint (its input
        applied again, then every node after it)."""
        stored_id = checkpoint_id.removesuffix(INPUT_SUFFIX)
        cp = await self.store.get_checkpoint(thread_id, stored_id)
        if cp is None:
            raise RunNotFoundError(
                f"no checkpoint {checkpoint_id!r} on thread {thread_id!r} (pruned, or of "
                "another thread); list them with app.get_state_history(config)"
            )
        return cp

    async def _supersede(self, thread_id: str, latest: RunRecord | None, by: str) -> None:
        """An edit nobody ran yet gives way to the next fork; any other unfinished run
        refuses it."""
        if (
            latest is None
            or latest.status is not RunStatus.PAUSED
            or latest.launch_reason != TIME_TRAVEL
        ):
            refuse_unfinished(thread_id, latest)
            return

        def still_paused(found: RunRecord) -> RunRecord:
            if found.status is not RunStatus.PAUSED:
                refuse_unfinished(thread_id, found)
            return found

        audit = audits.for_run(
            latest,
            "supersede",
            actor=by,
            reason=f"a later {by} on the thread",
            details={"before": str(latest.status)},
        )
        error = f"superseded by a later {by} on the thread before it ran"
        await stopping.give_up(
            self.ctx, latest, still_paused, by="time_travel", error=error, audit=audit
        )

    def _lineage(
        self, run: RunRecord, origin: RunRecord, cp: CheckpointRecord, policy: ReplayPolicy
    ) -> RunRecord:
        return run.replace(
            parent_run_id=origin.run_id,
            parent_checkpoint_id=cp.checkpoint_id,
            launch_reason=TIME_TRAVEL,
            mode="live",
            config={**run.config, "replay": policy.to_json()},
        )

    def _audit(
        self,
        run: RunRecord,
        cp: CheckpointRecord,
        launch: Launch | None,
        cfg: RunConfig,
        policy: ReplayPolicy,
    ) -> Any:
        actor = (
            launch.actor if launch is not None else str(cfg.configurable.get("actor") or "invoke")
        )
        return audits.for_run(
            run,
            TIME_TRAVEL,
            actor=actor,
            reason=launch.reason if launch is not None and launch.reason else TIME_TRAVEL,
            details={
                "parent_run_id": run.parent_run_id,
                "checkpoint_id": cp.checkpoint_id,
                "mode": "live",
                "allow_irreversible": sorted(policy.allow_irreversible),
                **({"request_key": launch.request_key} if launch and launch.request_key else {}),
            },
        )

    async def _answer(self, cp: CheckpointRecord, answer: Any, run: RunRecord, token: int) -> None:
        """``Command(resume=...)`` going back to a checkpoint: the answer to the question
        its one next task asks (it asks again and takes this answer at once)."""
        if len(cp.next) != 1:
            raise ConfigError(
                "Command(resume=...) with a past checkpoint_id answers the one task after "
                f"it; that checkpoint runs {list(cp.next)} next. Go back with "
                "invoke(None, config), then answer the question it asks"
            )
        await self.store.put_task_write(
            TaskWrite(cp.thread_id, cp.checkpoint_id, cp.next[0], WriteKind.RESUME, 0, answer),
            run_id=run.run_id,
            fence=token,
        )


def _copy_updates(values: Any, also: Sequence[tuple[Any, str]]) -> list[tuple[Any, str]]:
    """The updates of ``update_state(config, [StateUpdate(values, as_node), ...],
    as_node="__copy__")``: a copy of the checkpoint, then these as one step on it."""
    items = values if isinstance(values, list | tuple) else None
    if (
        also
        or not items
        or not all(
            isinstance(i, list | tuple) and len(i) >= 2 and isinstance(i[1], str) for i in items
        )
    ):
        raise ConfigError(
            "update_state(config, values, as_node='__copy__') copies a checkpoint; values "
            "is None (an unchanged copy) or a list of StateUpdate(values, as_node) written "
            f"as one step on the copy; got {values!r}"
        )
    return [(i[0], i[1]) for i in items]


def _as_tasks(
    spec: GraphSpec, cp: CheckpointRecord, results: Sequence[TaskResult]
) -> tuple[TaskResult, ...]:
    """``results`` as the tasks of the step after ``cp`` (the n-th update as a node is
    that node's n-th task there, in LangGraph's order: ``Send`` tasks first, then the
    pulled nodes), so the history shows each task's result; an update as a node with no
    task left there keeps the node's name."""
    sends = cp.metadata.get("sends") or ()
    keys = [
        (decode_send(spec, s).node, f"{decode_send(spec, s).node}:{i}") for i, s in enumerate(sends)
    ]
    keys += [(n, n) for n in cp.next[: len(cp.next) - len(sends)]]
    free: dict[str, list[str]] = {}
    for node, key in keys:
        free.setdefault(node, []).append(key)
    out = []
    for r in results:
        left = free.get(r.node)
        out.append(dataclasses.replace(r, task=left.pop(0)) if left and not r.task else r)
    return tuple(out)


def _result(spec: GraphSpec, node: str, values: Any) -> TaskResult:
    """What ``node`` writes in an update: a dict of fields, or a ``Command``."""
    if isinstance(values, Command):
        return TaskResult(node, spec.schema.to_update(node, values.update), values.goto_nodes())
    return TaskResult(node, spec.schema.to_update(node, dict(values or {})))


def _is_input_of(
    cp: CheckpointRecord, latest: RunRecord | None, values: Any, spec: GraphSpec
) -> bool:
    """Whether ``cp`` is the input checkpoint of ``latest`` (an update nobody ran yet)
    with ``values`` as its input: an update as ``__start__`` then changes nothing."""
    if latest is None or latest.status is not RunStatus.PAUSED or cp.run_id != latest.run_id:
        return False
    if cp.metadata.get("source") != "input" or not isinstance(latest.input, Mapping):
        return False
    try:
        return bool(spec.schema.decode_update(latest.input) == dict(values or {}))
    except (ValueError, TypeError):
        return False


async def finished_state(
    ctx: RunContext, thread: ThreadRecord | None, latest: RunRecord | None
) -> RunResult | None:
    """``invoke(None, config)`` on a thread whose latest run completed: its state, and
    nothing runs (None: the call is something else)."""
    if thread is None or latest is None or latest.status is not RunStatus.COMPLETED:
        return None
    head = await ctx.heads.at(thread.thread_id, thread)
    if head.checkpoint.next:
        return None
    return RunResult(latest, dict(head.values))


__all__ = [
    "COPY",
    "TIME_TRAVEL",
    "Fork",
    "TimeTravel",
    "allowed_irreversible",
    "finished_state",
    "refuse_unfinished",
]
