"""The one async driver of the run loop: the engine decides, the driver does.

Every run path (invoke, ainvoke, stream, astream, a worker, an operator's continue) ends
up in :meth:`Driver.run`; the paths differ only in what they do with emitted events.
Per step::

    task_writes = <read, unless this driver committed the head itself>
    plan = plan_step(head, task_writes)          (pure)
    outcomes = <run plan.todo concurrently; a finished sibling's writes are kept>
    decision = decide(spec, head, plan, outcomes)  (pure)
    <execute the decision: ONE commit, or a status, or stop>

Invariants: a step's next nodes are committed before they run (law 1); the commit is a
compare-and-swap on the thread version carrying the run's fence (law 8); stream events
of a step are emitted only after its commit; every write carries ``fence`` so a writer
that lost the run writes nothing. Crash points sit on the transitions:
``before_checkpoint`` -> [commit] -> ``after_effect_record`` (when effect results rode
the commit) -> ``after_checkpoint``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from oncegraph.errors import (
    NeedsReviewError,
    NodeError,
    OnceGraphError,
    RecursionLimitError,
    StaleStateError,
    StorageError,
)
from oncegraph.graph.constants import START
from oncegraph.graph.spec import GraphSpec
from oncegraph.runtime.claim import Claim
from oncegraph.runtime.config import RunConfig
from oncegraph.runtime.context import TaskContext
from oncegraph.runtime.engine import (
    Commit,
    Crash,
    Decision,
    Fail,
    Head,
    Interrupt,
    Park,
    TaskResult,
    advance,
    decide,
    plan_step,
)
from oncegraph.runtime.heads import Heads
from oncegraph.runtime.replay import ReplayPolicy
from oncegraph.runtime.tasks import run_task
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import RunRecord, RunStatus, StepCommit, TaskWrite

log = logging.getLogger("oncegraph.driver")

Emit = Callable[[str, Any], None]
COMMIT_RETRY_DELAYS = (0.05, 0.2, 0.8)


def ignore(mode: str, payload: Any) -> None:
    """An ``Emit`` that drops every event (``invoke``)."""
    return None


@dataclass(slots=True)
class Driver:
    """Executes one run's steps against one store.

    ``claim`` is the run's claim (:mod:`oncegraph.runtime.claim`): every write carries its
    fencing token. ``interrupts`` collects the questions of the step that interrupted.
    """

    spec: GraphSpec
    store: Checkpointer
    heads: Heads
    config: RunConfig
    emit: Emit = ignore
    claim: Claim | None = None
    replay: ReplayPolicy | None = None  # a replay run: what its effects may touch
    interrupts: list[dict[str, Any]] = field(default_factory=list)
    # The checkpoint this driver committed last: no task of the step after it can have
    # run before, so it has no task writes and no effect records to look up.
    fresh: str | None = None

    @property
    def fence(self) -> int | None:
        return self.claim.token if self.claim is not None else None

    # -- the input step --------------------------------------------------------------------

    async def commit_input(self, head: Head, run: RunRecord, *, new: bool) -> Head:
        """The run's input checkpoint (step -1): the first nodes, before any runs."""
        update = self.spec.schema.decode_update(run.input)
        nxt, entries, _ = advance(
            self.spec, head, run.run_id, [TaskResult(START, update)], step=-1, source="input"
        )
        status = RunStatus.COMPLETED if not nxt.checkpoint.next else RunStatus.RUNNING
        await self._commit(
            StepCommit(
                thread_id=run.thread_id,
                expected_version=head.version,
                checkpoint=nxt.checkpoint,
                log=entries,
                new_run=run if new else None,
                run_status=status,
                fence=self.fence,
            ),
            nxt,
        )
        self._emit_step(nxt, {START: update})
        return nxt

    # -- the loop --------------------------------------------------------------------------

    async def run(self, head: Head, run: RunRecord) -> Head:
        """Run steps until the run ends, interrupts, parks or fails (then raise)."""
        steps = 0
        while head.checkpoint.next:
            if steps >= self.config.recursion_limit:
                error = RecursionLimitError(
                    f"run {run.run_id} took {steps} steps without finishing; raise "
                    "config['recursion_limit'] if that is expected, or fix the loop"
                )
                await self.set_status(run, RunStatus.FAILED, str(error))
                raise error
            steps += 1
            head = await self._step(head, run)
            if self.interrupts:
                break
        return head

    async def _step(self, head: Head, run: RunRecord) -> Head:
        cp = head.checkpoint
        task_writes: list[TaskWrite] = []
        if cp.checkpoint_id != self.fresh:  # loaded: an earlier attempt may have left writes
            task_writes = await self.store.get_task_writes(run.thread_id, cp.checkpoint_id)
        plan = plan_step(self.spec, head, task_writes)
        loop = asyncio.get_running_loop()
        contexts = [
            TaskContext(
                run_id=run.run_id,
                thread_id=run.thread_id,
                node=node,
                step=cp.step + 1,
                checkpoint_id=cp.checkpoint_id,
                store=self.store,
                config=self.config,
                loop=loop,
                emit=self.emit,
                fault_plan=self.config.fault_plan,
                resume_values=list(plan.resumes.get(node) or self._replayed_answers(node, cp)),
                asked=list(plan.questions.get(node, ())),
                may_fold=plan.alone,
                fresh=cp.checkpoint_id == self.fresh,
                claim=self.claim,
                replay=self.replay,
            )
            for node in plan.todo
        ]
        save = None if plan.alone else self._save_task
        if len(contexts) == 1:
            outcomes = [await run_task(self.spec, contexts[0], head, save)]
        else:
            outcomes = list(
                await asyncio.gather(*(run_task(self.spec, c, head, save) for c in contexts))
            )
        decision = decide(self.spec, head, plan, outcomes, run_id=run.run_id)
        staged = [e for ctx in contexts for e in ctx.staged_effects]
        return await self._execute(decision, head, run, staged)

    async def _execute(
        self, decision: Decision, head: Head, run: RunRecord, staged: list[Any]
    ) -> Head:
        if isinstance(decision, Crash):
            raise decision.signal
        if not isinstance(decision, Commit):
            await self._save_staged(staged)  # a completed call's result is never dropped
        if isinstance(decision, Park):
            await self.set_status(run, RunStatus.NEEDS_REVIEW, decision.reason)
            raise NeedsReviewError(decision.reason, run_id=run.run_id, effect_id=decision.effect_id)
        if isinstance(decision, Fail):
            await self.set_status(run, RunStatus.FAILED, decision.description)
            if isinstance(decision.error, OnceGraphError):
                raise decision.error
            raise NodeError(_failure_message(decision, run), node=decision.node) from (
                decision.error
            )
        if isinstance(decision, Interrupt):
            cp = head.checkpoint
            for node, value, index in decision.waits:
                await self.store.put_task_write(
                    TaskWrite(run.thread_id, cp.checkpoint_id, node, "interrupt", index, value),
                    run_id=run.run_id,
                    fence=self.fence,
                )
                self.interrupts.append({"value": value, "node": node, "index": index})
            await self.set_status(run, RunStatus.INTERRUPTED, None)
            self.emit("updates", {"__interrupt__": list(self.interrupts)})
            return head
        return await self._commit_step(decision, head, run, staged)

    async def _commit_step(
        self, decision: Commit, head: Head, run: RunRecord, staged: list[Any]
    ) -> Head:
        plan = self.config.fault_plan
        if plan is not None:
            plan.hit("before_checkpoint")
        nxt = decision.head
        commit = StepCommit(
            thread_id=run.thread_id,
            expected_version=head.version,
            checkpoint=nxt.checkpoint,
            log=decision.log,
            run_status=decision.run_status,
            effects=staged,
            clear_task_writes_of=head.checkpoint.checkpoint_id
            if decision.clear_task_writes
            else None,
            fence=self.fence,
        )
        try:
            await self._commit(commit, nxt)
        except StorageError:
            raise  # a lost CAS or lease writes nothing, not even the run's status
        except OnceGraphError as exc:  # the step cannot be stored (e.g. a value too large)
            await self.set_status(run, RunStatus.FAILED, f"{type(exc).__name__}: {exc}")
            raise
        if plan is not None:
            if staged:
                plan.hit("after_effect_record")
            plan.hit("after_checkpoint")
        self._emit_step(nxt, {r.node: r.update for r in decision.results})
        return nxt

    def _replayed_answers(self, node: str, cp: Any) -> tuple[Any, ...]:
        """In a replay: the answers the original run got at this node and step."""
        if self.replay is None:
            return ()
        return self.replay.answers.get((node, cp.step + 1), ())

    # -- writes ----------------------------------------------------------------------------

    async def _save_task(self, ctx: TaskContext, result: TaskResult) -> None:
        """A sibling finished: keep its writes so a crash re-runs only the others."""
        await self._save_staged(ctx.staged_effects)
        ctx.staged_effects.clear()
        await self.store.put_task_write(
            TaskWrite(
                ctx.thread_id,
                ctx.checkpoint_id,
                ctx.node,
                "writes",
                0,
                {
                    "update": self.spec.schema.encode_update(result.update),
                    "goto": list(result.goto),
                },
            ),
            run_id=ctx.run_id,
            fence=self.fence,
        )

    async def _save_staged(self, staged: list[Any]) -> None:
        for record in staged:
            await self.store.save_effect(record, fence=self.fence)

    async def _commit(self, commit: StepCommit, head: Head) -> None:
        """Commit with retries on transient store errors; a lost CAS is final (law 8)."""
        for attempt, delay in enumerate((*COMMIT_RETRY_DELAYS, None)):
            try:
                await self.store.commit(commit)
                break
            except StaleStateError:
                if attempt and await self._landed(commit):
                    break  # an earlier attempt committed before its connection failed
                raise
            except StorageError as exc:
                if type(exc) is not StorageError:
                    raise
                if delay is None:
                    log.error("checkpoint commit failed for %s: %s", commit.thread_id, exc)
                    raise StorageError(
                        f"{exc}. The step was not recorded: no node or tool after it ran; the "
                        "run can be resumed from its last checkpoint once the store is back."
                    ) from exc
                await self.config.sleep(delay)
        self.fresh = commit.checkpoint.checkpoint_id
        self.heads.remember(head)

    async def _landed(self, commit: StepCommit) -> bool:
        thread = await self.store.get_thread(commit.thread_id)
        return thread is not None and thread.head_checkpoint_id == commit.checkpoint.checkpoint_id

    async def set_status(self, run: RunRecord, status: RunStatus, error: str | None) -> None:
        await self.store.update_run(run.run_id, status=status, error=error, fence=self.fence)

    def _emit_step(self, head: Head, updates: Mapping[str, Any]) -> None:
        for node, update in updates.items():
            self.emit("updates", {node: dict(update)})
        self.emit("values", head.values)


def _failure_message(decision: Fail, run: RunRecord) -> str:
    if decision.applying:
        nodes = ", ".join(decision.nodes)
        return f"applying the writes of {nodes} failed: {decision.description}"
    return (
        f"node {decision.node!r} raised {decision.description}; the run {run.run_id} is "
        "failed and can be resumed with invoke(None, config)"
    )


__all__ = ["COMMIT_RETRY_DELAYS", "Driver", "Emit", "ignore"]
