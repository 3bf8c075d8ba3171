"""Answering an interrupted run: what an operator's Continue may do with a run, and the
claim an answer is given under (the run locked, still waiting, its question read, its
token fenced with the audited answer), for the run service's ``resume`` and ``run``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from oncegraph.errors import ConfigError, NoRunToResumeError
from oncegraph.graph.constants import END
from oncegraph.graph.spec import GraphSpec
from oncegraph.hitl.command import Command
from oncegraph.hitl.send import Send
from oncegraph.runs import audits, claims
from oncegraph.runs.answers import ByInterrupt, refuse_ambiguous
from oncegraph.runs.commands import NO_ANSWER
from oncegraph.runs.context import RunContext
from oncegraph.runs.lifecycle import FINAL_STATUSES
from oncegraph.runtime.claim import Claim
from oncegraph.runtime.config import RunConfig
from oncegraph.runtime.engine import GIVEN, Head, TaskResult, encode_result
from oncegraph.runtime.moves import (
    answer_order,
    count_writes,
    next_answer,
    next_write,
    open_interrupts,
)
from oncegraph.runtime.updates import result_of
from oncegraph.storage.records import AuditRecord, RunRecord, RunStatus, TaskWrite, WriteKind


def check_resumable(run: RunRecord, answer: Any) -> None:
    """May an operator's Continue go on with ``run`` (with ``answer``, or
    :data:`NO_ANSWER`)? Raises ``NoRunToResumeError`` saying what to do instead."""
    run_id = run.run_id
    if run.status in FINAL_STATUSES:
        raise NoRunToResumeError(
            f"run {run_id} is {run.status}; Continue is only for an unfinished run. To "
            "run it again, create a new run from its history with "
            "app.replay(run_id, mode='evidence' | 'simulation' | 'live', reason=...)"
        )
    if run.status is RunStatus.INTERRUPTED and answer is NO_ANSWER:
        raise NoRunToResumeError(
            f"run {run_id} is waiting for an answer to interrupt(); continue it with "
            "resume(run_id, answer=<answer>, actor=...)"
        )
    if answer is not NO_ANSWER and run.status is not RunStatus.INTERRUPTED:
        raise NoRunToResumeError(
            f"run {run_id} is {run.status}, not waiting for an answer; continue it without one"
        )


@dataclass(frozen=True, slots=True)
class Answering:
    """An answer's claim: the run as fenced (``running``), the head its question stands
    on, the task asked and how many answers that task got before."""

    claim: Claim
    run: RunRecord
    head: Head
    task: str
    answered: int
    more: tuple[tuple[str, int, Any], ...] = ()  # (task, answered, answer): by interrupt id
    audit: AuditRecord | None = None  # who answered what, when not appended by the fence
    # the update (and goto) the answer came with, as the task write it is kept as
    given: TaskWrite | None = None

    def write(self, answer: Any, head: Head | None = None) -> TaskWrite:
        """The answer's task write, on ``head`` (a migrated head; default: the one read)."""
        cp = (head or self.head).checkpoint
        run = self.run
        value = answer.answers[0][1] if isinstance(answer, ByInterrupt) else answer
        return TaskWrite(
            run.thread_id, cp.checkpoint_id, self.task, WriteKind.RESUME, self.answered, value
        )

    def writes(self, answer: Any, head: Head | None = None) -> list[TaskWrite]:
        """Every task write of the answer: one per question answered."""
        cp = (head or self.head).checkpoint
        rest = [
            TaskWrite(self.run.thread_id, cp.checkpoint_id, task, WriteKind.RESUME, n, value)
            for task, n, value in self.more
        ]
        return [*self.given_writes(head), self.write(answer, head), *rest]

    def given_writes(self, head: Head | None = None) -> list[TaskWrite]:
        """The answer's update as a task write of ``head`` (none if it came alone): written
        before the answer, so a crash between them leaves the question open with the
        update kept, never the answer without its update."""
        if self.given is None:
            return []
        return [replace(self.given, checkpoint_id=(head or self.head).checkpoint.checkpoint_id)]


