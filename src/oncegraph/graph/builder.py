"""``StateGraph``: build a graph the way LangGraph users already know."""

from __future__ import annotations

import dataclasses
import inspect
import sys
import types
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from oncegraph.errors import ConfigError, GraphValidationError
from oncegraph.graph.caching import checked_cache, checked_policy
from oncegraph.graph.constants import END, START
from oncegraph.graph.inputs import NODE_CLASSES, replay_class
from oncegraph.graph.params import injected, input_schema_of
from oncegraph.graph.retry import node_retry
from oncegraph.graph.runnables import as_node, is_runnable, runnable_name
from oncegraph.graph.spec import (
    BranchSpec,
    GraphSpec,
    JoinSpec,
    NodeSpec,
    breakpoint_names,
    positional_params,
)
from oncegraph.graph.timeouts import check_async, split
from oncegraph.state.channels import StateSchema

if TYPE_CHECKING:
    from oncegraph.app import CompiledGraph
    from oncegraph.storage.protocols import Checkpointer

_RESERVED = frozenset({START, END})

DEFAULT_ERROR_HANDLER = "__default_error_handler__"
"""The node name of the error handler given to ``set_node_defaults(error_handler=...)``."""

# What compile() makes, and the check of a graph's tools it runs, are given by the app
# module (``oncegraph.app``, which imports this one), so the builder imports nothing
# above the graph layer: see :func:`compiles_to`.
_compiled: type[CompiledGraph] | None = None
_check_tools: Callable[..., None] | None = None


def compiles_to(compiled: type[CompiledGraph], check_tools: Callable[..., None]) -> None:
    """Install the class ``compile()`` makes and the check of a graph's tools
    (``oncegraph.tools.keycheck.check_tools``); the app module does, once."""
    global _compiled, _check_tools
    _compiled, _check_tools = compiled, check_tools


def _app_class() -> type[CompiledGraph]:
    if _compiled is None:  # pragma: no cover - importing oncegraph installs it
        raise ConfigError("the compiled app is not installed: import oncegraph first")
    return _compiled


