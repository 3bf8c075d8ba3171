"""The one async driver of the run loop: the engine decides, the driver does.

Every run path (invoke, ainvoke, stream, astream, a worker, an operator's continue) ends
up in :meth:`Driver.run`; the paths differ only in what they do with emitted events.
Per step::

    task_writes = <read, unless this driver committed the head itself>
    plan = plan_step(head, task_writes)          (pure)
    <a static breakpoint (interrupt_before / interrupt_after) stops here, once>
    outcomes = <run plan.todo concurrently; a finished sibling's writes are kept>
    decision = decide(spec, head, plan, outcomes)  (pure)
    <execute the decision: ONE commit, or a status, or stop>

Invariants: a step's next tasks (nodes and Send payloads) are committed before they run
(guarantee 1); the commit is a compare-and-swap on the thread version carrying the run's
fence (guarantee 8); stream events of a step are emitted only after its commit (a task of
a step of several: after its kept writes, as LangGraph streams it); every write
carries ``fence`` so a writer that lost the run writes nothing. Crash points sit on the
transitions: ``before_checkpoint`` -> [commit] -> ``after_effect_record`` (when effect
results rode the commit) -> ``after_checkpoint``. The commit path is in
:mod:`oncegraph.runtime.commits`, the asking and answering of interrupts in
:mod:`oncegraph.runtime.asking` (mixins of :class:`Driver`).

A subgraph's steps run on a NESTED driver (``parent`` set, see
:mod:`oncegraph.runtime.subgraph`): same loop, same claim and fence, its checkpoints on
the subgraph's own thread. It never touches the run's status: a park, a failure or an
interrupt inside it is raised into the parent's task, which decides for the run; the
parent's interrupt answers are handed down to it in order.

``recursion_limit`` counts like LangGraph's: a call with new input counts its input
step, so a run given new input may take ``recursion_limit - 1`` steps; the step that
would exceed the limit is refused before it runs (the run fails, resumable).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from oncegraph import observe
from oncegraph.errors import (
    NeedsReviewError,
    ParentCommand,
    StorageError,
    _ParkSignal,
)
from oncegraph.graph.constants import START
from oncegraph.graph.spec import GraphSpec
from oncegraph.runtime import durability, executor
from oncegraph.runtime.asking import Asking
from oncegraph.runtime.claim import Claim
from oncegraph.runtime.commits import COMMIT_RETRY_DELAYS, CommitPath
from oncegraph.runtime.concurrency import bounded, max_concurrency, run_together
from oncegraph.runtime.config import RunConfig
from oncegraph.runtime.context import TaskContext
from oncegraph.runtime.control import check_drain
from oncegraph.runtime.decisions import Commit, Crash, Decision, Fail, Interrupt, Park, decide
from oncegraph.runtime.engine import (
    Head,
    StepPlan,
    Task,
    TaskOutcome,
    TaskResult,
    advance,
    plan_step,
)
from oncegraph.runtime.executor import ThreadPool
from oncegraph.runtime.failures import as_raised, failure_text
from oncegraph.runtime.heads import Heads
from oncegraph.runtime.moves import (
    OutOfSteps,
    next_move,
)
from oncegraph.runtime.replay import ReplayPolicy
from oncegraph.runtime.routers import routed_input, routed_step, router_config
from oncegraph.runtime.stepevents import (
    Where,
    emit_results,
    emit_step,
    emit_tasks,
    emit_update,
)
from oncegraph.runtime.streaming import keeping, modes_of, wants
from oncegraph.runtime.tasks import RunSubgraph, run_task
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import (
    CheckpointRecord,
    EffectRecord,
    RunRecord,
    RunStatus,
    StepCommit,
    TaskWrite,
    WriteKind,
)

log = logging.getLogger("oncegraph.driver")

Emit = Callable[[str, Any], None]

ignore: Emit = keeping((), lambda mode, payload: None)
"""An ``Emit`` that drops every event (``invoke``)."""


@dataclass(slots=True)
class Driver(Asking, CommitPath):
    """Executes one run's steps against one store.

    ``claim`` is the run's claim (:mod:`oncegraph.runtime.claim`): every write carries its
    fencing token. ``interrupts`` collects the questions of the step that interrupted.
    ``scope``/``ns``/``parent`` are set for a subgraph's driver (see the module
    docstring); ``answer_base`` is the index of the parent task's first answer that
    belongs to this subgraph.
    """

    spec: GraphSpec
    store: Checkpointer
    heads: Heads
    config: RunConfig
    emit: Emit = ignore
    claim: Claim | None = None
    replay: ReplayPolicy | None = None  # a replay run: what its effects may touch
    interrupts: list[Any] = field(default_factory=list)  # Interrupt objects
    # The checkpoint this driver committed last: no task of the step after it can have
    # run before, so it has no task writes and no effect records to look up.
    fresh: str | None = None
    scope: str = ""
    ns: tuple[str, ...] = ()
    parent: TaskContext | None = None
    answer_base: int = 0
    root_thread: str = ""
    # in a subgraph: the checkpoint that called each graph above it, by namespace
    parents: Mapping[str, str] = field(default_factory=dict)
    stopped: bool = False  # an interrupt or a breakpoint paused the run
    shown: dict[str, Any] | None = None  # the state an interrupted step leaves the caller
    steps: int = 0  # steps counted against recursion_limit in this call
    _consumed: int = 0
    _loop_thread: int = 0
    _loop: asyncio.AbstractEventLoop | None = None
    _plain_routers: bool = False
    _async_routers: bool = False  # some conditional edge is async (runtime.routers)
    # The app's own pool for sync nodes and tools (compile(sync_threads=N)); None: the
    # process pool (a nested driver runs inside its parent's context, so inherits it).
    sync_pool: ThreadPool | None = None
    # Runs a node that is a compiled graph (oncegraph.runtime.subgraph.run_subgraph_node),
    # given by whoever makes the driver: the subgraph runner builds drivers itself.
    subgraphs: RunSubgraph | None = None
    # Intents the last commit wrote for the next step's calls (oncegraph.ledger.planned)
    _planned: dict[str, EffectRecord] = field(default_factory=dict)
    _planned_written: bool = False  # the store inserted every one of them (rows = records)
    _task_emit: Emit | None = None  # what _task_emit_fn made, for the emit it was made for
    _task_emit_of: Emit | None = None
    _streamed: set[str] = field(default_factory=set)  # this step's tasks shown as they ended
    # durability="exit": the checkpoint this call started from, and whether the call
    # exited (finished, asked, failed, parked): then its steps are folded (runtime.durability)
    _base: durability.Base | None = None
    _exited: bool = False

    def __post_init__(self) -> None:
        self._plain_routers = not self.spec.routers_take_config
        self._async_routers = self.spec.async_routers

    @property
    def fence(self) -> int | None:
        return self.claim.token if self.claim is not None else None

    # -- the input step --------------------------------------------------------------------

    async def commit_input(self, head: Head, run: RunRecord, *, new: bool) -> Head:
        """The run's input checkpoint (step -1): the first tasks, before any runs."""
        # LangGraph counts a graph's input step against recursion_limit (its START node
        # runs a step); a Pregel app's input writes its channels with no step of its own
        return await self._input_step(
            head,
            run,
            self.spec.schema.decode_update(run.input),
            step=-1,
            steps=1 if self.spec.triggers is None else 0,
            new_run=run if new else None,
            with_status=True,
        )

    async def start_nested(
        self, head: Head, run: RunRecord, update: Mapping[str, Any], *, call: str | None = None
    ) -> Head:
        """A subgraph's input checkpoint on its own thread (no run record, no status).
        ``call``: the parent task's call of a stateful subgraph, kept in the metadata of
        every checkpoint of the call (so a resumed call knows its own head)."""
        return await self._input_step(
            head,
            run,
            update,
            step=head.checkpoint.step + 1 if head.checkpoint.checkpoint_id else -1,
            steps=1,
            meta={"call": call} if call is not None else None,
        )

    async def _input_step(
        self,
        head: Head,
        run: RunRecord,
        update: Mapping[str, Any],
        *,
        step: int,
        steps: int,
        meta: Mapping[str, Any] | None = None,
        new_run: RunRecord | None = None,
        with_status: bool = False,
    ) -> Head:
        """An input checkpoint: ``update`` written by START, committed before any task
        runs; ``with_status``: the run's status rides the commit (running, or completed
        when nothing is left to run)."""
        nxt, entries, _ = advance(
            self.spec,
            head,
            run.run_id,
            [TaskResult(START, update)],
            step=step,
            source="input",
            config=self._router_config(run),
            meta=meta,
            routed=await routed_input(self, head, update, run),
        )
        nxt = self._marked(nxt, head)
        status = None
        if with_status:
            status = RunStatus.COMPLETED if not nxt.checkpoint.next else RunStatus.RUNNING
        await self._commit(
            StepCommit(
                thread_id=run.thread_id,
                expected_version=head.version,
                checkpoint=nxt.checkpoint,
                log=entries,
                new_run=new_run,
                run_status=status,
                fence=self.fence,
            ),
            nxt,
        )
        self.steps = steps
        emit_step(
            self.emit,
            self.spec,
            self._where,
            nxt,
            durability.shown_parent(head.checkpoint, self._base),
            (),
            before=head.values,
            wrote=bool(update),
        )
        return nxt

    # -- the loop --------------------------------------------------------------------------

    async def run(self, head: Head, run: RunRecord) -> Head:
        """Run steps until the run ends, interrupts, parks or fails (then raise).

        A call that continues a run (no new input) first streams the state it continues
        from, as LangGraph does."""
        if not self.steps and head.checkpoint.checkpoint_id and wants(self.emit, "values"):
            self.emit("values", head.values)
        pool = executor.use(self.sync_pool) if self.sync_pool is not None else None
        # the caller's drain switch, checked between steps (the root run's only: a
        # subgraph's steps belong to its parent's running step)
        control = self.config.control if self.parent is None else None
        try:
            with observe.run_span(run, head.values):
                while head.checkpoint.next:
                    if control is not None:
                        check_drain(control, bool(head.checkpoint.next))
                    with observe.step_span(run, head.checkpoint.step + 1, head.checkpoint.next):
                        head = await self._step(head, run)
                    if self.stopped:
                        break
        finally:
            if pool is not None:
                executor.reset(pool)
            if self._exited and self._base is not None:
                await durability.fold(self.store, run.thread_id, run.run_id, self._base)
        return head

    async def _step(self, head: Head, run: RunRecord) -> Head:
        cp = head.checkpoint
        task_writes: list[TaskWrite] = []
        if cp.checkpoint_id != self.fresh:  # loaded: an earlier attempt may have left writes
            task_writes = await self.store.get_task_writes(run.thread_id, cp.checkpoint_id)
        if self._base is None and self.config.durability == durability.EXIT:
            self._base = durability.going_on(cp, task_writes, run.run_id)
        if self.parent is not None:
            task_writes = await self._hand_down_answers(cp, task_writes, run)
        plan = plan_step(self.spec, head, task_writes)
        move = next_move(
            self.spec,
            cp,
            plan,
            task_writes,
            run_id=run.run_id,
            steps=self.steps,
            recursion_limit=self.config.recursion_limit,
            before=self.config.interrupt_before,
            after=self.config.interrupt_after,
        )
        if isinstance(move, OutOfSteps):
            await self.set_status(run, RunStatus.FAILED, str(move.error))
            self._exited = True
            raise move.error
        if move is not None:
            return await self._execute(move, head, run, [], plan)
        self.steps += 1
        self._streamed = set()
        if plan.done and wants(self.emit, "updates"):  # finished in an earlier attempt
            for r in plan.done.values():
                emit_update(self.emit, self.spec, dataclasses.replace(r, cached=True))
                self._streamed.add(r.key)
        loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._loop = loop
        contexts = [self._context(task, cp, plan, run, loop) for task in plan.todo]
        save = None if plan.alone else self._save_task
        debug = wants(self.emit, "debug")
        if debug:
            emit_tasks(self.emit, head, plan, self.spec)
        # the graph's step_timeout bounds the root's steps (a subgraph's run inside them)
        limit = self.config.step_timeout if self.parent is None else None
        if len(contexts) == 1 and limit is None:
            task = plan.todo[0]
            outcomes = [await run_task(self.spec, contexts[0], head, save, task, self.subgraphs)]
        else:
            runs = zip(contexts, plan.todo, strict=True)
            coros = [run_task(self.spec, c, head, save, t, self.subgraphs) for c, t in runs]
            width = max_concurrency(self.config)
            if width is not None and width < len(coros):
                coros = bounded(coros, width)
            # a failing task does not cancel its siblings (one cancelled inside a tool call
            # would leave an outcome nobody knows); only the step's time limit does
            ended, late = await run_together(coros, timeout=limit)
            outcomes = [o for o in ended if o is not None]
            if late:  # the step fails with the time out, on the first task still running
                key = next(t.key for t, o in zip(plan.todo, ended, strict=True) if o is None)
                node = next(t.node for t in plan.todo if t.key == key)
                error = TimeoutError(f"step {cp.step + 1} took longer than step_timeout={limit}s")
                outcomes.insert(0, TaskOutcome(node, error=error, task=key))
        if debug:
            emit_results(self.emit, cp, outcomes)
        meta = None
        if self.parent is not None:  # the parent's answers this subgraph used so far
            meta = {"answers": int(cp.metadata.get("answers", 0)) + plan.answered}
            if "call" in cp.metadata:  # a stateful subgraph's call (start_nested)
                meta["call"] = cp.metadata["call"]
        config = self._router_config(run)
        routed = None
        if self._async_routers:  # awaited before the pure decision (runtime.routers)
            routed = await routed_step(self, head, plan, outcomes, config)
        decision = decide(
            self.spec,
            head,
            plan,
            outcomes,
            run_id=run.run_id,
            config=config,
            meta=meta,
            routed=routed,
        )
        staged = [e for ctx in contexts for e in ctx.staged_effects]
        return await self._execute(decision, head, run, staged, plan)

    def _context(
        self,
        task: Task,
        cp: CheckpointRecord,
        plan: StepPlan,
        run: RunRecord,
        loop: asyncio.AbstractEventLoop,
    ) -> TaskContext:
        fresh = cp.checkpoint_id == self.fresh
        return TaskContext(
            run_id=run.run_id,
            thread_id=self.root_thread or run.thread_id,
            node=f"{self.scope}|{task.key}" if self.scope else task.key,
            step=cp.step + 1,
            checkpoint_id=cp.checkpoint_id,
            store=self.store,
            config=self.config,
            loop=loop,
            emit=self._task_emit_fn,
            fault_plan=self.config.fault_plan,
            resume_values=list(plan.resumes.get(task.key) or self._replayed_answers(task.key, cp)),
            asked=list(plan.questions.get(task.key, ())),
            may_fold=plan.alone,
            fresh=fresh,
            planned=self._planned if fresh else {},
            planned_written=self._planned_written and fresh,
            claim=self.claim,
            replay=self.replay,
            name=task.node,
            task=task.key,
            ns=self.ns,
            parents=self.parents,
            graph_thread=run.thread_id if self.root_thread else "",
            cache=self.spec.cache,
            # this step is counted already (self.steps): it is one of those remaining
            remaining_steps=self.config.recursion_limit - self.steps + 1,
            node_failure=plan.failures.get(task.key),
        )

    @property
    def _task_emit_fn(self) -> Emit:
        """What tasks emit through. Tasks may emit from a worker thread (a sync node's
        stream writer): hop to the loop, where the consumer's queue lives, keeping the
        order of emits. Carries the modes the run keeps (see ``streaming.wants``). Made once
        per driver (for the emit it has)."""
        emit = self.emit
        if self._task_emit is not None and self._task_emit_of is emit:
            return self._task_emit

        def task_emit(mode: str, payload: Any) -> None:
            loop = self._loop
            if loop is None or threading.get_ident() == self._loop_thread:
                self.emit(mode, payload)
            else:
                loop.call_soon_threadsafe(self.emit, mode, payload)

        made = keeping(modes_of(emit), task_emit)
        self._task_emit, self._task_emit_of = made, emit
        return made

    async def _execute(
        self,
        decision: Decision,
        head: Head,
        run: RunRecord,
        staged: list[Any],
        plan: StepPlan,
    ) -> Head:
        if isinstance(decision, Crash):
            raise decision.signal
        if not isinstance(decision, Commit):
            await self._save_staged(staged)  # a completed call's result is never dropped
        if isinstance(decision, Park):
            if self.parent is None:
                await self.set_status(run, RunStatus.NEEDS_REVIEW, decision.reason)
            self._exited = True
            if self.parent is not None:
                raise _ParkSignal(decision.effect_id, decision.reason)
            raise NeedsReviewError(decision.reason, run_id=run.run_id, effect_id=decision.effect_id)
        if isinstance(decision, Fail):
            await self._keep_error(decision, head, run)
            if self.parent is not None:
                self._exited = True
                raise decision.error
            await self.set_status(run, RunStatus.FAILED, failure_text(decision))
            self._exited = True
            raise as_raised(decision, run)
        if isinstance(decision, Interrupt):
            return await self._interrupt(decision, head, run, plan)
        return await self._commit_step(decision, head, run, staged)

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
        except StorageError as exc:  # a view's detail: the run's own status decides below
            log.warning(
                "run %s: the error of task %s was not kept: %s", run.run_id, write.task, exc
            )

    # -- the run's status ------------------------------------------------------------------

    async def set_status(self, run: RunRecord, status: RunStatus, error: str | None) -> None:
        if self.parent is not None:
            return  # a subgraph never decides the run's status: its parent task does
        await self.store.update_run(run.run_id, status=status, error=error, fence=self.fence)

    # -- what the stream sees ------------------------------------------------------------

    def _router_config(self, run: RunRecord) -> dict[str, Any] | None:
        """What a router that takes ``(state, config)`` receives (None: no router does)."""
        if self._plain_routers:
            return None
        return router_config(self.config, self.root_thread or run.thread_id, run.run_id)

    @property
    def _where(self) -> Where:
        """Where this driver's checkpoints are shown to be, for stream events."""
        return Where(self.root_thread, tuple(self.ns), self.parents)


__all__ = ["COMMIT_RETRY_DELAYS", "Driver", "Emit", "ignore"]