async def take(
    ctx: RunContext,
    run: RunRecord,
    answer: Any,
    cfg: RunConfig,
    audit: AuditRecord | None = None,
    *,
    one: bool = False,
    fence: bool = True,
    given: Command[Any] | None = None,
) -> Answering:
    """Hold ``run`` to answer its next open interrupt: its lock, then one fence that sets
    it ``running`` with the audit record of who answered what (``audit``: its id, actor
    and reason). ``RunBusyError`` if another process holds it; ``NoRunToResumeError`` if
    it is no longer waiting. ``one``: ``answer`` answers a single question, refused
    (``AmbiguousAnswerError``, nothing written) while several are open
    (:func:`oncegraph.runs.answers.route` with ``defer`` left that to this check).
    ``fence=False``: the run is left as read (waiting, its token as it was), the audit
    record handed back in :attr:`Answering.audit`: the caller writes the answer, the
    run's next status and the record in one transaction under that token (a queued
    answer, :meth:`PgCheckpointer.queue_answer`), under this lock. ``given``: the
    ``Command`` the answer came in, when it brought an update or a goto (kept as a write
    of the answered step, written before the answer, and audited).

    What the answer is decided on (the run still waiting, its thread's head, the head's
    open questions) is read after the lock, once: the run and its thread in one request
    where the store can, the head's checkpoint from the in-process copy while current."""
    spec, heads = ctx.graph_heads()
    lock = await ctx.store.lock_run(run.run_id)
    if lock is None:
        raise await claims.busy_error(ctx.store, run.run_id)
    try:
        found, thread = await claims.open_run(ctx.store, run.run_id)
        if found is None or found.status is not RunStatus.INTERRUPTED:
            raise NoRunToResumeError(
                f"run {run.run_id} is no longer waiting for an answer "
                f"({found.status if found else 'gone'}); nothing was answered"
            )
        head = await heads.at(run.thread_id, thread)
        cp = head.checkpoint
        writes = await ctx.store.get_task_writes(run.thread_id, cp.checkpoint_id)
        waiting = open_interrupts(writes)
        if not waiting:
            raise NoRunToResumeError(f"run {run.run_id} has no pending interrupt to answer")
        if one and not isinstance(answer, ByInterrupt):
            refuse_ambiguous(
                cp.checkpoint_id, [waiting[t] for t in answer_order(spec.order, waiting)]
            )
        picked = (
            [t for t, _ in answer.answers if t in waiting]
            if isinstance(answer, ByInterrupt)
            else [next_answer(spec.order, waiting)]
        )
        if not picked:
            raise NoRunToResumeError(f"run {run.run_id}: the interrupts answered are not open")

        def answered_of(task: str) -> int:
            return count_writes(writes, task, WriteKind.RESUME)

        task = picked[0]
        answered = answered_of(task)
        question = waiting[task]
        values = dict(answer.answers) if isinstance(answer, ByInterrupt) else {task: answer}
        more = tuple((t, answered_of(t), values[t]) for t in picked[1:])
        kept = None
        if given is not None:
            result = given_result(spec, given)
            if result is not None:
                update = encode_result(spec, result)
                kept = next_write(writes, run, cp, GIVEN, WriteKind.WRITES, update)
        # Who approved what: the question, the answer and the actor, kept for good.
        record = audits.for_run(
            run,
            "answer",
            audit_id=audit.audit_id if audit else None,
            actor=audit.actor if audit else str(cfg.configurable.get("actor") or "invoke"),
            reason=audit.reason if audit else None,
            details={
                "node": task,
                "index": question.idx,
                "step": cp.step + 1,
                "checkpoint_id": cp.checkpoint_id,
                "question": question.value,
                "answer": values[task],
                **(
                    {
                        "also": [
                            {"node": t, "question": waiting[t].value, "answer": v}
                            for t, _, v in more
                        ]
                    }
                    if more
                    else {}
                ),
                **({"update": kept.value} if kept is not None else {}),
            },
        )
        if not fence:
            claim = Claim(run.run_id, found.fencing_token, lock)
            return Answering(claim, found, head, task, answered, more, audit=record, given=kept)
        taken = await ctx.store.fence_run(
            run.run_id,
            expected_token=found.fencing_token,
            owner=ctx.owner,
            status=RunStatus.RUNNING,
            audit=record,
        )
        if taken is None:
            raise await claims.busy_error(ctx.store, run.run_id)
    except BaseException:
        await lock.release()
        raise
    claim = Claim(run.run_id, taken.fencing_token, lock)
    return Answering(claim, taken, head, task, answered, more, given=kept)


async def queue_taken(
    context: RunContext,
    held: Answering,
    answer: Any,
    *,
    at_once: bool,
    migrated: Callable[[], Awaitable[Head | None]],
) -> RunRecord:
    """The answer ``held`` (taken under the run's lock) written and its run queued for the
    workers, the lock let go. ``at_once``: the store's ``queue_answer`` writes the answer,
    the queueing, the workers' notice and the audited answer in one transaction; else
    ``migrated`` gives the migrated head (or None) and they go one by one."""
    store = context.store
    run, claim = held.run, held.claim
    queue_answer = getattr(store, "queue_answer", None)
    queued: RunRecord | None
    try:
        if at_once:
            assert queue_answer is not None
            queued = await queue_answer(
                held.writes(answer), run.run_id, claim.token, audit=held.audit
            )
        else:
            head = await migrated() or held.head
            if queue_answer is not None:
                queued = await queue_answer(held.writes(answer, head), run.run_id, claim.token)
            else:
                for write in held.writes(answer, head):
                    await store.put_task_write(write, run_id=run.run_id, fence=claim.token)
                queued = await store.fence_run(
                    run.run_id, expected_token=claim.token, owner=None, status=RunStatus.QUEUED
                )
    finally:
        await claim.release()
    if queued is None:  # another process took it between the answer and the queueing
        raise await claims.busy_error(store, run.run_id)
    announce = getattr(store, "announce_queued", None)
    if queue_answer is None and announce is not None:  # wake a listening worker now
        await announce(run.run_id)
    return queued


def given_result(spec: GraphSpec, given: Command[Any]) -> TaskResult | None:
    """The update and goto of an answer's ``Command`` as the writes it makes (keys the
    state has no field for dropped, as from any update); None when it makes none.
    A goto naming no node of the graph is refused before anything is answered."""
    for target in given.goto_nodes():
        name = target.node if isinstance(target, Send) else target
        if name != END and name not in spec.nodes:
            raise ConfigError(
                f"Command(resume=..., goto={name!r}) names no node of this graph; nodes: "
                f"{sorted(spec.nodes)}. Nothing was answered."
            )
    result = result_of(spec, GIVEN, Command(update=given.update, goto=given.goto), GIVEN)
    if not result.update and not result.more and not result.goto:
        return None
    return result


__all__ = ["Answering", "check_resumable", "given_result", "take"]
