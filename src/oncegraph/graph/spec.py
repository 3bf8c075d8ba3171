"""The compiled, immutable shape of a graph and its fingerprint."""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from oncegraph.errors import GraphValidationError
from oncegraph.state.channels import StateSchema

if TYPE_CHECKING:
    from oncegraph.graph.retry import NodeRetry


FINGERPRINT_HOOK = "__oncegraph_fingerprint__"


def node_identity(fn: Callable[..., Any]) -> tuple[str, ...]:
    """What a node's callable says about itself for the graph fingerprint.

    A callable object (or the object a bound-method node belongs to) whose class defines
    ``__oncegraph_fingerprint__(self) -> Iterable[str]`` adds those parts: what makes it
    behave differently with the same node name (a ``ToolNode``'s tools and their
    schemas and effect classes; a ``ReactAgent``'s model, prompt and tools). Plain
    functions add nothing: the fingerprint tracks the graph's shape, not code.
    """
    for owner in (fn, getattr(fn, "__self__", None)):
        if owner is None:
            continue
        hook = getattr(type(owner), FINGERPRINT_HOOK, None)
        if callable(hook):
            return tuple(str(part) for part in hook(owner))
    return ()


def positional_params(fn: Callable[..., Any]) -> int:
    """How many positional parameters ``fn`` takes (0 when it cannot be told)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return 0
    return sum(1 for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))


def breakpoint_names(
    what: str, names: str | Sequence[str] | None, nodes: Mapping[str, Any]
) -> tuple[str, ...]:
    """``names`` checked against ``nodes``: a tuple of node names, or ``("*",)``.

    A node's error handler is named as LangGraph names it (``"__error_handler__<node>"``,
    ``"__default_error_handler__"``) and is accepted here; it runs inside its failed
    node's task, in that node's step, so as in LangGraph no breakpoint stops before it
    (a node that failed with its handler then failing runs the handler again on resume,
    never the node)."""
    if names is None:
        return ()
    if names == "*":
        return ("*",)
    listed = [names] if isinstance(names, str) else list(names)
    handlers = {s.error_handler.name for s in nodes.values() if getattr(s, "error_handler", None)}
    for n in listed:
        if n not in nodes and n not in handlers:
            raise GraphValidationError(
                f"{what}={listed!r}: {n!r} is not a node of the graph (its nodes: "
                f"{sorted(nodes)}); use node names or '*'"
            )
    return tuple(listed)


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """One node. ``subgraph`` is set when the node is a compiled graph (then ``fn`` is that
    graph); ``input_schema`` is the schema its input is typed by (its first parameter's
    annotation, a subgraph's input schema), used for ``Send`` payloads; ``retry`` is its
    retry policy (``add_node(retry_policy=...)``)."""

    name: str
    fn: Callable[..., Any]
    is_async: bool
    takes_config: bool
    timeout: float | None = None  # overrides the run's node_timeout when set
    inline: bool = False  # a sync node called on the event loop thread (no hand-off)
    retry: NodeRetry | None = None
    subgraph: Any = None  # a CompiledGraph run as this node, under the parent's run
    input_schema: StateSchema | None = None
    destinations: tuple[str, ...] = ()  # drawn as edges (add_node(destinations=...))
    destination_labels: tuple[str | None, ...] = ()  # their labels (a destinations dict)
    # (parameter, kind) given by keyword: config, writer, store, runtime, error
    # (:mod:`oncegraph.graph.params`)
    inject: tuple[tuple[str, str], ...] = ()
    # add_node(error_handler=...): runs when the node fails for good (after its retries)
    error_handler: NodeSpec | None = None
    # add_node(timeout=TimeoutPolicy(...)): run/idle timeouts of each attempt
    # (oncegraph.graph.timeouts); ``timeout`` above is then its run_timeout
    timeout_policy: Any = None
    # add_node(replay=...): "repeat" (run again in a replay) or "live" (requests outside
    # the ledger: refused by a replay that must not touch the world; graph/inputs.py)
    replay: str = "repeat"
    cache_policy: Any = None  # add_node(cache_policy=...): a CachePolicy (oncegraph.cache)
    # add_node(defer=True): runs only when the run has nothing else left to run
    defer: bool = False
    # add_node(metadata=...): drawn by get_graph(), never read by the run
    metadata: Mapping[str, Any] | None = dataclasses.field(default=None, compare=False)

    @property
    def runnable(self) -> NodeRunnable:
        """LangGraph's ``StateNodeSpec.runnable``: its ``func`` is the node's function."""
        return NodeRunnable(self.fn)

    def copy(self, update: Mapping[str, Any] | None = None) -> NodeSpec:
        """This node with ``update``'s fields replaced (LangGraph's ``PregelNode.copy``)."""
        return dataclasses.replace(self, **dict(update or {}))

    @classmethod
    def of(
        cls,
        name: str,
        fn: Callable[..., Any],
        timeout: float | None = None,
        inline: bool = False,
    ) -> NodeSpec:
        from oncegraph.graph.params import injected

        target = fn if inspect.isroutine(fn) else type(fn).__call__
        is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(target)
        inject = injected(fn)
        takes_config = not inject and positional_params(fn) >= 2
        return cls(name, fn, is_async, takes_config, timeout, inline, inject=inject)


@dataclass(frozen=True, slots=True)
class NodeRunnable:
    """What ``NodeSpec.runnable`` shows of a node, as LangGraph's tests read it."""

    func: Callable[..., Any]


