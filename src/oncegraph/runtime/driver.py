"""The one async driver of the run loop. Every path (invoke, ainvoke, stream, astream)
runs :meth:`Runner.run`; the paths differ only in what they do with emitted events.

Per step: the head checkpoint names the nodes to run (law 1); the tasks run
concurrently; a finished sibling's writes are saved as task writes when the step has
several tasks (so only unfinished siblings re-run after a crash); then the engine builds
the next checkpoint and ONE commit, a compare-and-swap on the thread version, records
it together with the effect results that rode along (law 8). Stream events for a step
are emitted only after its commit.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from oncegraph.errors import (
    ConfigError,
    GraphInterrupt,
    IncompatibleVersionError,
    InterruptSwallowedError,
    NeedsReviewError,
    NodeError,
    NodeTimeoutError,
    NoRunToResumeError,
    OnceGraphError,
    RecursionLimitError,
    StaleStateError,
    StorageError,
    UnfinishedRunError,
    _CrashSignal,
    _ParkSignal,
)
from oncegraph.graph.constants import START
from oncegraph.graph.io import input_update, output_values
from oncegraph.hitl.command import Command
from oncegraph.ids import new_run_id
from oncegraph.runtime.config import RunConfig
from oncegraph.runtime.context import TaskContext, reset_task, set_task
from oncegraph.runtime.engine import Head, TaskResult, advance
from oncegraph.storage.records import (
    RunRecord,
    RunStatus,
    StepCommit,
    TaskWrite,
)

if TYPE_CHECKING:
    from oncegraph.graph.spec import NodeSpec
    from oncegraph.runtime.app import CompiledGraph
    from oncegraph.storage.protocols import Checkpointer

log = logging.getLogger("oncegraph.driver")

Emit = Callable[[str, Any], None]
COMMIT_RETRY_DELAYS = (0.05, 0.2, 0.8)


@dataclass(slots=True)
class _Outcome:
    node: str
    result: TaskResult | None = None
    interrupt: tuple[Any, int] | None = None
    error: BaseException | None = None
    signal: BaseException | None = None  # crash or park: stops the run without writes


class Runner:
    def __init__(
        self, app: CompiledGraph, store: Checkpointer, input: Any, config: RunConfig, emit: Emit
    ) -> None:
        self.app = app
        self.spec = app.spec
        self.store = store
        self.input = input
        self.config = config
        self.emit = emit
        self.fault_plan = config.fault_plan
        self.run: RunRecord | None = None
        self.interrupts: list[dict[str, Any]] = []
        # The checkpoint this runner committed last: no task of the step after it can have
        # run before, so it has no task writes and no effect records to look up.
        self._fresh: str | None = None

    # -- entry -----------------------------------------------------------------------------

    async def execute(self) -> dict[str, Any]:
        thread_id = self.config.thread_id
        assert thread_id is not None
        head, run = await self._start(thread_id)
        self.run = run
        head = await self._loop(head, run)
        values = dict(head.values)
        if self.interrupts:
            values["__interrupt__"] = list(self.interrupts)
        return output_values(self.spec, values)

    async def _start(self, thread_id: str) -> tuple[Head, RunRecord]:
        if self.config.run_id is not None:  # a worker executes exactly this run
            run = await self.store.get_run(self.config.run_id)
            if run is None or run.thread_id != thread_id:
                raise NoRunToResumeError(f"no run {self.config.run_id!r} on thread {thread_id!r}")
            if self.input is not None:
                raise ConfigError("config['run_id'] continues a stored run; pass input=None")
            return await self._continue(thread_id, run)
        latest = await self._latest_run(thread_id)
        inp = self.input
        if isinstance(inp, Command) and inp.has_resume:
            return await self._resume(thread_id, latest, inp.resume)
        if inp is None:
            return await self._continue(thread_id, latest)
        if latest is not None and latest.status in _BLOCKING:
            raise UnfinishedRunError(
                f"thread {thread_id!r} has an unfinished run {latest.run_id} "
                f"({latest.status}). Continue it with invoke(None, config)"
                + (
                    " or invoke(Command(resume=...), config)"
                    if latest.status == "interrupted"
                    else ""
                )
                + ", or abandon it with app.abandon(config) before sending new input."
            )
        head = await self.app.load_head(self.store, thread_id)
        run = self.run = RunRecord(
            run_id=new_run_id(),
            thread_id=thread_id,
            status=RunStatus.RUNNING,
            workflow_name=self.spec.name,
            workflow_version=self.spec.version,
            state_schema_version=self.spec.state_schema_version,
            graph_fingerprint=self.app.fingerprint,
            launch_reason="invoke",
            input=input_json(inp, self.spec),
            config=self.config.to_json(),
        )
        return await self._commit_input(head, run, new=True), run

    async def _commit_input(self, head: Head, run: RunRecord, *, new: bool) -> Head:
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
                fence=self._fence,
            ),
            nxt,
        )
        self._emit_step(nxt, {START: update})
        return nxt

    async def _latest_run(self, thread_id: str) -> RunRecord | None:
        runs = await self.store.list_runs(thread_id=thread_id, limit=1)
        return runs[0] if runs else None

    def _check_version(self, run: RunRecord) -> None:
        spec = self.spec
        mismatches = []
        if run.workflow_name != spec.name:
            mismatches.append(f"workflow_name {run.workflow_name!r} != {spec.name!r}")
        if run.workflow_version != spec.version:
            mismatches.append(f"workflow_version {run.workflow_version!r} != {spec.version!r}")
        if run.state_schema_version != spec.state_schema_version:
            mismatches.append(
                f"state_schema_version {run.state_schema_version} != {spec.state_schema_version}"
            )
        if run.graph_fingerprint and run.graph_fingerprint != self.app.fingerprint:
            mismatches.append("graph fingerprint differs (nodes, edges or routes changed)")
        if mismatches:
            raise IncompatibleVersionError(
                f"run {run.run_id} was started by another version of this graph: "
                + "; ".join(mismatches)
                + ". It is not resumed on a guess. Options: register a state migration, run it "
                "on the old graph version, or review it manually (app.abandon(config))."
            )

    async def _continue(self, thread_id: str, run: RunRecord | None) -> tuple[Head, RunRecord]:
        self.run = run  # every write from here on carries the run's fence
        if run is None or run.status in (RunStatus.COMPLETED, RunStatus.ABANDONED):
            raise NoRunToResumeError(
                f"thread {thread_id!r} has no unfinished run to continue; send new input "
                "instead of None"
            )
        if run.status is RunStatus.INTERRUPTED:
            raise NoRunToResumeError(
                f"run {run.run_id} is waiting for an answer to interrupt(); continue it with "
                "invoke(Command(resume=<answer>), config)"
            )
        if run.status is RunStatus.NEEDS_REVIEW:
            raise NeedsReviewError(
                f"run {run.run_id} is parked for review: {run.error}", run_id=run.run_id
            )
        self._check_version(run)
        head = await self.app.load_head(self.store, thread_id)
        if head.checkpoint.run_id != run.run_id:  # queued: never started
            await self.store.update_run(run.run_id, status=RunStatus.RUNNING, fence=self._fence)
            return await self._commit_input(head, run, new=False), run
        await self.store.update_run(run.run_id, status=RunStatus.RUNNING, fence=self._fence)
        return head, run

    async def _resume(
        self, thread_id: str, run: RunRecord | None, answer: Any
    ) -> tuple[Head, RunRecord]:
        self.run = run
        if run is None or run.status is not RunStatus.INTERRUPTED:
            raise NoRunToResumeError(
                f"thread {thread_id!r} has no interrupted run; Command(resume=...) answers an "
                "interrupt(). Use invoke(None, config) to continue a crashed or failed run."
            )
        self._check_version(run)
        head = await self.app.load_head(self.store, thread_id)
        writes = await self.store.get_task_writes(thread_id, head.checkpoint.checkpoint_id)
        waiting = open_interrupts(writes)
        if not waiting:
            raise NoRunToResumeError(f"run {run.run_id} has no pending interrupt to answer")
        task = min(waiting, key=lambda t: self.spec.order.get(t, 0))
        answered = sum(1 for w in writes if w.kind == "resume" and w.task == task)
        await self.store.put_task_write(
            TaskWrite(thread_id, head.checkpoint.checkpoint_id, task, "resume", answered, answer)
        )
        await self.store.update_run(run.run_id, status=RunStatus.RUNNING, fence=self._fence)
        return head, run

    @property
    def _fence(self) -> int | None:
        return self.app.fence_for(self.run.run_id) if self.run is not None else None

    # -- the loop --------------------------------------------------------------------------

    async def _loop(self, head: Head, run: RunRecord) -> Head:
        steps = 0
        while head.checkpoint.next:
            if steps >= self.config.recursion_limit:
                error = RecursionLimitError(
                    f"run {run.run_id} took {steps} steps without finishing; raise "
                    "config['recursion_limit'] if that is expected, or fix the loop"
                )
                await self._set_status(run, RunStatus.FAILED, str(error))
                raise error
            steps += 1
            task_writes: list[TaskWrite] = []
            if head.checkpoint.checkpoint_id != self._fresh:  # loaded: an attempt may precede
                task_writes = await self.store.get_task_writes(
                    run.thread_id, head.checkpoint.checkpoint_id
                )
            head = await self._step(head, run, task_writes)
            if self.interrupts:
                break
        return head

    async def _step(self, head: Head, run: RunRecord, task_writes: list[TaskWrite]) -> Head:
        cp = head.checkpoint
        done: dict[str, TaskResult] = {}
        resumes: dict[str, list[Any]] = {}
        for w in task_writes:
            if w.kind == "writes":
                update = self.spec.schema.decode_update(w.value["update"])
                done[w.task] = TaskResult(w.task, update, tuple(w.value["goto"]))
            elif w.kind == "resume":
                resumes.setdefault(w.task, []).append(w.value)
        todo = [n for n in cp.next if n not in done]
        alone = len(cp.next) == 1
        contexts = {
            node: TaskContext(
                run_id=run.run_id,
                thread_id=run.thread_id,
                node=node,
                step=cp.step + 1,
                checkpoint_id=cp.checkpoint_id,
                store=self.store,
                config=self.config,
                loop=asyncio.get_running_loop(),
                emit=self.emit,
                fault_plan=self.fault_plan,
                resume_values=resumes.get(node, []),
                may_fold=alone,
                fresh=cp.checkpoint_id == self._fresh,
                fence=self._fence,
            )
            for node in todo
        }
        if len(todo) == 1:
            outcomes = [await self._run_task(contexts[todo[0]], head, save=not alone)]
        else:
            outcomes = list(
                await asyncio.gather(*(self._run_task(contexts[n], head, save=True) for n in todo))
            )
        for o in outcomes:
            if o.signal is not None:
                if isinstance(o.signal, _ParkSignal):
                    await self._set_status(run, RunStatus.NEEDS_REVIEW, o.signal.reason)
                    raise NeedsReviewError(
                        o.signal.reason, run_id=run.run_id, effect_id=o.signal.effect_id
                    )
                raise o.signal
        errors = [o for o in outcomes if o.error is not None]
        if errors:
            first = errors[0]
            assert first.error is not None
            await self._set_status(run, RunStatus.FAILED, _describe(first.node, first.error))
            if isinstance(first.error, OnceGraphError):
                raise first.error
            raise NodeError(
                f"node {first.node!r} raised {_describe(first.node, first.error)}; the run "
                f"{run.run_id} is failed and can be resumed with invoke(None, config)",
                node=first.node,
            ) from first.error
        interrupted = [o for o in outcomes if o.interrupt is not None]
        if interrupted:
            for o in interrupted:
                assert o.interrupt is not None
                value, index = o.interrupt
                await self.store.put_task_write(
                    TaskWrite(run.thread_id, cp.checkpoint_id, o.node, "interrupt", index, value)
                )
                self.interrupts.append({"value": value, "node": o.node, "index": index})
            await self._set_status(run, RunStatus.INTERRUPTED, None)
            self.emit("updates", {"__interrupt__": list(self.interrupts)})
            return head
        for o in outcomes:
            assert o.result is not None
            done[o.node] = o.result
        results = [done[n] for n in cp.next]
        try:
            nxt, entries, _ = advance(
                self.spec, head, run.run_id, results, step=cp.step + 1, source="loop"
            )
        except Exception as exc:  # a bad update or a failing router: the run fails, resumable
            nodes = ", ".join(r.node for r in results)
            await self._set_status(run, RunStatus.FAILED, f"{type(exc).__name__}: {exc}")
            if isinstance(exc, OnceGraphError):
                raise
            raise NodeError(
                f"applying the writes of {nodes} failed: {type(exc).__name__}: {exc}",
                node=results[0].node if results else "",
            ) from exc
        staged = [e for ctx in contexts.values() for e in ctx.staged_effects]
        if self.fault_plan is not None:
            self.fault_plan.hit("before_checkpoint")
        commit = StepCommit(
            thread_id=run.thread_id,
            expected_version=head.version,
            checkpoint=nxt.checkpoint,
            log=entries,
            run_status=None if nxt.checkpoint.next else RunStatus.COMPLETED,
            effects=staged,
            clear_task_writes_of=cp.checkpoint_id if task_writes or len(cp.next) > 1 else None,
            fence=self._fence,
        )
        try:
            await self._commit(commit, nxt)
        except StorageError:
            raise  # a lost CAS or lease writes nothing, not even the run's status
        except OnceGraphError as exc:  # the step cannot be stored (e.g. a value too large)
            await self._set_status(run, RunStatus.FAILED, f"{type(exc).__name__}: {exc}")
            raise
        if staged and self.fault_plan is not None:
            self.fault_plan.hit("after_effect_record")
        if self.fault_plan is not None:
            self.fault_plan.hit("after_checkpoint")
        self._emit_step(nxt, {r.node: r.update for r in results})
        return nxt

    async def _call_node(self, node: NodeSpec, ctx: TaskContext, args: tuple[Any, ...]) -> Any:
        """Await a coroutine node, or a sync node in a worker thread, under its timeout."""
        timeout = node.timeout if node.timeout is not None else self.config.node_timeout
        call = node.fn(*args) if node.is_async else asyncio.to_thread(node.fn, *args)
        if timeout is None:
            return await call
        try:
            async with asyncio.timeout(timeout) as cm:
                return await call
        except TimeoutError as exc:
            if cm.expired():
                raise NodeTimeoutError(
                    f"node {ctx.node!r} ran longer than node_timeout={timeout}s", node=ctx.node
                ) from exc
            raise

    async def _run_task(self, ctx: TaskContext, head: Head, *, save: bool) -> _Outcome:
        node = self.spec.nodes[ctx.node]
        outcome = _Outcome(ctx.node)
        token = set_task(ctx)
        self.emit("events", {"event": "node_start", "node": ctx.node, "step": ctx.step})
        try:
            state = self.spec.schema.to_node_input(head.values)
            args: tuple[Any, ...] = (
                (state, self._node_config(ctx)) if node.takes_config else (state,)
            )
            if node.inline:  # on the loop thread: no hand-off, no timeout
                value = node.fn(*args)
            else:
                value = await self._call_node(node, ctx, args)
            if ctx.interrupt_raised is not None:
                raise InterruptSwallowedError(
                    f"node {ctx.node!r} caught the interrupt signal (a bare except or except "
                    "BaseException?) and returned normally; let GraphInterrupt propagate",
                    node=ctx.node,
                )
            if isinstance(value, Command):
                update = self.spec.schema.to_update(ctx.node, value.update)
                result = TaskResult(ctx.node, update, value.goto_nodes())
            else:
                result = TaskResult(ctx.node, self.spec.schema.to_update(ctx.node, value))
            if save:
                await self._save_task(ctx, result)
            outcome.result = result
        except GraphInterrupt as gi:
            outcome.interrupt = (gi.value, gi.index)
        except (_CrashSignal, _ParkSignal) as sig:
            outcome.signal = sig
        except Exception as exc:
            if ctx.interrupt_raised is not None and not isinstance(exc, OnceGraphError):
                exc = InterruptSwallowedError(
                    f"node {ctx.node!r} caught the interrupt signal and raised "
                    f"{type(exc).__name__} instead; let GraphInterrupt propagate",
                    node=ctx.node,
                )
            outcome.error = exc
        except asyncio.CancelledError:
            raise
        finally:
            reset_task(token)
        self.emit(
            "events",
            {
                "event": "node_end",
                "node": ctx.node,
                "step": ctx.step,
                "status": "ok"
                if outcome.result
                else "interrupted"
                if outcome.interrupt
                else "error",
            },
        )
        return outcome

    async def _save_task(self, ctx: TaskContext, result: TaskResult) -> None:
        """A sibling finished: keep its writes so a crash re-runs only the others."""
        for record in ctx.staged_effects:
            await self.store.save_effect(record)
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
            )
        )

    def _node_config(self, ctx: TaskContext) -> dict[str, Any]:
        return {
            "thread_id": ctx.thread_id,
            "run_id": ctx.run_id,
            "node": ctx.node,
            "step": ctx.step,
            **self.config.configurable,
        }

    # -- writes ----------------------------------------------------------------------------

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
                if delay is None or type(exc) is not StorageError:
                    log.error("checkpoint commit failed for %s: %s", commit.thread_id, exc)
                    raise
                await asyncio.sleep(delay)
        self._fresh = commit.checkpoint.checkpoint_id
        self.app.remember_head(head)

    async def _landed(self, commit: StepCommit) -> bool:
        thread = await self.store.get_thread(commit.thread_id)
        return thread is not None and thread.head_checkpoint_id == commit.checkpoint.checkpoint_id

    async def _set_status(self, run: RunRecord, status: RunStatus, error: str | None) -> None:
        await self.store.update_run(run.run_id, status=status, error=error, fence=self._fence)

    def _emit_step(self, head: Head, updates: Mapping[str, Any]) -> None:
        for node, update in updates.items():
            self.emit("updates", {node: dict(update)})
        self.emit("values", head.values)


_BLOCKING = frozenset(
    {
        RunStatus.QUEUED,
        RunStatus.RUNNING,
        RunStatus.INTERRUPTED,
        RunStatus.NEEDS_REVIEW,
        RunStatus.FAILED,
    }
)


def open_interrupts(writes: list[TaskWrite]) -> dict[str, TaskWrite]:
    """Tasks still waiting for an answer: interrupted, not finished, not yet answered."""
    finished = {w.task for w in writes if w.kind == "writes"}
    answers: dict[str, int] = {}
    for w in writes:
        if w.kind == "resume":
            answers[w.task] = answers.get(w.task, 0) + 1
    waiting: dict[str, TaskWrite] = {}
    for w in writes:
        open_ = w.kind == "interrupt" and w.task not in finished
        if open_ and w.idx >= answers.get(w.task, 0) and w.idx >= _idx(waiting.get(w.task)):
            waiting[w.task] = w
    return waiting


def _idx(write: TaskWrite | None) -> int:
    return -1 if write is None else write.idx


def _describe(node: str, error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def input_json(value: Any, spec: Any) -> Any:
    if isinstance(value, Command):
        raise ConfigError(
            "Command(update=..., goto=...) as input is not supported; pass a dict of state "
            "updates, None to continue, or Command(resume=...) to answer an interrupt"
        )
    return spec.schema.encode_update(input_update(spec, value))


__all__ = ["Runner", "input_json", "open_interrupts"]
