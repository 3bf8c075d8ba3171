"""The driver's step commit path, mixed into :class:`~oncegraph.runtime.driver.Driver`.

A step's decision to commit becomes ONE compare-and-swap on the thread's version, with
the fence of the run's claim: the checkpoint, its log entries, the effect results that
ride it, the intents of the next step's calls (:mod:`oncegraph.ledger.planned`) and the
clearing of the step's task writes. A transient store error is retried
(:data:`COMMIT_RETRY_DELAYS`); a lost compare-and-swap is final: the run's thread moved
on. A sibling that finished in a step of several keeps its writes as task writes
(:meth:`CommitPath._save_task`), so a crash re-runs only the others.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from oncegraph._retrying import attempts
from oncegraph.errors import (
    OnceGraphError,
    ParentCommand,
    StaleStateError,
    StorageError,
    ThreadMovedOnError,
)
from oncegraph.runtime import durability
from oncegraph.runtime.context import CallSite
from oncegraph.runtime.decisions import Commit, Fail
from oncegraph.runtime.driverparts import DriverParts
from oncegraph.runtime.engine import Head, TaskResult, encode_result
from oncegraph.runtime.failures import moved_on_error
from oncegraph.runtime.moves import intent_planners, may_plan_intents
from oncegraph.runtime.stepevents import emit_step, emit_update, finished_shown
from oncegraph.storage.keys import hash_key
from oncegraph.storage.records import (
    EffectRecord,
    RunRecord,
    RunStatus,
    StepCommit,
    TaskWrite,
    WriteKind,
)

if TYPE_CHECKING:
    from oncegraph.runtime.context import TaskContext

log = logging.getLogger("oncegraph.driver")

COMMIT_RETRY_DELAYS = (0.05, 0.2, 0.8)


class CommitPath(DriverParts):
    """How the driver writes a step: its commit, and a finished sibling's writes."""

    __slots__ = ()

    async def _commit_step(
        self, decision: Commit, head: Head, run: RunRecord, staged: list[Any]
    ) -> Head:
        plan = self.config.fault_plan
        if plan is not None:
            plan.hit("before_checkpoint")
        nxt = self._marked(decision.head, head)
        intents = await self._intents(nxt, run)
        commit = StepCommit(
            thread_id=run.thread_id,
            expected_version=head.version,
            checkpoint=nxt.checkpoint,
            log=decision.log,
            run_status=decision.run_status if self.parent is None else None,
            effects=staged,
            intents=intents,
            clear_task_writes_of=head.checkpoint.checkpoint_id
            if decision.clear_task_writes
            else None,
            fence=self.fence,
        )
        self._planned, self._planned_written = {}, False
        try:
            inserted = await self._commit(commit, nxt)
        except StaleStateError as exc:  # another run of the thread committed first
            raise await self._moved_on(run) from exc
        except StorageError:
            raise  # a lost lease writes nothing, not even the run's status
        except OnceGraphError as exc:  # the step cannot be stored (e.g. a value too large)
            await self.set_status(run, RunStatus.FAILED, f"{type(exc).__name__}: {exc}")
            raise
        self._planned = {e.effect_id: e for e in intents}
        # every intent inserted by this commit: the rows are exactly these records
        self._planned_written = bool(intents) and inserted == len(intents)
        if plan is not None:
            if staged:
                plan.hit("after_effect_record")
            plan.hit("after_checkpoint")
        cp, done = durability.shown_parent(head.checkpoint, self._base), decision.results
        emit_step(self.emit, self.spec, self._where, nxt, cp, done, self._streamed)
        return nxt

    async def _intents(self, nxt: Head, run: RunRecord) -> list[EffectRecord]:
        """The intents of the calls the next step will make, to write with this step's
        checkpoint (:mod:`oncegraph.ledger.planned`): only at the top level of a live run
        whose next step surely runs now (no breakpoint can stop it, the recursion limit
        is not reached), from nodes that can tell their calls from the state."""
        cp = nxt.checkpoint
        cfg = self.config
        allowed = may_plan_intents(
            self.spec,
            cp,
            nested=self.parent is not None or bool(self.scope),
            replay=self.replay is not None,
            steps=self.steps,
            recursion_limit=cfg.recursion_limit,
            before=cfg.interrupt_before,
            after=cfg.interrupt_after,
        )
        planners = intent_planners(self.spec, cp) if allowed else []
        if not planners:
            return []
        key = await hash_key(self.store)  # request hashes are keyed by the store
        intents: list[EffectRecord] = []
        for name, planner in planners:
            intents += planner(
                nxt.values,
                hash_key=key,
                site=CallSite(
                    key_run_id=run.run_id,
                    run_id=run.run_id,
                    thread_id=self.root_thread or run.thread_id,
                    node=name,
                    checkpoint_id=cp.checkpoint_id,
                ),
            )
        return intents

    async def _save_task(self, ctx: TaskContext, result: TaskResult) -> None:
        """A sibling finished: keep its writes so a crash re-runs only the others."""
        await self._save_staged(ctx.staged_effects)
        ctx.staged_effects.clear()
        await self.store.put_task_write(
            TaskWrite(
                ctx.checkpoint_thread,
                ctx.checkpoint_id,
                ctx.task_key,
                WriteKind.WRITES,
                0,
                encode_result(self.spec, result),
            ),
            run_id=ctx.run_id,
            fence=self.fence,
        )
        if finished_shown(self.emit):  # its writes are kept: shown now, as it finished
            emit_update(self.emit, self.spec, result, (ctx.checkpoint_id, ctx.step - 1))
            self._streamed.add(result.key)

    async def _keep_error(self, decision: Fail, head: Head, run: RunRecord) -> None:
        """The failed task's error, kept with its step's writes (the state's view shows it
        on the task; the step's commit, when it runs again, clears it). A subgraph's
        command for its parent is no error."""
        if decision.applying or not decision.task or isinstance(decision.error, ParentCommand):
            return
        error = decision.error  # as the run's error text is kept: in its words
        write = TaskWrite(
            run.thread_id,
            head.checkpoint.checkpoint_id,
            decision.task,
            WriteKind.ERROR,
            0,
            repr(error)[:2000],
        )
        try:
            await self.store.put_task_write(write, run_id=run.run_id, fence=self.fence)
        except StorageError as exc:  # a view's detail: the run's own status decides
            log.warning(
                "run %s: the error of task %s was not kept: %s", run.run_id, write.task, exc
            )

    async def _save_staged(self, staged: list[Any]) -> None:
        for record in staged:
            await self.store.save_effect(record, fence=self.fence)

    async def _commit(self, commit: StepCommit, head: Head) -> int | None:
        """Commit with retries on transient store errors; a lost CAS is final (guarantee 8).
        Returns what the store says of the planned intents it inserted (None: unknown)."""
        inserted: int | None = None
        async for attempt in attempts(COMMIT_RETRY_DELAYS, self.config.sleep):
            try:
                inserted = await self.store.commit(commit)
                break
            except StaleStateError:
                if attempt.number > 1 and await self._landed(commit):
                    break  # an earlier attempt committed before its connection failed
                raise
            except StorageError as exc:
                if type(exc) is not StorageError:
                    raise
                if attempt.last:
                    log.error("checkpoint commit failed for %s: %s", commit.thread_id, exc)
                    raise StorageError(
                        f"{exc}. The step was not recorded: no node or tool after it ran; the "
                        "run can be resumed from its last checkpoint once the store is back."
                    ) from exc
        self.fresh = commit.checkpoint.checkpoint_id
        self.heads.remember(head)
        if not commit.checkpoint.next:  # the call's last step: it exits here
            self._exited = True
        return inserted

    def _marked(self, nxt: Head, head: Head) -> Head:
        """``nxt``, about to be committed on ``head``, as a step of a call under
        ``durability="exit"`` (:func:`oncegraph.runtime.durability.marked`); as it is
        otherwise. The call's first commit with new input sets its base."""
        if self.config.durability != durability.EXIT:
            return nxt
        if self._base is None:
            self._base = durability.new_call(head.checkpoint)
        return durability.marked(nxt, self._base)

    async def _moved_on(self, run: RunRecord) -> ThreadMovedOnError:
        """A step of ``run`` lost the thread's compare-and-swap: another run of the thread
        committed since this run's last step. The run is failed (fenced: only while it is
        still ours), so nobody continues it from the other run's head."""
        error = moved_on_error(run.run_id, run.thread_id, "its step was not written")
        if self.parent is None:
            try:
                await self.set_status(run, RunStatus.FAILED, str(error))
            except StorageError as exc:  # lost meanwhile: its new holder decides
                log.warning("run %s: could not be marked failed: %s", run.run_id, exc)
        return error

    async def _landed(self, commit: StepCommit) -> bool:
        thread = await self.store.get_thread(commit.thread_id)
        return thread is not None and thread.head_checkpoint_id == commit.checkpoint.checkpoint_id


__all__ = ["COMMIT_RETRY_DELAYS", "CommitPath"]
