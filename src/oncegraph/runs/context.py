"""``RunContext``: what every helper of the run service needs, and nothing more.

The run service (:mod:`oncegraph.runs.service`) owns the lifecycle; its helpers (the
operator commands, replay and branch, the state reads, the version gate, the answer
routing, a queued run's handle) take a context instead of the service, so none of them
reaches into the service's privates. A context is one graph (``spec``; ``None`` for a
read-only context, e.g. the CLI's) over one store, seen through one scope (guarantee 15):
the reads it offers (:meth:`get_run`, :meth:`check_thread`, :meth:`open_thread`) refuse
another app's (tenant's) run or thread with ``ForeignRunError``, and :meth:`masker` and
:meth:`drive` keep what a tool declared secret out of every view and error (guarantee 14).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, cast

from oncegraph.errors import (
    ConfigError,
    LeaseLostError,
    NoRunToResumeError,
    RunNotFoundError,
    StaleStateError,
    StorageError,
)
from oncegraph.graph.spec import GraphSpec
from oncegraph.runs.masking import Masker, mask_exception, masks_of, process_masker
from oncegraph.runs.scope import Scope
from oncegraph.runtime.claim import Claim
from oncegraph.runtime.config import RunConfig, caller_id
from oncegraph.runtime.driver import Driver, Emit
from oncegraph.runtime.engine import Head
from oncegraph.runtime.executor import ThreadPool
from oncegraph.runtime.heads import Heads
from oncegraph.runtime.replay import ReplayPolicy
from oncegraph.runtime.subgraph import run_subgraph_node
from oncegraph.storage.protocols import Checkpointer, ThreadOpening
from oncegraph.storage.records import RunRecord, RunStatus, ThreadRecord

# Errors of the store and of a lost claim: their text holds no payload, and reading the
# store again to mask them could only wait on the trouble.
_STORE_TROUBLE = (StorageError, LeaseLostError, StaleStateError)
# Threads whose effects a view reads at once (Masker): one statement each, with its ids as
# parameters (SQLite allows 32,766 per statement).
_THREADS_PER_READ = 500
# Who waits to learn that a run started (RunService.start): told once, by the first
# RunContext.drive of the task the start made (a new run, a continue, an answer, a replay:
# each goes through drive once the run is held).
STARTED: ContextVar[Callable[[RunRecord], None] | None] = ContextVar(
    "oncegraph_run_started", default=None
)


@dataclass(frozen=True, slots=True)
class RunResult:
    """How a run call ended without an error: the final state and any open questions."""

    run: RunRecord
    values: dict[str, Any]
    interrupts: tuple[dict[str, Any], ...] = ()

    def output(self) -> dict[str, Any]:
        """LangGraph's shape: the state, with ``__interrupt__`` when the run paused."""
        values = dict(self.values)
        if self.interrupts:
            values["__interrupt__"] = list(self.interrupts)
        return values