class StateGraph:
    """A graph of nodes over a shared state.

    ``StateGraph(State)`` where ``State`` is a TypedDict, dataclass or pydantic model;
    fields annotated ``Annotated[T, reducer]`` merge concurrent writes.
    """

    def __init__(
        self,
        state_schema: Any = None,
        context_schema: Any = None,
        *,
        input_schema: Any = None,
        output_schema: Any = None,
        name: str = "graph",
        version: str | int = "1",
        state_schema_version: int = 1,
    ) -> None:
        """``input_schema`` limits what ``invoke`` accepts, ``output_schema`` what it
        returns (both default to the state); their fields that the state lacks become
        state fields too, as in LangGraph. ``context_schema`` is kept for the run's
        context (``invoke(..., context=...)``)."""
        if state_schema is None:
            if input_schema is None:
                raise GraphValidationError(
                    "StateGraph needs a state schema: StateGraph(State), a TypedDict, "
                    "dataclass or pydantic model class"
                )
            state_schema = input_schema
        self.schema = self.state_schema = StateSchema.of(state_schema)
        self.input_schema = StateSchema.of(input_schema) if input_schema is not None else None
        self.output_schema = StateSchema.of(output_schema) if output_schema is not None else None
        self.context_schema = context_schema
        self.schema = self.schema.with_fields_of(self.input_schema, self.output_schema)
        self.name = name
        self.version = str(version)
        self.state_schema_version = state_schema_version
        self.nodes: dict[str, NodeSpec] = {}
        self.edges: dict[str, list[str]] = {}
        self.branches: dict[str, list[BranchSpec]] = {}
        self.joins: list[JoinSpec] = []

    @property
    def channels(self) -> Mapping[str, Any]:
        """The state's channels, by key (LangGraph's ``builder.channels``): one for each
        field of the state schema and of the input / output schemas merged into it."""
        return self.schema.channels

    @property
    def managed(self) -> Mapping[str, Any]:
        """The state's managed fields (``remaining_steps: RemainingSteps``), by name: the
        run fills them in for each step (:mod:`oncegraph.state.managed`)."""
        return self.schema.managed

    def add_node(
        self,
        node: str | Callable[..., Any],
        action: Callable[..., Any] | None = None,
        *,
        timeout: Any = None,
        inline: bool = False,
        retry_policy: Any = None,
        input_schema: Any = None,
        destinations: Sequence[str] | Mapping[str, str] | None = None,
        metadata: Mapping[str, Any] | None = None,
        defer: bool = False,
        error_handler: Callable[..., Any] | None = None,
        replay: str = "repeat",
        cache_policy: Any = None,
    ) -> StateGraph:
        """Add a node. ``timeout`` overrides the run's ``node_timeout`` for this node
        (seconds), or is LangGraph's ``TimeoutPolicy(run_timeout=, idle_timeout=)`` for a
        coroutine node (:mod:`oncegraph.graph.timeouts`).

        Sync nodes run in a worker thread, so a timeout can be enforced and a slow node
        does not stall other runs on the event loop. ``inline=True`` calls a sync node on
        the event loop thread instead, saving the thread hand-off (tens of microseconds,
        far more on a busy machine): for quick, CPU-only nodes that never block. An inline
        node cannot be timed out (``node_timeout`` does not apply to it) and cannot call
        the sync ``effect()`` helper.

        A compiled graph is a node too (a subgraph): it runs inside this graph's run, its
        steps, effects and interrupts kept under this run (see
        :mod:`oncegraph.runtime.subgraph`). ``retry_policy`` retries the node when it
        raises (:mod:`oncegraph.graph.retry`); ``input_schema`` types the node's input
        (``Send`` payloads); ``destinations`` names where its ``Command(goto=...)`` may go
        (drawn by ``get_graph()``); ``metadata`` is drawn by ``get_graph()`` too and kept
        out of the run.

        ``error_handler``: a function called when the node fails for good (after its
        retries), with the state and, to a parameter annotated ``NodeError``, the node
        and its error; what it returns (an update, a ``Command`` to route) stands for the
        node's result, and the node's own edges do not fire. oncegraph's own verdicts (an
        effect whose outcome is unknown, a lost lease) are never handed to it.

        ``defer=True``: the node, once an edge pulls it, waits until the run has nothing
        else left to run (no other node pulled, nothing sent), then runs: a step that
        gathers what branches of different lengths produced.

        ``replay``: what the node is to a replay (:mod:`oncegraph.graph.inputs`):
        ``"repeat"`` (the default) runs it again, its recorded calls served; ``"live"``
        says it makes requests outside its tools and ``effect()`` calls, so an evidence
        or simulation replay refuses to run it.
        ``cache_policy``: a :class:`~oncegraph.cache.CachePolicy`; in a graph compiled
        with ``cache=``, the node's result for an input it already ran on is served from
        the cache (never for a run that performed an effect: :mod:`oncegraph.cache.base`).
        """
        CompiledGraph = _app_class()  # the class, as the app names it

        timeout, timing = split(str(node) if isinstance(node, str) else "", timeout)
        if action is None:
            if isinstance(node, str):
                raise GraphValidationError(f"add_node({node!r}) needs a function to run")
            action = node
            name = getattr(node, "__name__", None) or getattr(node, "name", None)
            if isinstance(node, CompiledGraph):
                name = node.spec.name
            elif name is None and is_runnable(node):
                name = runnable_name(node)
            elif name is None and callable(node) and not isinstance(node, type):
                name = type(node).__name__  # a callable object: its class's name
            if not isinstance(name, str):
                raise GraphValidationError(f"cannot name node {node!r}; pass a name first")
        else:
            if not isinstance(node, str):
                raise GraphValidationError("add_node(name, fn): the name must be a string")
            name = node
        if name in _RESERVED:
            raise GraphValidationError(f"{name!r} is reserved; choose another node name")
        if not name or ":" in name or "|" in name:
            raise GraphValidationError(
                f"node name {name!r} must be non-empty, without ':' or '|' (they separate "
                "task ids and subgraph namespaces)"
            )
        if name in self.nodes:
            raise GraphValidationError(f"node {name!r} is already in the graph")
        if isinstance(action, StateGraph):
            raise GraphValidationError(
                f"node {name!r}: add the compiled graph (builder.compile()), not its builder"
            )
        retry = node_retry(name, retry_policy)
        replays = replay_class(replay, f"node {name!r}", NODE_CLASSES)
        policy = checked_policy(name, cache_policy)
        drawn = tuple(destinations or ())
        labels = tuple(destinations.values()) if isinstance(destinations, Mapping) else ()
        handler = self._handler(f"__error_handler__{name}", error_handler)
        drawn_metadata = dict(metadata) if metadata else None
        if isinstance(action, CompiledGraph):
            if inline:
                raise GraphValidationError(f"node {name!r}: a subgraph cannot be inline")
            child = action.spec
            spec = NodeSpec(
                name,
                action,
                True,
                False,
                timeout,
                False,
                retry,
                subgraph=action,
                input_schema=child.input_schema or child.schema,
                destinations=drawn,
                destination_labels=labels,
                error_handler=handler,
                replay=replays,
                cache_policy=policy,
            )
            self.nodes[name] = dataclasses.replace(
                spec, timeout_policy=timing, defer=defer, metadata=drawn_metadata
            )
            return self
        if is_runnable(action):  # a LangChain Runnable (or a dict of them)
            action = as_node(action)
        if not callable(action):
            raise GraphValidationError(
                f"node {name!r}: {action!r} is not callable; pass a function, a compiled "
                "graph or a LangChain Runnable"
            )
        spec = NodeSpec.of(name, action, timeout, inline)
        if inline and spec.is_async:
            raise GraphValidationError(
                f"node {name!r} is a coroutine function; inline=True is for sync functions "
                "(coroutines already run on the event loop)"
            )
        if inline and timeout is not None:
            raise GraphValidationError(
                f"node {name!r}: an inline node runs on the event loop thread and cannot be "
                "timed out; pass timeout= or inline=True, not both"
            )
        own = (
            StateSchema.of(input_schema)
            if input_schema is not None
            else input_schema_of(action, self.schema.source)
        )
        self.nodes[name] = dataclasses.replace(
            spec,
            retry=retry,
            input_schema=own,
            destinations=drawn,
            destination_labels=labels,
            error_handler=handler,
            cache_policy=policy,
            replay=replays,
            timeout_policy=timing,
            defer=defer,
            metadata=drawn_metadata,
        )
        if own is not None:  # LangGraph: a node's own input schema adds its fields
            self.schema = self.schema.with_fields_of(own)
        return self

    def _handler(self, name: str, fn: Callable[..., Any] | None) -> NodeSpec | None:
        """The node spec of an error handler (named as LangGraph names it)."""
        if fn is None:
            return None
        if not callable(fn):
            raise GraphValidationError(f"error_handler={fn!r} is not callable; pass a function")
        if name in self.nodes:
            raise GraphValidationError(
                f"the error handler's node name {name!r} is already a node of the graph; "
                "rename that node"
            )
        spec = NodeSpec.of(name, fn)
        inject = injected(fn, handler=True)
        if inject != spec.inject:
            spec = dataclasses.replace(spec, inject=inject, takes_config=False)
        return spec

    def set_node_defaults(
        self,
        *,
        retry_policy: Any = None,
        error_handler: Callable[..., Any] | None = None,
        timeout: Any = None,
        cache_policy: Any = None,
    ) -> StateGraph:
        """Defaults for every node that does not set its own (applied at ``compile``):
        ``retry_policy`` and ``timeout`` apply to error handlers too, ``error_handler``
        to the other nodes only (a handler that fails fails the run)."""
        if cache_policy is not None:
            checked_policy("set_node_defaults", cache_policy)
            self._defaults = {**self._defaults, "cache_policy": cache_policy}
        if retry_policy is not None:
            self._defaults = {**self._defaults, "retry_policy": retry_policy}
        if error_handler is not None:
            self._defaults = {**self._defaults, "error_handler": error_handler}
        if timeout is not None:
            self._defaults = {**self._defaults, "timeout": split("default", timeout)}
        return self

    _defaults: Mapping[str, Any] = {}

    def _with_defaults(self) -> dict[str, NodeSpec]:
        """The nodes with :meth:`set_node_defaults` applied where they set nothing."""
        if not self._defaults:
            return dict(self.nodes)
        retry_policy = self._defaults.get("retry_policy")
        timeout = self._defaults.get("timeout")
        cache_policy = self._defaults.get("cache_policy")
        default_handler = None
        if self._defaults.get("error_handler") is not None:
            default_handler = self._handler(DEFAULT_ERROR_HANDLER, self._defaults["error_handler"])

        def filled(spec: NodeSpec) -> NodeSpec:
            changes: dict[str, Any] = {}
            if retry_policy is not None and spec.retry is None:
                changes["retry"] = node_retry(spec.name, retry_policy)
            unset = spec.timeout is None and spec.timeout_policy is None
            if timeout is not None and unset and not spec.inline:
                changes["timeout"], changes["timeout_policy"] = timeout
            if cache_policy is not None and spec.cache_policy is None:
                changes["cache_policy"] = cache_policy
            return dataclasses.replace(spec, **changes) if changes else spec

        if default_handler is not None:
            default_handler = filled(default_handler)
        out: dict[str, NodeSpec] = {}
        for name, spec in self.nodes.items():
            spec = filled(spec)
            handler = spec.error_handler or default_handler
            if handler is not None:
                spec = dataclasses.replace(spec, error_handler=filled(handler))
            out[name] = spec
        return out

    def add_sequence(
        self, nodes: Sequence[Callable[..., Any] | tuple[str, Callable[..., Any]]]
    ) -> StateGraph:
        """Add ``nodes`` (functions, or ``(name, function)`` pairs) chained by edges in
        the given order; connect the first and last yourself."""
        if not nodes:
            raise GraphValidationError("add_sequence() needs at least one node")
        previous: str | None = None
        for item in nodes:
            if isinstance(item, tuple):
                if len(item) != 2 or not isinstance(item[0], str):
                    raise GraphValidationError(
                        f"add_sequence() takes functions or (name, function) pairs; got {item!r}"
                    )
                name, action = item
                self.add_node(name, action)
            else:
                before = set(self.nodes)
                self.add_node(item)
                (name,) = set(self.nodes) - before
            if previous is not None:
                self.add_edge(previous, name)
            previous = name
        return self

    def add_edge(self, start: str | Sequence[str], end: str) -> StateGraph:
        """An edge ``start -> end``. With a list of starts it is a waiting edge (a join):
        ``end`` runs once after ALL of them have run since it last fired, however long
        each branch is (LangGraph's semantics)."""
        sources = [start] if isinstance(start, str) else list(start)
        for src in sources:
            if src == END:
                raise GraphValidationError("END has no outgoing edges")
        if end == START:
            raise GraphValidationError("START has no incoming edges")
        if not sources:
            raise GraphValidationError("add_edge([], ...) needs at least one start node")
        if len(sources) > 1:
            join = JoinSpec(tuple(dict.fromkeys(sources)), end)
            if join not in self.joins:
                self.joins.append(join)
            return self
        src = sources[0]
        self.edges.setdefault(src, [])
        if end not in self.edges[src]:
            self.edges[src].append(end)
        return self

    def add_conditional_edges(
        self,
        source: str,
        path: Callable[..., Any],
        path_map: Mapping[Hashable, str] | Sequence[str] | None = None,
    ) -> StateGraph:
        if source == END:
            raise GraphValidationError("END has no outgoing edges")
        if isinstance(path_map, Mapping):
            mapping: dict[str, str] | None = {str(k): v for k, v in path_map.items()}
        elif path_map is not None:
            mapping = {str(v): v for v in path_map}
        else:
            mapping = None
        takes_config = positional_params(path) >= 2
        target = path if inspect.isroutine(path) else type(path).__call__
        is_async = inspect.iscoroutinefunction(path) or inspect.iscoroutinefunction(target)
        own = input_schema_of(path, self.schema.source)
        branch = BranchSpec(source, path, mapping, takes_config, is_async, own)
        self.branches.setdefault(source, []).append(branch)
        if own is not None:  # LangGraph: a router's own input schema adds its fields
            self.schema = self.schema.with_fields_of(own)
        return self

    def set_entry_point(self, node: str) -> StateGraph:
        return self.add_edge(START, node)

    def set_conditional_entry_point(
        self,
        path: Callable[..., Any],
        path_map: Mapping[Hashable, str] | Sequence[str] | None = None,
    ) -> StateGraph:
        """Route the run's first step with ``path`` (a conditional edge from START)."""
        return self.add_conditional_edges(START, path, path_map)

    def set_finish_point(self, node: str) -> StateGraph:
        return self.add_edge(node, END)

    def validate(self) -> GraphSpec:
        known = set(self.nodes) | _RESERVED
        from_start = any(START in j.sources for j in self.joins)
        if not self.edges.get(START) and not self.branches.get(START) and not from_start:
            raise GraphValidationError(
                "the graph has no entry point; add graph.add_edge(START, '<first node>')"
            )
        for src, targets in self.edges.items():
            if src not in known:
                raise GraphValidationError(
                    f"Found edge starting at unknown node {src!r}; add_node it first"
                )
            for dst in targets:
                if dst not in known:
                    raise GraphValidationError(
                        f"edge {src!r} -> {dst!r} points to unknown node {dst!r}"
                    )
        for join in self.joins:
            for src in join.sources:
                if src not in known:
                    raise GraphValidationError(
                        f"waiting edge {list(join.sources)} -> {join.target!r}: unknown node "
                        f"{src!r}; add_node it first"
                    )
            if join.target not in known:
                raise GraphValidationError(
                    f"waiting edge {list(join.sources)} -> {join.target!r} points to an "
                    "unknown node"
                )
        for src, branches in self.branches.items():
            if src not in known:
                raise GraphValidationError(f"conditional edge from unknown node {src!r}")
            for b in branches:
                for dst in (b.path_map or {}).values():
                    if dst not in known:
                        raise GraphValidationError(
                            f"conditional edge from {src!r} maps to unknown node {dst!r}"
                        )
        return GraphSpec(
            schema=self.schema,
            nodes=_checked(self._with_defaults()),
            edges={k: tuple(v) for k, v in self.edges.items()},
            branches={k: tuple(v) for k, v in self.branches.items()},
            name=self.name,
            version=self.version,
            state_schema_version=self.state_schema_version,
            # LangGraph: without an input schema, a run takes the state schema's own
            # fields as input (a field only a node's schema added is not input)
            input_schema=self.input_schema or self._own_fields(),
            # LangGraph: without an output schema, a run returns the state schema's own
            # fields, not those that input/output/node schemas added.
            output_schema=self.output_schema or self._own_fields(),
            context_schema=self.context_schema,
            joins=tuple(self.joins),
            interrupt_before=self._breakpoints,
            interrupt_after=self._breakpoints_after,
            cache=self._cache,
        )

    def _own_fields(self) -> StateSchema | None:
        """The state schema, when other schemas added fields to the state."""
        added = len(self.schema.channels) > len(self.state_schema.channels)
        return self.state_schema if added else None

    _cache: Any = None
    _breakpoints: tuple[str, ...] = ()
    _breakpoints_after: tuple[str, ...] = ()

    def compile(
        self,
        checkpointer: Checkpointer | None = None,
        *,
        interrupt_before: str | Sequence[str] | None = None,
        interrupt_after: str | Sequence[str] | None = None,
        name: str | None = None,
        version: str | int | None = None,
        migrations: Mapping[str, Callable[[dict[str, Any]], dict[str, Any]]] | None = None,
        previous_versions: Mapping[str, Any] | None = None,
        debug: bool = False,
        store: Any = None,
        cache: Any = None,
        sync_threads: int | None = None,
        strict: bool = False,
    ) -> CompiledGraph:
        """The runnable app. ``interrupt_before`` / ``interrupt_after`` (node names, or
        ``"*"`` for every node) pause the run before / after those nodes; continue with
        ``invoke(None, config)``.

        Versioning (guarantee 10): ``version`` names this graph's version; ``migrations=
        {old_version: fn}`` brings the stored state of a run started by ``old_version``
        to this graph (``fn(stored) -> values``); ``previous_versions={old_version:
        old_graph}`` runs such a run to its end on the old graph (a ``StateGraph`` or a
        compiled app of it). Otherwise a run of another version is refused unless the
        change is compatible (additions it does not stand on).

        ``sync_threads``: this app's sync nodes and tools run in a pool of their own with
        up to that many threads (``oncegraph-sync-N``); without it they share the process
        pool (64 threads, ``ONCEGRAPH_THREADS``; a worker grows it to its concurrency).

        A ``write`` tool whose code never reads its idempotency key (and that does not
        say how its recipient deduplicates, ``@tool(dedup=...)``) is an
        :class:`~oncegraph.errors.UnkeyedToolWarning`; ``strict=True`` makes it a
        ``ConfigError`` (:mod:`oncegraph.tools.keycheck`)."""
        CompiledGraph = _app_class()  # the class, as the app names it
        check_tools = _check_tools
        assert check_tools is not None

        if store is not None and not (hasattr(store, "put") and hasattr(store, "get")):
            raise GraphValidationError(
                f"compile(store={store!r}): a store has get/put/search (for example "
                "oncegraph.store.memory.InMemoryStore())"
            )
        self._cache = checked_cache(cache)
        if name is not None:
            self.name = name
        if version is not None:
            self.version = str(version)
        self._breakpoints = self._breakpoint_names("interrupt_before", interrupt_before)
        self._breakpoints_after = self._breakpoint_names("interrupt_after", interrupt_after)
        spec = self.validate()
        check_tools(spec.nodes, strict=strict, stacklevel=_caller_level() + 1)
        app = CompiledGraph(
            spec,
            checkpointer=checkpointer,
            migrations=migrations,
            previous_versions=previous_versions,
            sync_threads=sync_threads,
        )
        app.node_store = store  # a node's ``store`` / ``runtime.store`` (oncegraph.store)
        return app

    def _breakpoint_names(self, what: str, names: str | Sequence[str] | None) -> tuple[str, ...]:
        return breakpoint_names(what, names, self._with_defaults() if names else self.nodes)


def _checked(nodes: dict[str, NodeSpec]) -> dict[str, NodeSpec]:
    check_async(nodes)
    return nodes


def _caller_level() -> int:
    """How far up the stack the code that asked for the compile is, from ``compile``
    (past oncegraph's own frames: ``ReactAgent.compile`` calls it too), so a warning
    points at the user's line."""
    frame: types.FrameType | None = sys._getframe(2)
    level = 1
    while frame is not None and frame.f_globals.get("__name__", "").startswith("oncegraph."):
        frame, level = frame.f_back, level + 1
    return level
