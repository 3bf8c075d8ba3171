"""The run service: the run lifecycle and every operator view, over the engine and a store.

Every surface calls it (the compiled app, the worker, the CLI, the HTTP server); none of
them touches a store directly. A service belongs to one graph (``spec``; ``None`` for a
read-only service, e.g. the CLI's listings) and one store.

The service keeps the lifecycle; each other operation is written once, in the helper
module that owns it (``listing``, ``stopping``, ``retention``, ``commands``, ``replay``;
each takes the narrow :class:`~oncegraph.runs.context.RunContext`, never the service),
and opened here as a door with its own signature (:mod:`oncegraph.runs.doors`).
The operator views (lists, state, history, the effect log) are opened the same way in
:class:`~oncegraph.runs.serviceviews.ServiceViews`, which the service extends.

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

import copy
from collections.abc import Mapping
from typing import Any

from oncegraph._forward import Forwarded
from oncegraph.errors import ConfigError, NoRunToResumeError, RunNotFoundError
from oncegraph.graph.spec import GraphSpec
from oncegraph.hitl.command import Command
from oncegraph.runs import (
    answering,
    answers,
    audits,
    claims,
    compensating,
    creating,
    handles,
    retention,
    starting,
    stopping,
    subtravel,
)
from oncegraph.runs.commands import (
    NO_ANSWER,
    Commands,
    required,
)
from oncegraph.runs.context import RunContext, RunResult
from oncegraph.runs.creating import input_json
from oncegraph.runs.doors import door, door_of
from oncegraph.runs.handles import RunHandle
from oncegraph.runs.launch import Launch
from oncegraph.runs.lifecycle import (
    AnswerInterrupt,
    ContinueRun,
    continuable,
    plan_start,
    thread_of,
)
from oncegraph.runs.listing import EFFECTS_PAGE
from oncegraph.runs.masking import Masks
from oncegraph.runs.replay import Replays
from oncegraph.runs.scope import Scope
from oncegraph.runs.serviceviews import ServiceViews
from oncegraph.runs.signing import signing_key
from oncegraph.runs.timetravel import TimeTravel, finished_state, refuse_unfinished
from oncegraph.runs.versions import Migration, VersionGate
from oncegraph.runtime.claim import Claim, default_owner
from oncegraph.runtime.config import RunConfig
from oncegraph.runtime.driver import Emit, ignore
from oncegraph.runtime.engine import Head
from oncegraph.runtime.executor import ThreadPool
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import (
    AuditRecord,
    EffectRecord,
    RunRecord,
    RunStatus,
    ThreadRecord,
)
from oncegraph.versioning import GraphIdentity, Verdict


class RunService(ServiceViews):
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

    # what the service's context holds, read through it
    spec = Forwarded[GraphSpec | None]("context")
    store = Forwarded[Checkpointer]("context")
    owner = Forwarded[str]("context")
    scope = Forwarded[Scope | None]("context")
    masks = Forwarded[Masks]("context")
    sync_pool = Forwarded[ThreadPool | None]("context")
    graph = Forwarded[GraphSpec](
        "context", "The graph this service runs (a read-only service has none: ConfigError)."
    )

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
        answering.check_resumable(run, answer)
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

    # the effect commands and the audit view, written once in runs/commands.py
    resolve_effect = door(Commands, Commands.resolve_effect)
    check_effect = door(Commands, Commands.check_effect)
    redeliver = door(Commands, Commands.redeliver)
    compensate = door(None, compensating.compensate)
    compensations = door(None, compensating.compensations)
    audit = door(Commands, Commands.audit)

    async def effect(self, effect_id: str) -> EffectRecord:
        """One effect record as an operator sees it: within this service's scope (another
        app's effect is refused with ``ForeignRunError``), its masked fields masked."""
        record = await Commands(self.context).effect(effect_id)
        return (await self.context.masker(thread_ids=(record.thread_id,))).effect(record)

    # -- replay and branch (runs/replay.py) -------------------------------------------------

    replay = door(Replays, Replays.replay)
    branch = door(Replays, Replays.branch)

    update_state = door_of(lambda s: TimeTravel(s.context, s._travel_run), TimeTravel.update)

    async def update_subgraph_state(
        self,
        thread_id: str,
        ns: str,
        values: Mapping[str, Any] | None,
        *,
        checkpoint_id: str | None = None,
        as_node: str | None = None,
    ) -> dict[str, Any]:
        """``update_state`` on a stateful subgraph's checkpoint: a fork of it with the
        edit on the subgraph's thread; its config (:mod:`oncegraph.runs.subtravel`). As
        for the parent's checkpoints, a thread whose latest run is unfinished is refused:
        the edit would change what that run goes on from."""
        await self.setup()
        _, latest = await self.context.open_thread(thread_id)
        refuse_unfinished(thread_id, latest)
        return await subtravel.update(self.context, thread_id, ns, checkpoint_id, values, as_node)

    # -- retention (runs/retention.py) -------------------------------------------------------

    prune = door(None, retention.prune)

    # -- the lifecycle -------------------------------------------------------------------

    async def run(
        self, input: Any, cfg: RunConfig, emit: Emit = ignore, *, launch: Launch | None = None
    ) -> RunResult:
        """What ``invoke(input, config)`` does: start, continue or answer (lifecycle).

        ``launch``: who the call is for (:mod:`oncegraph.runs.launch`): a new run carries
        its actor and gets a start record in the audit log; a continue is the audited
        Continue; an answer is recorded with the actor. ``input`` is read as LangGraph
        reads it on a paused run first (:func:`oncegraph.runs.answers.route`)."""
        self.context.graph_heads()  # a read-only service runs nothing: ConfigError
        thread_id = thread_of(cfg)
        await self.setup()
        thread, latest = await self.context.open_thread(thread_id)
        input = await answers.route(self.context, cfg, input, (thread, latest), defer=True)
        wanted = cfg.configurable.get("checkpoint_id")
        starts = None
        if wanted and thread is not None and cfg.configurable.get("checkpoint_ns"):
            # a stateful subgraph's checkpoint: back to the parent's step that called it
            ns = str(cfg.configurable["checkpoint_ns"])
            wanted, starts = await subtravel.resolve(self.context, thread_id, ns, str(wanted))
        if wanted and thread is not None and (starts or thread.head_checkpoint_id != wanted):
            # LangGraph's time travel: a NEW live run from a fork of that checkpoint
            travel = TimeTravel(self.context, self._travel_run)
            cp = await travel.target(thread_id, str(wanted), input, latest, starts=starts)
            if cp is not None:
                return await travel.run(
                    cp, input, cfg, emit, thread, latest, launch=launch, starts=starts
                )
        elif wanted and thread is None and input is None:
            raise RunNotFoundError(
                f"thread {thread_id!r} has no checkpoint {wanted!r} (it has none yet); start "
                "it with invoke(input, config) without a checkpoint_id"
            )
        # (a new thread's input with a checkpoint_id starts the thread, as in LangGraph:
        # the checkpoint named is not there, so nothing is gone back to or left behind)
        if input is None and cfg.run_id is None and launch is None:
            done = await finished_state(self.context, thread, latest)
            if done is not None:  # LangGraph's replay of a final checkpoint: nothing runs
                return done
            open_ = await answers.asked_again(self.context, thread, latest, emit)
            if open_ is not None:  # waiting for an answer: the same questions, nothing runs
                return open_
        named: str | None = None  # the new run's id, as the caller named it
        if cfg.run_id is not None and input is not None:
            if isinstance(input, Command) or launch is not None:
                raise ConfigError("config['run_id'] continues a stored run; pass input=None")
            stored = await self.store.get_run(cfg.run_id)
            if stored is not None:
                if stored.thread_id == thread_id and self.context.may_see(stored):
                    raise ConfigError(
                        f"config['run_id'] {cfg.run_id!r} names a stored run of this thread: "
                        "continue it with invoke(None, config), or name a new run with an id "
                        "of its own"
                    )
                # another thread's or another app's run: say only that the id is taken
                raise ConfigError(
                    f"config['run_id'] {cfg.run_id!r} cannot name this new run: the id is "
                    "taken. Name the new run with an id of its own, or leave run_id out"
                )
            named = cfg.run_id  # as in LangGraph: the id of the run this input starts
        elif cfg.run_id is not None:  # continue exactly this run
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
            return await self._answer(
                start.run,
                start.answer,
                cfg,
                emit,
                audit=asked,
                thread=thread,
                one=True,
                given=start.given,
            )
        if latest is not None and latest.status is RunStatus.ABANDONED:
            # an operator gave up on the latest run; an earlier one may still be running
            await claims.thread_free(self.store, thread_id, "")
        run = self._new_run(thread_id, start.input, cfg, status=RunStatus.RUNNING, launch=launch)
        if named is not None:
            run = run.replace(run_id=named)
        return await starting.begin(self.context, run, thread, cfg, emit, launch)

    async def start(
        self, input: Any, cfg: RunConfig, emit: Emit = ignore, *, launch: Launch | None = None
    ) -> RunHandle:
        """:meth:`run` as a task of this loop; returns once the run is held and goes on
        (a new run committed, a continue or an answer claimed), with its id. A call
        refused before that raises here, and nothing started. Cancelled while it waits,
        it cancels the run call too (a run that started stays resumable)."""
        return await handles.start(lambda: self.run(input, cfg, emit, launch=launch))

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
            return await starting.start_or_go_on(self.context, driver, run, head)
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
            return await starting.start_or_go_on(self.context, driver, run)
        finally:
            await claim.release()

    async def _answer(
        self,
        run: RunRecord,
        answer: Any,
        cfg: RunConfig,
        emit: Emit,
        *,
        audit: AuditRecord | None = None,
        thread: ThreadRecord | None = None,
        one: bool = False,
        given: Command[Any] | None = None,
    ) -> RunResult:
        """Answer ``run`` and drive it on. ``thread``: its thread's row, just read (the
        verdict's head is read from it); ``one``: a single answer, refused while several
        questions are open (:func:`oncegraph.runs.answering.take`); ``given``: the
        ``Command`` the answer came in, whose update (and goto) the answered step applies
        first."""
        cfg = cfg.going_on(run.config)  # as a continue: the stored timeouts, unless named
        verdict = await self._verdict(run, thread)
        if verdict.kind == "previous":
            return await self._previous(verdict)._answer(
                run, answer, cfg, emit, audit=audit, thread=thread, one=one, given=given
            )
        held = await answering.take(self.context, run, answer, cfg, audit, one=one, given=given)
        claim = held.claim
        try:
            head = await self._migrate_if(verdict, held.run, claim) or held.head
            for write in held.writes(answer, head):  # the question moved with a migrated head
                await self.store.put_task_write(write, run_id=run.run_id, fence=claim.token)
            policy = await self.context.policy(held.run)
            driver = self.context.make_driver(cfg, emit, claim, policy)
            return await self.context.drive(driver, head, held.run)
        finally:
            await claim.release()

    async def submit(self, input: Any, cfg: RunConfig) -> RunRecord:
        """Queue a run for the workers; a thread runs its runs one at a time, in order.
        ``Command(resume=answer)`` answers the thread's waiting run and queues it, so a
        worker goes on with it (:meth:`_queue_answer`).

        Only a store workers claim from (PostgreSQL) takes it: anywhere else the run would
        wait forever, so it is refused before anything is written."""
        if isinstance(input, Command) and input.has_resume:
            creating.require_queue(self.context)
            thread_id = thread_of(cfg)
            await self.setup()
            thread, latest = await self.context.open_thread(thread_id)
            input = await answers.route(self.context, cfg, input, (thread, latest), defer=True)
            start = plan_start(thread_id, input, latest)
            if not isinstance(start, AnswerInterrupt):
                raise NoRunToResumeError(
                    f"thread {thread_id!r} has no run waiting for an answer; nothing was "
                    "queued. submit(input, config) queues new input"
                )
            return await self._queue_answer(start.run, start.answer, cfg, thread, start.given)
        return await creating.submit(self.context, *self._identity(), input, cfg)

    async def _queue_answer(
        self,
        run: RunRecord,
        answer: Any,
        cfg: RunConfig,
        thread: ThreadRecord | None,
        given: Command[Any] | None = None,
    ) -> RunRecord:
        """The answer recorded now, as an answer given here is (the run's lock, its next
        open question, the audited answer with its actor, a migrated head first), and the
        run queued instead of driven: a worker claims it and goes on from the answer.
        ``thread``: the thread's row as read to route the answer (the verdict's head)."""
        verdict = await self._verdict(run, thread)
        if verdict.kind == "previous":
            return await self._previous(verdict)._queue_answer(run, answer, cfg, thread, given)
        actor = str(cfg.configurable.get("actor") or "submit")
        asked = audits.for_run(run, "answer", actor=actor, reason="queued for the workers")
        # a store that queues an answer in one transaction (PostgreSQL's: the write, the
        # queueing, the workers' notice and, unless a migration runs first, the audited
        # answer with no fence before it) does; else they go one by one
        queue_answer = getattr(self.store, "queue_answer", None)
        at_once = queue_answer is not None and verdict.kind != "migrate"
        held = await answering.take(
            self.context, run, answer, cfg, asked, one=True, fence=not at_once, given=given
        )
        return await answering.queue_taken(
            self.context,
            held,
            answer,
            at_once=at_once,
            migrated=lambda: self._migrate_if(verdict, held.run, held.claim),
        )

    # giving up on a run (runs/stopping.py)
    abandon = door(None, stopping.abandon)
    cancel = door(None, stopping.cancel)

    # -- helpers ---------------------------------------------------------------------------

    async def _verdict(self, run: RunRecord, thread: ThreadRecord | None = None) -> Verdict:
        """May ``run`` go on under this graph (guarantee 10)? Raises when it may not.
        ``thread``: the thread's row, just read (else read here)."""
        _, heads = self.context.graph_heads()
        if thread is None:
            return self._verdict_at(run, await heads.load(run.thread_id))
        return self._verdict_at(run, await heads.at(run.thread_id, thread))

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

    def _identity(self) -> tuple[GraphIdentity, Any]:
        """The graph's identity and the state's shape its new runs carry."""
        self.context.graph_heads()  # a read-only service has no graph: ConfigError
        assert self.identity is not None
        return self.identity, self.versions.shape if self.versions else None

    def _travel_run(
        self,
        thread_id: str,
        input: Any,
        cfg: RunConfig,
        status: RunStatus,
        launch: Launch | None,
    ) -> RunRecord:
        """A time-travel run's record (its lineage is added by the caller)."""
        return self._new_run(thread_id, input, cfg, status=status, launch=launch)

    def _new_run(
        self,
        thread_id: str,
        input: Any,
        cfg: RunConfig,
        *,
        status: RunStatus,
        launch: Launch | None = None,
    ) -> RunRecord:
        identity, shape = self._identity()
        return creating.new_run(
            self.context, identity, shape, thread_id, input, cfg, status=status, launch=launch
        )


def continuable_or_latest(thread_id: str, latest: RunRecord | None) -> RunRecord:
    """The thread's latest run for a Continue (which refuses what it does not apply to,
    naming why), or the error that the thread has none."""
    if latest is None:
        return continuable(thread_id, None)  # raises, saying to send input instead
    return latest


__all__ = ["EFFECTS_PAGE", "RunHandle", "RunResult", "RunService", "input_json"]