@dataclass(frozen=True, slots=True)
class BranchSpec:
    source: str
    router: Callable[..., Any]
    path_map: Mapping[str, str] | None
    takes_config: bool = False  # the router is ``(state, config)``
    is_async: bool = False  # a coroutine function: awaited by the driver before routing
    # the schema the router's first parameter is annotated with, when it is a state class
    # other than the graph's: a TypedDict one makes the router read only its fields
    input_schema: StateSchema | None = None

    def state_for(self, schema: StateSchema, values: Mapping[str, Any]) -> Any:
        """What the router reads of ``values`` (the state of a graph of ``schema``)."""
        own = self.input_schema
        if own is not None and own.kind == "typeddict":
            return {k: v for k, v in values.items() if k in own.channels}
        return schema.to_node_input(values)


@dataclass(frozen=True, slots=True)
class JoinSpec:
    """A waiting edge ``add_edge([a, b], target)``: ``target`` runs once after every
    source has run since it last fired (LangGraph's join). What each join has seen so far
    is kept in the checkpoint (``metadata["joins"]``, keyed by :attr:`key`)."""

    sources: tuple[str, ...]
    target: str

    @property
    def key(self) -> str:
        return f"{'+'.join(self.sources)}:{self.target}"


@dataclass(frozen=True, slots=True)
class GraphSpec:
    schema: StateSchema
    nodes: Mapping[str, NodeSpec]
    edges: Mapping[str, tuple[str, ...]]  # source -> targets (static)
    branches: Mapping[str, tuple[BranchSpec, ...]]
    name: str
    version: str
    state_schema_version: int
    input_schema: StateSchema | None = None  # None: the state schema
    output_schema: StateSchema | None = None  # None: the state schema
    context_schema: Any = None
    joins: tuple[JoinSpec, ...] = ()
    # compile(interrupt_before=..., interrupt_after=...): node names, or ("*",) for all
    interrupt_before: tuple[str, ...] = ()
    interrupt_after: tuple[str, ...] = ()
    cache: Any = None  # compile(cache=...): where cached node results live (oncegraph.cache)
    # A Pregel app (oncegraph.pregel): channel -> the nodes it triggers (a node runs in the
    # step after one that wrote a channel it subscribes to), and its input and output
    # channels (a PregelIO); None for a StateGraph
    triggers: Mapping[str, tuple[str, ...]] | None = None
    io: Any = None
    # a Pregel app: the channels each node writes (what get_graph() draws its edges from)
    writes: Mapping[str, tuple[str, ...]] | None = None

    @property
    def deferred(self) -> frozenset[str]:
        """The nodes added with ``defer=True``."""
        return frozenset(n for n, node in self.nodes.items() if node.defer)

    @property
    def async_routers(self) -> bool:
        return any(b.is_async for bs in self.branches.values() for b in bs)

    @property
    def routers_take_config(self) -> bool:
        return any(b.takes_config for bs in self.branches.values() for b in bs)

    @property
    def order(self) -> dict[str, int]:
        return {n: i for i, n in enumerate(self.nodes)}

    def fingerprint(self) -> str:
        """sha256 over nodes, static edges, waiting edges, branch sources and path maps,
        state fields, each subgraph node's own fingerprint and what each node's callable
        says about itself (:func:`node_identity`)."""
        parts = ["nodes:" + ",".join(self.nodes)]
        if self.deferred:
            parts.append("deferred:" + ",".join(sorted(self.deferred)))
        for src in sorted(self.edges):
            parts.append(f"edge:{src}->{','.join(sorted(self.edges[src]))}")
        for join in self.joins:
            parts.append(f"join:{join.key}")
        for src in sorted(self.branches):
            for b in self.branches[src]:
                pm = ",".join(f"{k}={v}" for k, v in sorted((b.path_map or {}).items()))
                parts.append(f"branch:{src}:{pm}")
        parts.append("state:" + ",".join(sorted(self.schema.channels)))
        for chan in sorted(self.triggers or ()):
            parts.append(f"trigger:{chan}->{','.join(sorted((self.triggers or {})[chan]))}")
        for name, node in self.nodes.items():
            if node.subgraph is not None:
                parts.append(f"subgraph:{name}={node.subgraph.spec.fingerprint()}")
                continue
            identity = node_identity(node.fn)
            if identity:
                digest = hashlib.sha256("\n".join(identity).encode()).hexdigest()
                parts.append(f"node:{name}={digest}")
        return "sha256:" + hashlib.sha256("\n".join(parts).encode()).hexdigest()