class RunContext:
    """One graph over one store, in one scope. See the module docstring."""

    __slots__ = (
        "_heads",
        "_opens",
        "_ready",
        "masks",
        "owner",
        "scope",
        "spec",
        "store",
        "sync_pool",
    )

    def __init__(
        self,
        spec: GraphSpec | None,
        store: Checkpointer,
        *,
        owner: str,
        scope: Scope | None,
        sync_pool: ThreadPool | None = None,
    ) -> None:
        self.spec = spec
        self.store = store
        self.owner = owner
        self.scope = scope
        self.sync_pool = sync_pool  # the app's own pool for sync calls; None: the process's
        self.masks = masks_of(spec)
        self._heads = Heads(spec, store) if spec is not None else None
        self._opens = isinstance(store, ThreadOpening)  # checked once (a protocol check)
        self._ready = False

    def scoped(self, scope: Scope) -> RunContext:
        """This context seen through ``scope`` (it shares the graph and the store)."""
        bound = copy.copy(self)
        bound.scope = scope
        return bound

    def child(self, spec: GraphSpec) -> RunContext:
        """A read context of a subgraph's own thread, in this context's scope."""
        return RunContext(spec, self.store, owner=self.owner, scope=self.scope)

    # -- the graph --------------------------------------------------------------------------

    @property
    def graph(self) -> GraphSpec:
        """The graph (a read-only context has none: ``ConfigError``)."""
        return self.graph_heads()[0]

    @property
    def heads(self) -> Heads:
        """The graph's state reader (a read-only context has none: ``ConfigError``)."""
        return self.graph_heads()[1]

    def graph_heads(self) -> tuple[GraphSpec, Heads]:
        if self.spec is None or self._heads is None:
            raise ConfigError(
                "this run service has no graph (a read-only service, e.g. the CLI's); running "
                "and reading state need the compiled app"
            )
        return self.spec, self._heads

    # -- the store, through the scope ---------------------------------------------------------

    async def setup(self) -> None:
        """Create or migrate the store's schema, once per context."""
        if not self._ready:
            await self.store.setup()
            self._ready = True

    def check_run(self, run: RunRecord, what: str = "") -> RunRecord:
        """``run`` if this context may see it, else ``ForeignRunError`` (guarantee 15)."""
        return run if self.scope is None else self.scope.check(run, what)

    def may_see(self, run: RunRecord) -> bool:
        """Whether this context may see ``run`` (what an error may say of it)."""
        return self.scope is None or self.scope.admits(run)

    async def get_run(self, run_id: str) -> RunRecord:
        """The stored run ``run_id``, checked; ``RunNotFoundError`` if there is none."""
        run_id = caller_id("run_id", run_id)  # a path's or argument's id: no invisible text
        await self.setup()
        run = await self.store.get_run(run_id)
        if run is None:
            raise RunNotFoundError(f"no run {run_id!r}; list runs with app.runs(thread_id=...)")
        return self.check_run(run)

    async def latest(self, thread_id: str) -> RunRecord | None:
        """The thread's newest run, unchecked (the caller checks it)."""
        runs = await self.store.list_runs(thread_id=thread_id, limit=1)
        return runs[0] if runs else None

    async def check_thread(self, thread_id: str) -> RunRecord | None:
        """The thread's latest run, checked: a thread belongs to the app of its runs."""
        latest = await self.latest(caller_id("thread_id", thread_id))
        return latest if latest is None else self.check_run(latest, f"thread {thread_id!r}")

    async def open_thread(self, thread_id: str) -> tuple[ThreadRecord | None, RunRecord | None]:
        """The thread's row and its latest run, checked, in one request where the store
        can (:class:`ThreadOpening`)."""
        if not self._opens:
            latest = await self.check_thread(thread_id)
            return await self.store.get_thread(thread_id), latest
        thread, latest = await cast(ThreadOpening, self.store).open_thread(thread_id)
        if latest is not None:
            self.check_run(latest, f"thread {thread_id!r}")
        return thread, latest

    async def run_on(self, thread_id: str, run_id: str) -> RunRecord:
        """Run ``run_id`` of thread ``thread_id``, checked; ``NoRunToResumeError`` if the
        thread has no such run."""
        run = await self.store.get_run(run_id)
        if run is None or run.thread_id != thread_id:
            raise NoRunToResumeError(f"no run {run_id!r} on thread {thread_id!r}")
        return self.check_run(run)

    # -- masking ----------------------------------------------------------------------------

    async def masker(
        self, *, thread_ids: Iterable[str] = (), run_ids: Iterable[str] = ()
    ) -> Masker:
        """A :class:`~oncegraph.runs.masking.Masker` that knows the masked values of every
        effect of these threads and runs (what a view of them must not show)."""
        masker = Masker(self.masks)
        # a result only holds secrets in tool calls to tools masked by name (Masker.learn)
        results = bool(self.masks)
        threads = sorted(set(thread_ids))
        # the threads' effects in a few reads, not one per thread (a listing of 100 runs)
        for at in range(0, len(threads), _THREADS_PER_READ):
            for payload in await self.store.list_effect_payloads(
                thread_ids=threads[at : at + _THREADS_PER_READ], results=results
            ):
                masker.learn_payload(payload)
        for run_id in sorted(set(run_ids)):
            for payload in await self.store.list_effect_payloads(run_id=run_id, results=results):
                masker.learn_payload(payload)
        return masker

    async def mask_error(self, run: RunRecord, exc: BaseException) -> None:
        """Rewrite ``exc``'s text with what the run's thread holds secret masked."""
        masker = process_masker()
        if not isinstance(exc, _STORE_TROUBLE):  # the store's own errors quote no payload
            try:
                masker.absorb(await self.masker(thread_ids=(run.thread_id,)))
            except Exception:  # the store cannot say: mask by what the process knows
                pass
        mask_exception(exc, masker)

    # -- driving ----------------------------------------------------------------------------

    def make_driver(
        self, cfg: RunConfig, emit: Emit, claim: Claim, replay: ReplayPolicy | None = None
    ) -> Driver:
        """A driver of one run of this graph, under ``claim``."""
        spec, heads = self.graph_heads()
        return Driver(
            spec,
            self.store,
            heads,
            cfg,
            emit,
            claim,
            replay=replay,
            sync_pool=self.sync_pool,
            subgraphs=run_subgraph_node,
        )

    async def drive(self, driver: Driver, head: Head, run: RunRecord) -> RunResult:
        """Run ``run`` from ``head`` to its end or next interrupt; an error leaving here
        quotes no masked value (what is recorded is recorded already)."""
        started = STARTED.get()
        if started is not None:  # the run is held and goes on: its id is known now
            STARTED.set(None)
            started(run)
        if not head.checkpoint.next:  # nothing left to run (a branch of a finished state)
            await driver.set_status(run, RunStatus.COMPLETED, None)
        try:
            head = await driver.run(head, run)
        except Exception as exc:
            await self.mask_error(run, exc)
            raise
        values = driver.shown if driver.shown is not None else head.values
        return RunResult(run, dict(values), tuple(driver.interrupts))

    async def with_answers(self, policy: ReplayPolicy) -> ReplayPolicy:
        """``policy`` with the interrupt answers the replayed run got, by node and step,
        in order (read from the audit log); a time-travel run's (``refire``) ask again."""
        if policy.refire:
            return policy
        found = await self.store.list_audit(run_id=policy.evidence_run_id, limit=10_000)
        answers: dict[tuple[str, int], list[tuple[int, Any]]] = {}
        for record in found:
            details = record.details
            if record.action == "answer" and "step" in details:
                key = (str(details["node"]), int(details["step"]))
                answers.setdefault(key, []).append((int(details["index"]), details["answer"]))
        ordered = {
            key: tuple(a for _, a in sorted(given, key=lambda pair: pair[0]))
            for key, given in answers.items()
        }
        with_answers: ReplayPolicy = dataclasses.replace(policy, answers=ordered)
        return with_answers

    async def policy(self, run: RunRecord) -> ReplayPolicy | None:
        """A replay run's policy, as stored with it (answers read again from the audit)."""
        stored = run.config.get("replay") if isinstance(run.config, Mapping) else None
        if not isinstance(stored, Mapping):
            return None
        return await self.with_answers(ReplayPolicy.from_json(stored))


__all__ = ["STARTED", "RunContext", "RunResult"]
