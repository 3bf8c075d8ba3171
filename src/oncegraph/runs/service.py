"""The run service: the run lifecycle and every operator view, over the engine and a store.

Every surface calls it (the compiled app, the worker, the CLI, the HTTP server); none of
them touches a store directly. A service belongs to one graph (``spec``; ``None`` for a
read-only service, e.g. the CLI's listings) and one store.

Lifecycle (guarantee 9): :meth:`RunService.run` starts a new run, continues an unfinished one
(keeping its ``run_id``) or answers an interrupt, as :mod:`oncegraph.runs.lifecycle`
decides from the input; :meth:`RunService.execute` continues one named run (a worker,
under its lease); :meth:`RunService.submit` queues a run for the workers;
:meth:`RunService.abandon` gives one up. Before any continue the stored versions are
checked (:mod:`oncegraph.versioning`, guarantee 10).

Guarantee 15: a service sees and touches only its scope's runs (its app's, and its tenant's
when bound to one, :mod:`oncegraph.runs.scope`): another app's run, thread or effect is
refused with ``ForeignRunError`` before anything is read or written, and listings are
filtered in the store's query.

Guarantee 13: no work starts on a run before this process holds it
(:mod:`oncegraph.runs.claims`): a second resumer gets ``RunBusyError`` at once, and
every write of the run carries the claim's fencing token. The claim is let go when the
run stops, or, if a call outlived its step, when that call ends.
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from oncegraph.errors import (
    ConfigError,
    NoRunToResumeError,
    RunNotFoundError,
    RunStateError,
)
from oncegraph.graph.io import input_update
from oncegraph.graph.spec import GraphSpec
from oncegraph.hitl.command import Command
from oncegraph.ids import new_run_id
from oncegraph.runs import answers, audits, claims, reading
from oncegraph.runs.commands import (
    NO_ANSWER,
    Commands,
    EffectCheck,
    Redelivered,
    RedeliveryPreview,
    required,
)
from oncegraph.runs.context import STARTED, RunContext, RunResult
from oncegraph.runs.launch import LAUNCH_KEY, Launch
from oncegraph.runs.lifecycle import (
    FINAL_STATUSES,
    AnswerInterrupt,
    ContinueRun,
    continuable,
    plan_start,
    thread_of,
)
from oncegraph.runs.masking import Masker, Masks
from oncegraph.runs.replay import Branch, Replays
from oncegraph.runs.scope import Scope, listing_filters
from oncegraph.runs.signing import signing_key
from oncegraph.runs.timetravel import Fork, TimeTravel, finished_state
from oncegraph.runs.versions import Migration, VersionGate
from oncegraph.runs.views import StateSnapshot
from oncegraph.runtime.claim import Claim, default_owner
from oncegraph.runtime.config import RunConfig, lookup_id
from oncegraph.runtime.driver import Driver, Emit, ignore, moved_on_error
from oncegraph.runtime.engine import Head
from oncegraph.runtime.executor import ThreadPool
from oncegraph.runtime.moves import next_answer, open_interrupts
from oncegraph.storage.protocols import Checkpointer, Pruner
from oncegraph.storage.records import (
    AuditRecord,
    EffectRecord,
    EffectStatus,
    PruneReport,
    RunRecord,
    RunStatus,
    TaskWrite,
)
from oncegraph.versioning import GraphIdentity, Verdict

EFFECTS_PAGE = 500
"""Effect records an ``effects()`` listing returns unless asked for another ``limit``."""


@dataclass(frozen=True, slots=True)
class RunHandle:
    """A run :meth:`RunService.start` started: its ids at once, its end with :meth:`result`."""

    run_id: str
    thread_id: str
    task: asyncio.Task[RunResult]

    async def result(self) -> RunResult:
        """How the run call ended (what :meth:`RunService.run` returns, or its error)."""
        return await self.task


class RunService:
    """Runs of one graph in one store. See the module docstring."""

    def __init__(
        self,
        spec: GraphSpec | None,
        store: Checkpointer,
        *,
        owner: str | None = None,
        migrations: Mapping[str, Migration] | None = None,
        previous_versions: Mapping[str, GraphSpec] | None = None,
        sync_pool: ThreadPool | None = None,
        scope: Scope | None = None,
    ) -> None:
        # Whose runs this service sees (guarantee 15): by default the graph's app, every tenant.
        scope = scope if scope is not None or spec is None else Scope(spec.name)
        self.context = RunContext(
            spec, store, owner=owner or default_owner(), scope=scope, sync_pool=sync_pool
        )
        self.identity = (
            GraphIdentity(spec.name, spec.version, spec.state_schema_version, spec.fingerprint())
            if spec is not None
            else None
        )
        self.versions = (
            VersionGate(spec, self.identity, migrations=migrations, previous=previous_versions)
            if spec is not None and self.identity is not None
            else None
        )

    @property
    def spec(self) -> GraphSpec | None:
        return self.context.spec

    @property
    def store(self) -> Checkpointer:
        return self.context.store

    @property
    def owner(self) -> str:
        return self.context.owner

    @property
    def scope(self) -> Scope | None:
        return self.context.scope

    @property
    def masks(self) -> Masks:
        return self.context.masks

    @property
    def sync_pool(self) -> ThreadPool | None:
        return self.context.sync_pool

    @property
    def graph(self) -> GraphSpec:
        """The graph this service runs (a read-only service has none: ``ConfigError``)."""
        return self.context.graph

    def for_tenant(self, tenant: str) -> RunService:
        """This service bound to ``tenant`` (see :mod:`oncegraph.runs.scope`): the runs it
        starts carry the tenant, and it sees and touches only that tenant's runs. Cheap
        (it shares the graph, the store and the version gate), so one per request will do."""
        if self.scope is None:
            raise ConfigError("a read-only service has no app; bind a compiled app's service")
        if self.scope.tenant is not None and self.scope.tenant != tenant:
            raise ConfigError(
                f"this service is bound to tenant {self.scope.tenant!r} already; bind the "
                "app's own service (app.for_tenant(...)) to another tenant"
            )
        bound = copy.copy(self)
        bound.context = self.context.scoped(Scope(self.scope.app_id, tenant))
        return bound

    def check_run(self, run: RunRecord, what: str = "") -> RunRecord:
        """``run`` if this service may see it, else ``ForeignRunError`` (guarantee 15)."""
        return self.context.check_run(run, what)

    async def setup(self) -> None:
        """Create or migrate the store's schema, once per service."""
        await self.context.setup()

    async def signing_key(self, purpose: str) -> bytes:
        """A MAC key for ``purpose`` (:mod:`oncegraph.runs.signing`), the same in every
        process on this store: what a surface signs (the UI's form tokens) verifies in
        another replica and after a restart."""
        await self.setup()
        return await signing_key(self.store, purpose)

    # -- operator commands (runs/commands.py) -----------------------------------------------

    async def resume(
        self,
        run_id: str,
        *,
        answer: Any = NO_ANSWER,
        actor: str,
        reason: str | None = None,
        config: RunConfig | None = None,
        emit: Emit = ignore,
    ) -> RunResult:
        """Continue run ``run_id`` under its own id (guarantee 9): an interrupted run (with
        ``answer``), a failed, crashed, parked or paused one. A completed or abandoned run
        is never continued (a replay is a new run). Audited as ``continue``."""
        required("actor", actor)
        run = await self.get_run(run_id)
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
        cfg = config or RunConfig.from_stored(run.config, run.thread_id)
        audit = audits.for_run(
            run,
            "continue",
            actor=actor,
            reason=reason,
            details={"before": str(run.status), "answered": answer is not NO_ANSWER},
        )
        if answer is not NO_ANSWER:
            return await self._answer(run, answer, cfg, emit, audit=audit)
        return await self._continue(run, cfg, emit, audit=audit, parked_too=True)

    async def resolve_effect(
        self,
        effect_id: str,
        outcome: str,
        *,
        actor: str,
        reason: str,
        result: Any = None,
        provider_reference: str | None = None,
    ) -> EffectRecord:
        """Record what the operator found at the recipient of an uncertain effect
        (:meth:`Commands.resolve_effect`)."""
        return await Commands(self.context).resolve_effect(
            effect_id,
            outcome,
            actor=actor,
            reason=reason,
            result=result,
            provider_reference=provider_reference,
        )

    async def check_effect(
        self, effect_id: str, *, actor: str, reason: str = "asked the recipient"
    ) -> EffectCheck:
        """Ask the recipient again about an uncertain effect (:meth:`Commands.check_effect`)."""
        return await Commands(self.context).check_effect(effect_id, actor=actor, reason=reason)

    async def redeliver(
        self,
        effect_id: str,
        *,
        actor: str,
        reason: str,
        new_key: bool = False,
        confirm: str | None = None,
    ) -> RedeliveryPreview | Redelivered:
        """Preview a redelivery, then send exactly once with ``confirm``
        (:meth:`Commands.redeliver`)."""
        return await Commands(self.context).redeliver(
            effect_id, actor=actor, reason=reason, new_key=new_key, confirm=confirm
        )

    async def audit(
        self,
        *,
        run_id: str | None = None,
        thread_id: str | None = None,
        target_id: str | None = None,
        before: float | tuple[float, str] | AuditRecord | None = None,
        limit: int = 100,
    ) -> list[AuditRecord]:
        """Audit records, newest first, masked (:meth:`Commands.audit`)."""
        return await Commands(self.context).audit(
            run_id=run_id, thread_id=thread_id, target_id=target_id, before=before, limit=limit
        )

    async def effect(self, effect_id: str) -> EffectRecord:
        """One effect record as an operator sees it: within this service's scope (another
        app's effect is refused with ``ForeignRunError``), its masked fields masked."""
        record = await Commands(self.context).effect(effect_id)
        return (await self.context.masker(thread_ids=(record.thread_id,))).effect(record)

    # -- replay and branch (runs/replay.py) -------------------------------------------------

    async def replay(
        self,
        run_id: str,
        *,
        checkpoint_id: str | None = None,
        mode: str = "evidence",
        reason: str,
        actor: str,
        allow_irreversible: Iterable[str] = (),
        doubles: Mapping[str, Callable[..., Any]] | None = None,
        emit: Emit = ignore,
        new_run_id: str | None = None,
    ) -> RunResult:
        """A new run from a checkpoint of ``run_id``, run in ``mode`` (:meth:`Replays.replay`)."""
        return await Replays(self.context).replay(
            run_id,
            checkpoint_id=checkpoint_id,
            mode=mode,
            reason=reason,
            actor=actor,
            allow_irreversible=allow_irreversible,
            doubles=doubles,
            emit=emit,
            new_run_id=new_run_id,
        )

    async def branch(
        self,
        run_id: str,
        checkpoint_id: str | None = None,
        *,
        patch: Mapping[str, Any],
        reason: str,
        actor: str,
        as_node: str | None = None,
        new_run_id: str | None = None,
    ) -> Branch:
        """A paused run from the patched state of a checkpoint (:meth:`Replays.branch`)."""
        return await Replays(self.context).branch(
            run_id,
            checkpoint_id,
            patch=patch,
            reason=reason,
            actor=actor,
            as_node=as_node,
            new_run_id=new_run_id,
        )

    async def update_state(
        self,
        thread_id: str,
        values: Mapping[str, Any] | None,
        *,
        checkpoint_id: str | None = None,
        as_node: str | None = None,
        actor: str = "update_state",
        reason: str = "update_state",
        allow_irreversible: Iterable[str] = (),
    ) -> Fork:
        """LangGraph's ``update_state``: a new paused run on the same thread whose head
        has the edit (:meth:`oncegraph.runs.timetravel.TimeTravel.update`)."""
        return await TimeTravel(self.context, self._travel_run).update(
            thread_id,
            values,
            checkpoint_id=checkpoint_id,
            as_node=as_node,
            actor=actor,
            reason=reason,
            allow_irreversible=allow_irreversible,
        )

    # -- retention --------------------------------------------------------------------------

    async def prune(
        self,
        *,
        keep_checkpoints: int = 1,
        effects_older_than: float | None = None,
        thread_id: str | None = None,
    ) -> PruneReport:
        """Retention: delete checkpoints and finished effect records no open run needs.

        Delegates to the store's :meth:`~oncegraph.storage.protocols.Pruner.prune` (the
        head, the newest ``keep_checkpoints`` and unfinished runs' checkpoints stay; log
        entries are never deleted); ``effects_older_than`` is in seconds; ``thread_id``
        (one of this service's threads) prunes that thread only."""
        store = self.store
        if not isinstance(store, Pruner):
            raise ConfigError(
                f"{type(store).__name__} cannot prune (it has no prune() method); use "
                "InMemoryCheckpointer, SqliteCheckpointer or PgCheckpointer, or add "
                "prune() (oncegraph.storage.protocols.Pruner) to your store"
            )
        await self.setup()
        if thread_id is not None:
            await self.context.check_thread(thread_id)
        return await store.prune(
            keep_checkpoints=keep_checkpoints,
            effects_older_than=effects_older_than,
            thread_id=thread_id,
        )

    # -- the lifecycle -------------------------------------------------------------------

    async def run(
        self, input: Any, cfg: RunConfig, emit: Emit = ignore, *, launch: Launch | None = None
    ) -> RunResult:
        """What ``invoke(input, config)`` does: start, continue or answer (lifecycle).

        ``launch``: who the call is for (:mod:`oncegraph.runs.launch`): a new run carries
        its actor and gets a start record in the audit log; a continue is the audited
        Continue; an answer is recorded with the actor. ``input`` is read as LangGraph
        reads it on a paused run first (:func:`oncegraph.runs.answers.route`)."""
        _, heads = self.context.graph_heads()
        input = await answers.route(self.context, cfg, input)
        thread_id = thread_of(cfg)
        await self.setup()
        thread, latest = await self.context.open_thread(thread_id)
        wanted = cfg.configurable.get("checkpoint_id")
        if wanted and thread is not None and thread.head_checkpoint_id != wanted:
            # LangGraph's time travel: a NEW live run from a fork of that checkpoint
            travel = TimeTravel(self.context, self._travel_run)
            cp = await travel.target(thread_id, str(wanted), input, latest)
            if cp is not None:
                return await travel.run(cp, input, cfg, emit, thread, latest, launch=launch)
        elif wanted and thread is None:
            raise RunNotFoundError(
                f"thread {thread_id!r} has no checkpoint {wanted!r} (it has none yet); start "
                "it with invoke(input, config) without a checkpoint_id"
            )
        if input is None and cfg.run_id is None and launch is None:
            done = await finished_state(self.context, thread, latest)
            if done is not None:  # LangGraph's replay of a final checkpoint: nothing runs
                return done
        if cfg.run_id is not None:  # continue exactly this run
            if input is not None:
                raise ConfigError("config['run_id'] continues a stored run; pass input=None")
            found = await self.context.run_on(thread_id, cfg.run_id)
            if launch is not None:
                return await self._continue_for(launch, found, cfg, emit)
            return await self._continue(found, cfg, emit)
        if launch is not None and input is None:  # the audited Continue, which says why not
            latest = continuable_or_latest(thread_id, latest)
            return await self._continue_for(launch, latest, cfg, emit)
        start = plan_start(thread_id, input, latest)
        if isinstance(start, ContinueRun):
            return await self._continue(start.run, cfg, emit)
        if isinstance(start, AnswerInterrupt):
            asked = (
                None
                if launch is None
                else audits.for_run(start.run, "answer", actor=launch.actor, reason=launch.reason)
            )
            return await self._answer(start.run, start.answer, cfg, emit, audit=asked)
        if latest is not None and latest.status is RunStatus.ABANDONED:
            # an operator gave up on the latest run; an earlier one may still be running
            await claims.thread_free(self.store, thread_id, "")
        run = self._new_run(thread_id, start.input, cfg, status=RunStatus.RUNNING, launch=launch)
        if launch is not None and launch.run_id and await self.store.get_run(run.run_id):
            raise ConfigError(  # the store refuses it too; this says why, on every store
                f"run {run.run_id} exists already: Launch(run_id=...) names a NEW run (a "
                "fresh oncegraph.ids.new_run_id()); nothing was started"
            )
        claim = await claims.new(self.store, run)
        driver = self.context.make_driver(cfg, emit, claim)
        try:
            # the thread row read above: its version is checked by the commit (a run that
            # started on the thread meanwhile makes it a StaleStateError, as before)
            head = await driver.commit_input(await heads.at(thread_id, thread), run, new=True)
            if launch is not None:  # before its first node runs
                await self.store.append_audit(_start_audit(launch, run))
            return await self.context.drive(driver, head, run)
        finally:
            await claim.release()

    async def start(
        self, input: Any, cfg: RunConfig, emit: Emit = ignore, *, launch: Launch | None = None
    ) -> RunHandle:
        """:meth:`run` as a task of this loop; returns once the run is held and goes on
        (a new run committed, a continue or an answer claimed), with its id. A call
        refused before that raises here, and nothing started. Cancelled while it waits,
        it cancels the run call too (a run that started stays resumable)."""
        loop = asyncio.get_running_loop()
        known: asyncio.Future[RunRecord] = loop.create_future()

        def started(run: RunRecord) -> None:
            if not known.done():
                known.set_result(run)

        context = contextvars.copy_context()
        context.run(STARTED.set, started)
        task = loop.create_task(self.run(input, cfg, emit, launch=launch), context=context)
        either: set[asyncio.Future[Any]] = {known, task}
        try:
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            task.cancel()
            raise
        if not known.done():  # it ended before it went on: refused (or nothing to drive)
            started(task.result().run)
        run = known.result()
        return RunHandle(run.run_id, run.thread_id, task)

    async def _continue_for(
        self, launch: Launch, run: RunRecord, cfg: RunConfig, emit: Emit
    ) -> RunResult:
        """The audited Continue of ``run`` for ``launch``'s actor (as an operator's)."""
        return await self.resume(
            run.run_id,
            actor=launch.actor,
            reason=launch.reason,
            config=cfg if launch.configured else None,
            emit=emit,
        )

    async def execute(self, run: RunRecord, cfg: RunConfig, *, fence: int) -> RunResult:
        """Continue ``run`` under a lease whose fencing token is ``fence`` (workers)."""
        await self.setup()
        run = continuable(run.thread_id, self.check_run(run))
        # the lock first, then ONE read: the token check and the thread row the head and
        # the version verdict stand on (the lease is already this worker's)
        claim, thread = await claims.hold(self.store, run, token=fence)
        try:
            _, heads = self.context.graph_heads()
            head = await heads.at(run.thread_id, thread)
            verdict = self._verdict_at(run, head)
        except BaseException:
            await claim.release()
            raise
        if verdict.kind == "previous":
            await claim.release()  # the previous version's service takes it again
            return await self._previous(verdict).execute(run, cfg, fence=fence)
        driver = self.context.make_driver(cfg, ignore, claim, await self.context.policy(run))
        try:
            if run.status is not RunStatus.RUNNING or run.error is not None:
                # the claim itself set ``running`` (in the statement that took the lease):
                # writing it again would cost a commit on the way to the first step
                await driver.set_status(run, RunStatus.RUNNING, None)
            head = await self._migrate_if(verdict, run, claim, head) or head
            return await self._start_or_go_on(driver, run, head)
        finally:
            await claim.release()

    async def _continue(
        self,
        run: RunRecord,
        cfg: RunConfig,
        emit: Emit,
        *,
        audit: AuditRecord | None = None,
        parked_too: bool = False,
    ) -> RunResult:
        """Continue ``run``; ``parked_too``: an operator's Continue, which may also go on
        with a parked (``needs_review``) run. The timeouts and limit ``cfg`` names win;
        the others are the run's stored ones (:meth:`RunConfig.going_on`)."""
        run = continuable(run.thread_id, run, parked_too=parked_too)
        cfg = cfg.going_on(run.config)
        verdict = await self._verdict(run)
        if verdict.kind == "previous":
            return await self._previous(verdict)._continue(
                run, cfg, emit, audit=audit, parked_too=parked_too
            )

        def still(found: RunRecord) -> RunRecord:
            return continuable(found.thread_id, found, parked_too=parked_too)

        claim, run = await claims.take(
            self.store, run.run_id, owner=self.owner, check=still, audit=audit
        )
        driver = self.context.make_driver(cfg, emit, claim, await self.context.policy(run))
        try:
            await self._migrate_if(verdict, run, claim)
            return await self._start_or_go_on(driver, run)
        finally:
            await claim.release()

    async def _start_or_go_on(
        self, driver: Driver, run: RunRecord, head: Head | None = None
    ) -> RunResult:
        """Start ``run`` (a queued run: its input first) or go on from its head (``head``:
        just read under the claim; else read here)."""
        if head is None:
            _, heads = self.context.graph_heads()
            head = await heads.load(run.thread_id)
        if head.checkpoint.run_id != run.run_id:  # queued: it never started
            if await self.store.list_checkpoints(run.thread_id, run_id=run.run_id, limit=1):
                # it did start, and another run's steps came after its own: going on from
                # there would redo its work on that run's state (a lost compare-and-swap)
                error = moved_on_error(run.run_id, run.thread_id, "it cannot go on")
                await driver.set_status(run, RunStatus.FAILED, str(error))
                raise error
            head = await driver.commit_input(head, run, new=False)
        return await self.context.drive(driver, head, run)

    async def _answer(
        self,
        run: RunRecord,
        answer: Any,
        cfg: RunConfig,
        emit: Emit,
        *,
        audit: AuditRecord | None = None,
    ) -> RunResult:
        spec, heads = self.context.graph_heads()
        cfg = cfg.going_on(run.config)  # as a continue: the stored timeouts, unless named
        verdict = await self._verdict(run)
        if verdict.kind == "previous":
            return await self._previous(verdict)._answer(run, answer, cfg, emit, audit=audit)
        lock = await self.store.lock_run(run.run_id)
        if lock is None:
            raise await claims.busy_error(self.store, run.run_id)
        claim: Claim | None = None
        try:
            found = await self.store.get_run(run.run_id)
            if found is None or found.status is not RunStatus.INTERRUPTED:
                raise NoRunToResumeError(
                    f"run {run.run_id} is no longer waiting for an answer "
                    f"({found.status if found else 'gone'}); nothing was answered"
                )
            head = await heads.load(run.thread_id)
            cp = head.checkpoint
            writes = await self.store.get_task_writes(run.thread_id, cp.checkpoint_id)
            waiting = open_interrupts(writes)
            if not waiting:
                raise NoRunToResumeError(f"run {run.run_id} has no pending interrupt to answer")
            task = next_answer(spec.order, waiting)
            answered = sum(1 for w in writes if w.kind == "resume" and w.task == task)
            question = waiting[task]
            # Who approved what: the question, the answer and the actor, kept for good.
            audit = audits.for_run(
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
                    "answer": answer,
                },
            )
            taken = await self.store.fence_run(
                run.run_id,
                expected_token=found.fencing_token,
                owner=self.owner,
                status=RunStatus.RUNNING,
                audit=audit,
            )
            if taken is None:
                raise await claims.busy_error(self.store, run.run_id)
            claim = Claim(run.run_id, taken.fencing_token, lock)
        finally:
            if claim is None:
                await lock.release()
        try:
            migrated = await self._migrate_if(verdict, taken, claim)
            if migrated is not None:  # the question moved to the migrated head
                head, cp = migrated, migrated.checkpoint
            await self.store.put_task_write(
                TaskWrite(run.thread_id, cp.checkpoint_id, task, "resume", answered, answer),
                run_id=run.run_id,
                fence=claim.token,
            )
            driver = self.context.make_driver(cfg, emit, claim, await self.context.policy(taken))
            return await self.context.drive(driver, head, taken)
        finally:
            await claim.release()

    async def submit(self, input: Any, cfg: RunConfig) -> RunRecord:
        """Queue a run for the workers; a thread runs its runs one at a time, in order.

        Only a store workers claim from (PostgreSQL) takes it: anywhere else the run would
        wait forever, so it is refused before anything is written."""
        thread_id = thread_of(cfg)
        await self.setup()
        await self.context.check_thread(thread_id)
        if not getattr(self.store, "queues_runs", False):
            raise ConfigError(
                f"submit() queues a run for workers, and no worker takes runs from "
                f"{type(self.store).__name__}: it would wait forever. Workers need PostgreSQL: "
                "compile(checkpointer=PgCheckpointer('postgresql://...')) and run "
                "`oncegraph worker module:app`; or run it here with app.invoke(input, config)"
            )
        run = self._new_run(thread_id, input, cfg, status=RunStatus.QUEUED, reason="submit")
        await self.store.create_run(run)
        return run

    async def abandon(
        self,
        thread_id: str,
        *,
        reason: str = "abandoned",
        actor: str = "operator",
        run_id: str | None = None,
    ) -> RunRecord:
        """Give up on the thread's unfinished run (``run_id``: that run of the thread, say
        one that stopped because another run of the thread moved on); new input may
        follow. Nothing is deleted.

        The operator's decision wins: the run's token is bumped, so a process still
        working on it is fenced out (its next write fails, it starts no new attempt)."""
        await self.setup()
        latest = await self.context.check_thread(thread_id)
        if run_id is not None:
            latest = await self.context.run_on(thread_id, run_id)

        def unfinished(run: RunRecord | None) -> RunRecord:
            if run is None or run.status in FINAL_STATUSES:
                raise RunNotFoundError(f"thread {thread_id!r} has no unfinished run to abandon")
            return run

        run = unfinished(latest)
        return await claims.overrule(
            self.store,
            run.run_id,
            owner=f"operator:{self.owner}",
            status=RunStatus.ABANDONED,
            error=reason,
            check=unfinished,
            audit=audits.for_run(
                run, "abandon", actor=actor, reason=reason, details={"before": str(run.status)}
            ),
        )

    async def cancel(
        self, run_id: str, *, reason: str = "cancelled", actor: str = "submitter"
    ) -> RunRecord:
        """Abandon queued run ``run_id`` if no worker has claimed it yet: a compare-and-set
        on its fencing token while it is ``queued`` (a worker's claim bumps the token, so
        a run a worker took is never abandoned under it: that is :meth:`abandon`), kept in
        the audit log with its actor and reason."""
        run = await self.get_run(run_id)
        for _ in range(3):  # a claim and a release may move the token between read and CAS
            if run.status is not RunStatus.QUEUED:
                break
            taken = await self.store.fence_run(
                run.run_id,
                expected_token=run.fencing_token,
                owner=None,
                status=RunStatus.ABANDONED,
                error=reason,
                audit=audits.for_run(
                    run, "cancel", actor=actor, reason=reason, details={"before": str(run.status)}
                ),
            )
            if taken is not None:
                return taken
            run = await self.get_run(run_id)  # a worker claimed it meanwhile
        raise RunStateError(
            f"run {run.run_id} cannot be cancelled: it is {run.status}, not queued (a worker "
            "has claimed it, or it has ended). A running run is stopped by an operator: "
            "app.abandon(config, reason=...) fences the worker out."
        )

    # -- views -----------------------------------------------------------------------------

    async def runs(
        self,
        *,
        thread_id: str | None = None,
        statuses: Sequence[RunStatus] | None = None,
        limit: int = 100,
        tenant: str | None = None,
        parent_run_id: str | None = None,
        before: str | RunRecord | None = None,
    ) -> list[RunRecord]:
        """Runs newest first: this app's only (a tenant-bound service: its tenant's only);
        ``tenant`` filters an unbound service's listing by tenant; ``parent_run_id``
        lists the runs made from that run (its replays and branches); ``before`` (a run,
        or its id: a page's last) lists the runs after it, the next page."""
        if thread_id is not None:
            thread_id = lookup_id("thread_id", thread_id)
        await self.setup()
        app_id, tenant = listing_filters(self.scope, tenant)
        found = await self.store.list_runs(
            thread_id=thread_id,
            statuses=statuses,
            limit=limit,
            app_id=app_id,
            tenant=tenant,
            parent_run_id=parent_run_id,
            before=None if before is None else await self._position(before),
        )
        masker = await self.masker(thread_ids={r.thread_id for r in found})
        return [masker.run(r) for r in found]  # inputs and errors masked

    async def _position(self, before: str | RunRecord) -> tuple[float, str]:
        """Where a listing goes on after ``before`` (a run, or its id): the stored run's
        ``(created_at, run_id)`` (a page's last run names it, masked or not), refused
        for a run this service may not see (guarantee 15), as an unknown run is."""
        run_id = before.run_id if isinstance(before, RunRecord) else before
        if not isinstance(run_id, str) or not run_id:
            raise ConfigError(
                f"before must be a run or a run id (a page's last run); got {before!r}"
            )
        run = await self.store.get_run(run_id)
        if run is None:
            raise RunNotFoundError(
                f"no run {run_id!r} to list runs after (before=...); it may have been "
                "pruned: list from the newest again (no before)"
            )
        self.check_run(run)
        return run.created_at, run.run_id

    async def run_view(self, run_id: str) -> RunRecord:
        """:meth:`get_run` as an operator sees it (input and error masked); the run
        service's own reads use :meth:`get_run`."""
        run = await self.get_run(run_id)
        return (await self.masker(thread_ids=(run.thread_id,))).run(run)

    async def effects(
        self,
        *,
        run_id: str | None = None,
        thread_id: str | None = None,
        statuses: Sequence[EffectStatus] | None = None,
        tenant: str | None = None,
        limit: int | None = EFFECTS_PAGE,
        offset: int = 0,
        masked: bool = True,
    ) -> list[EffectRecord]:
        """Effect records, oldest first, with each tool's ``mask=[...]`` fields masked;
        only those of this app's runs (of its tenant's, when bound to one); ``limit`` of
        them (``None``: all) from ``offset`` on."""
        if run_id is None and thread_id is None:
            raise ConfigError("effects() needs run_id=... or thread_id=...")
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit < 0
        ):
            raise ConfigError(f"limit must be a non-negative integer or None; got {limit!r}")
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ConfigError(f"offset must be a non-negative integer; got {offset!r}")
        await self.setup()
        if run_id is not None:
            await self.get_run(run_id)  # another app's run is refused, not listed empty
        elif thread_id is not None:
            await self.context.check_thread(thread_id)
        app_id, tenant = listing_filters(self.scope, tenant)
        records = await self.store.list_effects(
            run_id=run_id,
            thread_id=thread_id,
            statuses=statuses,
            app_id=app_id,
            tenant=tenant,
            limit=limit,
            offset=offset,
        )
        if not masked:  # an admin's view (the caller decides who may see payloads)
            return records
        partial = (
            statuses is not None or offset > 0 or (limit is not None and len(records) >= limit)
        )
        if partial:  # every effect of the listing's scope tells its secrets
            masker = await self.masker(
                thread_ids=() if thread_id is None else (thread_id,),
                run_ids=() if run_id is None or thread_id is not None else (run_id,),
            )
        else:
            masker = Masker(self.masks).learn_effects(records)
        return [masker.effect(r) for r in records]

    async def get_state(self, thread_id: str, checkpoint_id: str | None = None) -> StateSnapshot:
        """The thread's snapshot at ``checkpoint_id`` (default: its head), as stored."""
        return await reading.stored_state(self.context, thread_id, checkpoint_id)

    def history(
        self,
        thread_id: str,
        *,
        run_id: str | None = None,
        limit: int | None = None,
        before_version: int | None = None,
        page: int | None = None,
    ) -> AsyncIterator[StateSnapshot]:
        """The thread's snapshots, newest first, read ``page`` checkpoints at a time
        (:func:`oncegraph.runs.reading.stored_history`)."""
        return reading.stored_history(
            self.context,
            thread_id,
            run_id=run_id,
            limit=limit,
            before_version=before_version,
            page=page,
        )

    async def get_run(self, run_id: str) -> RunRecord:
        """The stored run ``run_id`` (unmasked: the service's own reads), in scope."""
        return await self.context.get_run(run_id)

    async def masker(
        self, *, thread_ids: Iterable[str] = (), run_ids: Iterable[str] = ()
    ) -> Masker:
        """A :class:`~oncegraph.runs.masking.Masker` that knows the masked values of every
        effect of these threads and runs (what a view of them must not show)."""
        return await self.context.masker(thread_ids=thread_ids, run_ids=run_ids)

    # -- helpers ---------------------------------------------------------------------------

    async def _verdict(self, run: RunRecord) -> Verdict:
        """May ``run`` go on under this graph (guarantee 10)? Raises when it may not."""
        _, heads = self.context.graph_heads()
        return self._verdict_at(run, await heads.load(run.thread_id))

    def _verdict_at(self, run: RunRecord, head: Head) -> Verdict:
        """:meth:`_verdict` for ``run`` standing on ``head``."""
        assert self.versions is not None
        verdict = self.versions.verdict(run, head)
        verdict.raise_if_incompatible()
        return verdict

    def _previous(self, verdict: Verdict) -> RunService:
        """The service of the registered previous version the run belongs to."""
        assert self.versions is not None and verdict.from_version is not None
        return RunService(
            self.versions.previous[verdict.from_version],
            self.store,
            owner=self.owner,
            sync_pool=self.sync_pool,
            scope=self.scope,
        )

    async def _migrate_if(
        self, verdict: Verdict, run: RunRecord, claim: Claim, head: Head | None = None
    ) -> Head | None:
        """The migrated head when ``verdict`` migrates ``run`` (from ``head``, else the head
        read now), else None."""
        if verdict.kind != "migrate":
            return None
        if head is None:
            _, heads = self.context.graph_heads()
            head = await heads.load(run.thread_id)
        assert self.versions is not None
        return await self.versions.migrate(self.context, run, head, claim, verdict)

    def _travel_run(
        self,
        thread_id: str,
        input: Any,
        cfg: RunConfig,
        status: RunStatus,
        launch: Launch | None,
    ) -> RunRecord:
        """A time-travel run's record (its lineage is added by the caller)."""
        run = self._new_run(
            thread_id, {} if input is None else input, cfg, status=status, launch=launch
        )
        return run if input is not None else run.replace(input=None)

    def _new_run(
        self,
        thread_id: str,
        input: Any,
        cfg: RunConfig,
        *,
        status: RunStatus,
        reason: str = "invoke",
        launch: Launch | None = None,
    ) -> RunRecord:
        spec, _ = self.context.graph_heads()
        assert self.identity is not None
        config = {**cfg.to_json(), "shape": self.versions.shape if self.versions else None}
        if launch is not None:
            config[LAUNCH_KEY] = launch.info()
        return RunRecord(
            run_id=launch.run_id if launch is not None and launch.run_id else new_run_id(),
            thread_id=thread_id,
            status=status,
            workflow_name=self.identity.name,
            workflow_version=self.identity.version,
            state_schema_version=self.identity.state_schema_version,
            graph_fingerprint=self.identity.fingerprint,
            launch_reason=reason,
            input=input_json(input, spec),
            config=config,
            lease_owner=self.owner if status is RunStatus.RUNNING else None,
            fencing_token=1 if status is RunStatus.RUNNING else 0,
            app_id=self.scope.app_id if self.scope is not None else spec.name,
            tenant=self.scope.tenant if self.scope is not None else None,
        )


def continuable_or_latest(thread_id: str, latest: RunRecord | None) -> RunRecord:
    """The thread's latest run for a Continue (which refuses what it does not apply to,
    naming why), or the error that the thread has none."""
    if latest is None:
        return continuable(thread_id, None)  # raises, saying to send input instead
    return latest


def _start_audit(launch: Launch, run: RunRecord) -> AuditRecord:
    return audits.for_run(
        run,
        "start",
        actor=launch.actor,
        reason=launch.reason,
        details={
            "launch_reason": run.launch_reason,
            **({"request_key": launch.request_key} if launch.request_key else {}),
        },
    )


def input_json(value: Any, spec: GraphSpec) -> Any:
    """The run's input as stored: a dict of state updates (validated against the schema)."""
    if isinstance(value, Command):
        raise ConfigError(
            "Command(update=..., goto=...) as input is not supported; pass a dict of state "
            "updates, None to continue, or Command(resume=...) to answer an interrupt"
        )
    return spec.schema.encode_update(input_update(spec, value))


__all__ = ["RunHandle", "RunResult", "RunService", "input_json"]
