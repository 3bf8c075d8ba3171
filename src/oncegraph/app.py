"""``CompiledGraph``: the runnable app, a thin facade over the run service.

Four run paths (``invoke``, ``ainvoke``, ``stream``, ``astream``, and ``batch`` /
``abatch`` over them) and the operator views all go through one
:class:`~oncegraph.runs.RunService` per store; the sync methods are the async ones run
through the portal (:mod:`oncegraph.runtime.portal`), never a twin. Without a
checkpointer every call gets a private in-memory store: the laws hold inside the call
and nothing outlives it.

Called from inside a running node, a graph compiled without a checkpointer runs as a
SUBGRAPH of that node's run (:mod:`oncegraph.runtime.subgraph`): its steps and effects
are kept under the parent run, so a crash never repeats them.

Streams follow LangGraph; their shapes are in :mod:`oncegraph.runtime.shapes`.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import functools
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Callable,
    Coroutine,
    Iterator,
    Mapping,
    Sequence,
)
from contextlib import aclosing
from typing import Any, Concatenate, ParamSpec, Self, TypeVar

from oncegraph.app_methods import LangGraphMethods
from oncegraph.app_operator import OperatorMethods
from oncegraph.app_state import StateMethods
from oncegraph.errors import ConfigError, UnfinishedRunError
from oncegraph.graph.builder import compiles_to
from oncegraph.graph.io import output_values, picked_output
from oncegraph.graph.spec import GraphSpec, breakpoint_names
from oncegraph.graph.view import GraphView
from oncegraph.ids import new_run_id
from oncegraph.runs.launch import Launch
from oncegraph.runs.lifecycle import thread_of
from oncegraph.runs.masking import masks_of
from oncegraph.runs.service import RunHandle, RunResult, RunService
from oncegraph.runs.submitted import Submitted
from oncegraph.runs.views import StateSnapshot
from oncegraph.runtime import executor
from oncegraph.runtime.config import RunConfig, step_seconds, thread_sleep
from oncegraph.runtime.context import current_task
from oncegraph.runtime.driver import Emit, ignore
from oncegraph.runtime.executor import THREAD_NAME, ThreadPool
from oncegraph.runtime.faults import FaultPlan
from oncegraph.runtime.lcrun import chain_run, stream_run
from oncegraph.runtime.portal import iterate_sync, run_sync
from oncegraph.runtime.shapes import STREAM_MODES, stream_shape
from oncegraph.runtime.streaming import drained
from oncegraph.runtime.subgraph import (
    on_task_loop,
    refuse_in_replay,
    stream_inside,
    stream_nested,
)
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import (
    RunRecord,
)
from oncegraph.tools.keycheck import check_tools

P = ParamSpec("P")
_G = TypeVar("_G", bound="CompiledGraph")

_NO_STORE = (
    "this graph was compiled without a checkpointer, so nothing is stored; "
    "compile(checkpointer=SqliteCheckpointer('runs.db')) to keep state"
)

_DIFFERS = (
    "oncegraph refuses new input here on purpose (LangGraph would start over on top of "
    "it): the unfinished run may hold effects whose outcome is not settled, and new input "
    "would leave them half-done or do them twice."
)


def _sync_invoke(
    method: Callable[Concatenate[_G, P], Coroutine[Any, Any, Any]],
) -> Callable[Concatenate[_G, P], Any]:
    """``invoke`` from ``ainvoke``: the same signature and docstring, run through the
    portal (or, from inside a running node without a checkpointer, as its subgraph)."""

    def invoke(self: _G, /, *args: P.args, **kwargs: P.kwargs) -> Any:
        task = current_task()
        if task is not None and self.checkpointer is None:  # a subgraph of the running node
            from oncegraph.runtime.subgraph import invoke_inside

            return invoke_inside(self, task, args[0] if args else kwargs["input"])
        # the async method is looked up on the object: a subclass's own serves its twin too
        runs = getattr(self, method.__name__)(*args, _sync=True, **kwargs)
        return run_sync(runs, "invoke")

    return _twin_of(method, invoke)


def _sync_stream(
    method: Callable[Concatenate[_G, P], AsyncIterator[Any]],
) -> Callable[Concatenate[_G, P], Iterator[Any]]:
    """``stream`` from ``astream``: the same signature and docstring, walked through the
    portal (or, from inside a running node without a checkpointer, on that node's loop)."""

    def stream(self: _G, /, *args: P.args, **kwargs: P.kwargs) -> Iterator[Any]:
        events = getattr(self, method.__name__)(*args, _sync=True, **kwargs)
        task = current_task()
        if task is not None and self.checkpointer is None:  # a subgraph of the running node
            return stream_inside(task, events)
        return iterate_sync(events, "stream")

    return _twin_of(method, stream)


_F = TypeVar("_F", bound=Callable[..., Any])


def _twin_of(method: Callable[..., Any], twin: _F) -> _F:
    """``twin`` dressed as the sync method of ``method``: its signature and docstring."""
    functools.update_wrapper(twin, method)
    twin.__name__ = method.__name__.removeprefix("a")
    twin.__qualname__ = f"CompiledGraph.{twin.__name__}"
    return twin


class CompiledGraph(LangGraphMethods, OperatorMethods, StateMethods):
    # compile(store=...): what a node's ``store`` parameter gets (``store`` below is the
    # checkpointer's)
    node_store: Any = None
    # what stream() yields without stream_mode= (a Pregel app's default is "values")
    stream_mode: str | Sequence[str] = "updates"
    # LangGraph's attribute: seconds a step may take (then the run fails with TimeoutError)
    step_timeout: float | None = None
    # the name LangChain's callbacks see the graph's run under (None: get_name()); an
    # entrypoint's graph is LangGraph's unnamed one
    run_label: str | None = None
    # and its output (None: the values returned); an entrypoint's is the function's
    run_shown: Callable[[Any], Any] | None = None

    def __init__(
        self,
        spec: GraphSpec,
        *,
        checkpointer: Checkpointer | bool | None,
        migrations: Mapping[str, Callable[[dict[str, Any]], dict[str, Any]]] | None = None,
        previous_versions: Mapping[str, Any] | None = None,
        sync_threads: int | None = None,
    ) -> None:
        self.spec = spec
        # compile(checkpointer=True): a subgraph that keeps its own state across the calls
        # of its parent's thread (runtime.subgraph); it has no store of its own
        self.stateful = checkpointer is True
        if isinstance(checkpointer, bool):
            checkpointer = None
        if checkpointer is not None and not callable(getattr(checkpointer, "commit", None)):
            raise TypeError(
                f"Invalid checkpointer provided: {type(checkpointer).__name__} is not a "
                "checkpointer; pass InMemoryCheckpointer(), SqliteCheckpointer(path) or "
                "PgCheckpointer(dsn) (or True for a subgraph that keeps its own state)"
            )
        self.checkpointer = checkpointer
        self.fingerprint = spec.fingerprint()
        previous = {str(v): _spec_of(g) for v, g in (previous_versions or {}).items()}
        if sync_threads is not None and (
            isinstance(sync_threads, bool) or not isinstance(sync_threads, int) or sync_threads < 1
        ):
            raise ConfigError(
                f"sync_threads must be a positive int (threads for sync nodes and tools), got "
                f"{sync_threads!r}; leave it out to share the process pool"
            )
        self._sync_pool = (
            ThreadPool(sync_threads, f"{THREAD_NAME}-{spec.name}")
            if sync_threads is not None
            else None
        )
        self._service = (
            RunService(
                spec,
                checkpointer,
                migrations=migrations,
                previous_versions=previous,
                sync_pool=self._sync_pool,
            )
            if checkpointer is not None
            else None
        )
        remember = getattr(checkpointer, "remember_masks", None)
        if callable(remember):  # its LangGraph-shaped reads mask what this graph's tools do
            remember(masks_of(spec))

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def app_id(self) -> str:
        """The app every run of this graph belongs to (guarantee 15): its name, the same across
        deploys. Apps that share a database need distinct names (``compile(name=...)``)."""
        return self.spec.name

    @property
    def tenant(self) -> str | None:
        """The tenant this app object is bound to (:meth:`for_tenant`), or None."""
        scope = self._service.scope if self._service is not None else None
        return scope.tenant if scope is not None else None

    def for_tenant(self, tenant: str) -> CompiledGraph:
        """This app bound to ``tenant``: the runs it starts carry the tenant, and it
        reads, lists and continues only that tenant's runs (another tenant's run or thread
        is refused with ``ForeignRunError``). Cheap: it shares the graph and the store, so
        an HTTP server can bind one per request from the caller's API key. The unbound
        app (an operator's) sees every tenant of the app."""
        bound = copy.copy(self)
        bound._service = self.service.for_tenant(tenant)
        return bound

    def get_graph(self, config: Any = None, *, xray: bool | int = False) -> GraphView:
        """The graph's nodes and edges (``.draw_mermaid()`` draws them); ``xray``: draw
        subgraph nodes as their graphs (True: all levels, a number: that many).
        ``config`` is taken as LangGraph takes it; the drawing reads nothing of it."""
        return GraphView.of(self.spec, xray)

    async def aget_graph(self, config: Any = None, *, xray: bool | int = False) -> GraphView:
        """:meth:`get_graph`, awaitable (LangGraph's async twin)."""
        return GraphView.of(self.spec, xray)

    # -- plumbing --------------------------------------------------------------------------

    @property
    def sync_pool(self) -> ThreadPool:
        """The thread pool this app's sync nodes and tools run in (its own with
        ``compile(sync_threads=N)``, else the process pool); ``.stats()`` counts the calls
        running, and the calls still running after their timeout (``stuck``)."""
        return self._sync_pool if self._sync_pool is not None else executor.pool()

    @property
    def service(self) -> RunService:
        """The run service over this app's checkpointer."""
        if self._service is None:
            raise ConfigError(_NO_STORE)
        return self._service

    @property
    def store(self) -> Checkpointer:
        return self.service.store

    async def setup(self) -> None:
        await self.service.setup()

    async def aclose(self) -> None:
        """Close the checkpointer's connections (optional: an unclosed app still exits)."""
        if self.checkpointer is not None:
            await self.checkpointer.aclose()

    def close(self) -> None:
        run_sync(self.aclose(), "close")

    async def __aenter__(self) -> Self:
        if self.checkpointer is not None:
            await self.setup()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _config(self, config: Mapping[str, Any] | None) -> RunConfig:
        cfg = RunConfig.parse(self._with_default_config(config))
        if self.step_timeout is not None:
            cfg = dataclasses.replace(cfg, step_timeout=step_seconds(self.step_timeout))
        if cfg.fault_plan is None:
            env_plan = FaultPlan.from_env()
            if env_plan is not None:
                cfg = dataclasses.replace(cfg, fault_plan=env_plan)
        return cfg

    def _for_run(
        self,
        config: Mapping[str, Any] | None,
        interrupt_before: str | Sequence[str] | None = None,
        interrupt_after: str | Sequence[str] | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> tuple[RunService, RunConfig]:
        """The service and config of one run; a private memory store without a checkpointer.
        ``options``: the call's other keywords, of which ``context`` (the run's static
        context, what its nodes' ``runtime.context`` is), ``control``, ``durability``,
        ``checkpoint_during`` and ``_sync`` (a sync caller) are read."""
        refuse_in_replay(current_task(), self.spec.name)
        options = options or {}
        context, control = options.get("context"), options.get("control")
        cfg = self._config(config)
        if context is not None:
            from oncegraph.runtime.node_runtime import coerce_context

            cfg = dataclasses.replace(
                cfg, context=coerce_context(self.spec.context_schema, context)
            )
        if control is not None:
            cfg = dataclasses.replace(cfg, control=control)
        if self.node_store is not None:
            cfg = dataclasses.replace(cfg, store=self.node_store)
        if options.get("_sync") and cfg.sleep is asyncio.sleep:  # a sync caller's waits: time.sleep
            cfg = dataclasses.replace(cfg, sleep=thread_sleep)
        if interrupt_before is not None or interrupt_after is not None:
            nodes = self.spec.nodes
            cfg = dataclasses.replace(
                cfg,
                interrupt_before=breakpoint_names("interrupt_before", interrupt_before, nodes),
                interrupt_after=breakpoint_names("interrupt_after", interrupt_after, nodes),
            )
        cfg = cfg.with_durability(options.get("durability"), options.get("checkpoint_during"))
        if self._service is not None:
            return self._service, cfg
        from oncegraph.storage.memory import InMemoryCheckpointer

        if cfg.thread_id is None:
            cfg = dataclasses.replace(cfg, thread_id=new_run_id(), named_thread=False)
        return RunService(self.spec, InMemoryCheckpointer(), sync_pool=self._sync_pool), cfg

    def _thread(self, config: Mapping[str, Any] | None) -> str:
        self.service  # noqa: B018 - no checkpointer is the first thing to report
        return thread_of(RunConfig.parse(config))

    def _run_label(self) -> str:
        return self.run_label or self.get_name()

    def _run_output(self, values: Any) -> Any:
        """The run's output as LangChain's callbacks see it."""
        shown = self.run_shown
        return values if shown is None else shown(values)

    async def _run(
        self,
        input: Any,
        cfg: RunConfig,
        service: RunService,
        emit: Emit = ignore,
        launch: Launch | None = None,
    ) -> RunResult:
        if launch is not None and service is not self._service:
            raise ConfigError(
                "launch= says who a stored run is started for; this graph was compiled "
                "without a checkpointer, so there is no run to keep it: "
                "compile(checkpointer=...)"
            )
        try:
            return await service.run(input, cfg, emit, launch=launch)
        except UnfinishedRunError as exc:
            exc.add_note(_DIFFERS)
            raise

    # -- run paths -------------------------------------------------------------------------

    async def ainvoke(
        self,
        /,
        input: Any,
        config: Mapping[str, Any] | None = None,
        *,
        interrupt_before: str | Sequence[str] | None = None,
        interrupt_after: str | Sequence[str] | None = None,
        launch: Launch | None = None,
        **kwargs: Any,
    ) -> Any:
        """Run to the end (or the next interrupt) and return the state. ``launch``: who the
        run is for, for a surface that acts for its callers (:mod:`oncegraph.runs.launch`:
        the run carries its actor and its start is audited)."""
        task = current_task()
        if task is not None and self.checkpointer is None:  # a subgraph of the running node
            from oncegraph.runtime.subgraph import run_nested

            return await run_nested(self, task, input)
        service, cfg = self._for_run(config, interrupt_before, interrupt_after, kwargs)
        thread = cfg.thread_id if cfg.named_thread else None
        # config["callbacks"]: the run reported to them (oncegraph.runtime.lcrun)
        async with chain_run(config, self._run_label(), input, thread_id=thread) as ended:
            result = await self._run(input, cfg, service, launch=launch)
            keys = kwargs.get("output_keys")
            if keys is not None:  # LangGraph's invoke(output_keys=...): these channels only
                return ended(picked_output(self.spec, result.output(), keys))
            values = output_values(self.spec, result.output(), invoked=True)
            ended(self._run_output(values))
            return values

    invoke = _sync_invoke(ainvoke)

    async def abatch(
        self,
        inputs: Sequence[Any],
        config: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[Any]:
        """``ainvoke`` each input concurrently (``config`` one for all, or one per input).

        Every run ends before this returns or raises, so no run is still working when
        the caller gets its answer; without ``return_exceptions`` the first error (in
        input order) is raised after all have ended."""
        configs = _configs(config, len(inputs))

        async def one(item: Any, cfg: Mapping[str, Any] | None) -> Any:
            return await self.ainvoke(item, cfg, **kwargs)

        results = await asyncio.gather(
            *(one(i, c) for i, c in zip(inputs, configs, strict=True)), return_exceptions=True
        )
        if not return_exceptions:
            for r in results:
                if isinstance(r, BaseException):
                    raise r
        return list(results)

    def batch(
        self,
        inputs: Sequence[Any],
        config: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[Any]:
        runs = self.abatch(inputs, config, return_exceptions=return_exceptions, **kwargs)
        task = current_task()
        if task is not None and self.checkpointer is None:  # subgraphs of the running node
            return on_task_loop(task, runs, "batch")
        return run_sync(runs, "batch")

    async def astream(
        self,
        /,
        input: Any,
        config: Mapping[str, Any] | None = None,
        *,
        stream_mode: str | Sequence[str] | None = None,
        subgraphs: bool = False,
        interrupt_before: str | Sequence[str] | None = None,
        interrupt_after: str | Sequence[str] | None = None,
        launch: Launch | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[Any]:
        """The run's chunks as it goes (``stream_mode``); ``launch`` as for
        :meth:`ainvoke`."""
        mode = self.stream_mode if stream_mode is None else stream_mode
        inside = current_task()
        saved = self._service is not None or inside is not None  # else: no checkpoints kept
        shape = stream_shape(self.spec, mode, subgraphs, saved=saved)
        if inside is not None and self.checkpointer is None:  # a subgraph of the running node
            async for item in stream_nested(self, inside, input, shape):
                yield item
            return
        service, cfg = self._for_run(config, interrupt_before, interrupt_after, kwargs)

        ran: list[Any] = []

        async def chunks() -> AsyncGenerator[Any, None]:
            queue: asyncio.Queue[Any] = asyncio.Queue()
            task = asyncio.ensure_future(
                self._run(input, cfg, service, shape(queue.put_nowait), launch=launch)
            )
            async with aclosing(drained(queue, task)) as items:
                async for item in items:
                    yield item
            ran.append(task.result())

        def output() -> Any:
            return self._run_output(output_values(self.spec, ran[0].output())) if ran else None

        thread = cfg.thread_id if cfg.named_thread else None
        # config["callbacks"]: the run reported to them, its chunks as its output
        reported = stream_run(
            config, self._run_label(), input, chunks, thread_id=thread, output=output
        )
        async with aclosing(reported) as items:
            async for item in items:
                yield item

    stream = _sync_stream(astream)

    async def astart(
        self,
        input: Any,
        config: Mapping[str, Any],
        *,
        stream_mode: str | Sequence[str] = "updates",
        subgraphs: bool = False,
        launch: Launch | None = None,
        put: Callable[[Any], None] | None = None,
    ) -> RunHandle:
        """Start a stored run as a task of this loop and return its handle
        (:class:`~oncegraph.runs.service.RunHandle`: ``run_id``, ``thread_id``,
        ``result()``) once the run is held and goes on; a call refused before that raises
        here, and nothing started. Each chunk ``astream`` would yield (``stream_mode``,
        ``subgraphs``) goes to ``put``; ``launch`` as for :meth:`ainvoke`."""
        refuse_in_replay(current_task(), self.spec.name)
        service = self.service
        emit = ignore if put is None else stream_shape(self.spec, stream_mode, subgraphs)(put)
        try:
            return await service.start(input, self._config(config), emit, launch=launch)
        except UnfinishedRunError as exc:
            exc.add_note(_DIFFERS)
            raise

    async def asubmit(self, input: Any, config: Mapping[str, Any]) -> Submitted:
        """Enqueue a run for the workers (``oncegraph worker``); returns its handle
        (:class:`~oncegraph.runs.submitted.Submitted`: ``run_id``, ``record``, ``status()``,
        ``result(timeout)``, ``cancel()``).

        A thread runs one run at a time: a run submitted while another is unfinished waits
        behind it instead of failing, and its input is kept in the run record. Needs
        PostgreSQL (workers claim from it; a NOTIFY in the same transaction wakes them):
        elsewhere it is refused with ``ConfigError``.

        ``submit(Command(resume=answer), config)`` answers the thread's waiting run here
        (audited, under the run's lock) and queues it: a worker goes on from the answer.
        """
        refuse_in_replay(current_task(), self.spec.name)
        self._thread(config)
        service = self.service
        record = await service.submit(input, self._config(config))

        async def cancel(run_id: str, reason: str, actor: str) -> RunRecord:
            return await service.cancel(run_id, reason=reason, actor=actor)

        return Submitted(service.context, record, cancel)

    def submit(self, input: Any, config: Mapping[str, Any]) -> Submitted:
        return run_sync(self.asubmit(input, config), "submit")


def _configs(
    config: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None, n: int
) -> list[Mapping[str, Any] | None]:
    if config is None or isinstance(config, Mapping):
        return [config] * n
    configs = list(config)
    if len(configs) != n:
        raise ConfigError(
            f"batch() got {n} inputs and {len(configs)} configs; pass one config for all "
            "or one per input"
        )
    return configs


__all__ = ["STREAM_MODES", "CompiledGraph", "StateSnapshot"]


def _spec_of(graph: Any) -> GraphSpec:
    """A previous version's spec, from a compiled app or a graph builder."""
    spec = getattr(graph, "spec", None)
    if isinstance(spec, GraphSpec):
        return spec
    validate = getattr(graph, "validate", None)
    if callable(validate):
        built = validate()
        if isinstance(built, GraphSpec):
            return built
    raise ConfigError(
        f"previous_versions values must be compiled apps or StateGraphs; got {graph!r}"
    )


compiles_to(CompiledGraph, check_tools)  # what StateGraph.compile() makes
