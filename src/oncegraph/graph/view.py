"""``app.get_graph()``: a drawable view of a compiled graph (nodes and edges).

Edges come from the graph's shape only (nothing runs to draw it), drawn as LangGraph
draws them: static edges are solid; a conditional edge is dotted and goes to its
``path_map`` targets (labelled with the key when it differs from the target), else to
the ``Literal[...]`` its router's return annotation names; a node annotated ``->
Command[Literal["a", "b"]]`` (or given ``destinations=``) gets dotted edges to those
names. A router with neither draws no edge. Edges are listed sorted; a node that is
the target of an edge and the source of none gets a solid edge to END; a graph with no
such node and no edge to END gets a dotted one from the node its last step runs
(:func:`_last_step`). ``get_graph(xray=True)`` (or a depth) draws each subgraph node,
and each function node that calls a compiled graph from its body
(:func:`_called_subgraph`), as that graph, its node ids prefixed ``<node>:``; a node's
metadata (:func:`_drawn_metadata`) is drawn with it.

``draw_mermaid()`` writes Mermaid text (:mod:`oncegraph.graph.mermaid`); ``to_json()``
the ``{"nodes": [...], "edges": [...]}`` form of the same view.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import typing
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, is_dataclass, replace
from typing import Any, Literal, NamedTuple, get_args, get_origin

from oncegraph.errors import ConfigError
from oncegraph.graph.constants import END, START
from oncegraph.graph.runnables import RUNNABLE_ATTR
from oncegraph.graph.spec import GraphSpec
from oncegraph.hitl.command import Command

_STEP_LIMIT = 250  # steps the drawing's walk follows (a loop is walked this far)

# The class paths the JSON drawing names, as LangGraph names them, so a tool reading
# LangGraph's drawing reads oncegraph's alike: a function node, a subgraph node, ToolNode.
_CALLABLE = ("langgraph", "_internal", "_runnable", "RunnableCallable")
_SUBGRAPH = ("langgraph", "graph", "state", "CompiledStateGraph")
_TOOL_NODE = ("langgraph", "prebuilt", "tool_node", "ToolNode")
_TWINS = {  # the agent's tool node (with its approvals) is a ToolNode as LangGraph draws it
    "oncegraph.tools.node.ToolNode": _TOOL_NODE,
    "oncegraph.prebuilt.approval.ApprovingToolNode": _TOOL_NODE,
}


@dataclass(frozen=True, slots=True)
class Node:
    id: str
    name: str
    kind: str = "function"  # function | graph (a subgraph node) | "" for END
    metadata: dict[str, Any] | None = None
    # the class path ``to_json()`` names for what runs the node (:func:`_data_id`)
    data_id: tuple[str, ...] = _CALLABLE


class Edge(NamedTuple):
    """An edge; equal to LangGraph's drawing ``Edge`` of the same fields."""

    source: str
    target: str
    data: str | None = None  # the router's key, when it differs from the target
    conditional: bool = False


def _literal_names(annotation: Any) -> list[str] | None:
    """The names of ``Literal[...]`` (inside ``Command[...]``, unions, ``Annotated``)."""
    origin = get_origin(annotation)
    if origin is Literal:
        return [str(a) for a in get_args(annotation)]
    if (
        origin is Command
        or origin in (typing.Union, typing.Annotated)
        or (origin is not None and getattr(origin, "__name__", "") == "UnionType")
    ):
        names = [n for a in get_args(annotation) for n in (_literal_names(a) or [])]
        return names or None
    return None


def _return_annotation(fn: Callable[..., Any]) -> Any:
    target = fn if inspect.isroutine(fn) else type(fn).__call__
    try:
        return typing.get_type_hints(target).get("return")
    except Exception:  # unresolvable annotations: nothing to draw from
        return getattr(target, "__annotations__", {}).get("return")


def _data_id(node: Any) -> tuple[str, ...]:
    """What ``to_json()`` names as running ``node``: a subgraph node LangGraph's compiled
    graph class, a LangChain Runnable its own id (``lc_id()``, else its class path), an
    oncegraph class with a LangGraph twin that twin, any other callable LangGraph's
    function wrapper."""
    if node.subgraph is not None:
        return _SUBGRAPH
    fn = getattr(node.fn, RUNNABLE_ATTR, node.fn)  # a Runnable node keeps its Runnable
    cls = type(fn)
    twin = _TWINS.get(f"{cls.__module__}.{cls.__qualname__}")
    if twin is not None:
        return twin
    if fn is node.fn:
        return _CALLABLE
    lc_id = getattr(fn, "lc_id", None)
    if callable(lc_id) and getattr(fn, "is_lc_serializable", None) is not None:
        return tuple(str(part) for part in lc_id())
    return (*cls.__module__.split("."), cls.__name__)


class _Loads(ast.NodeVisitor):
    """The names and attribute chains (``sub.invoke``) a function's body reads."""

    def __init__(self) -> None:
        self.loads: set[str] = set()
        self.stores: set[str] = set()

    def visit_Name(self, node: ast.Name) -> None:
        (self.loads if isinstance(node.ctx, ast.Load) else self.stores).add(node.id)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if not isinstance(node.ctx, ast.Load):
            return
        chain, parent = node.attr, node.value
        while isinstance(parent, ast.Attribute):
            chain, parent = f"{parent.attr}.{chain}", parent.value
        if isinstance(parent, ast.Name):
            self.loads.add(f"{parent.id}.{chain}")
        elif isinstance(parent, ast.Call):
            self.visit(parent.func)


def _called_subgraph(fn: Callable[..., Any]) -> Any:
    """The compiled graph a function node calls from its body (``sub.invoke(state)``,
    ``sub`` a name its closure or module holds), found as LangGraph finds it for
    ``xray``: by the names the function's source reads; None when it calls none."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
        wrapped = getattr(fn, "__wrapped__", None)
        closure = inspect.getclosurevars(wrapped if callable(wrapped) else fn)
    except (OSError, TypeError, SyntaxError, ValueError):  # no source to read
        return None
    read: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            loads = _Loads()
            loads.visit(node)
            read |= loads.loads - loads.stores
    for name, value in {**closure.globals, **closure.nonlocals}.items():
        found = [value] if name in read else []
        for chain in sorted(c for c in read if c.startswith(name + ".")):
            target = value
            for part in chain.split(".")[1:]:
                target = getattr(target, part, None)
                if target is None:
                    break
            else:
                found.append(getattr(target, "__self__", target))
        for candidate in found:
            if isinstance(getattr(candidate, "spec", None), GraphSpec):
                return candidate
    return None


def _drawn_metadata(spec: GraphSpec, name: str) -> dict[str, Any] | None:
    """A node's metadata as drawn: its ``add_node(metadata=...)``, ``defer`` when it is
    deferred, ``__interrupt`` when the graph pauses before / after it (named; ``"*"``
    marks no node, as LangGraph draws it)."""
    node = spec.nodes[name]
    drawn = dict(node.metadata or {})
    if node.defer:
        drawn["defer"] = True
    before, after = name in spec.interrupt_before, name in spec.interrupt_after
    if before or after:
        drawn["__interrupt"] = ",".join(w for w, on in (("before", before), ("after", after)) if on)
    return drawn or None


def _declared(spec: GraphSpec) -> list[Edge]:
    """Every edge the graph declares (edges to END from add_edge are left to the
    termini rule, as LangGraph draws them)."""
    edges: set[Edge] = set()
    for src, targets in spec.edges.items():
        edges.update(Edge(src, dst) for dst in targets if dst != END)
    for join in spec.joins:
        if join.target != END:  # a waiting edge to END is left to the termini rule too
            edges.update(Edge(src, join.target) for src in join.sources)
    for src, branches in spec.branches.items():
        for branch in branches:
            if branch.path_map is not None:
                for key, dst in branch.path_map.items():
                    edges.add(Edge(src, dst, key if key != dst else None, True))
                continue
            for dst in _literal_names(_return_annotation(branch.router)) or ():
                edges.add(Edge(src, dst, None, True))
    for name, node in spec.nodes.items():
        goto = _return_annotation(node.fn)
        names = _literal_names(goto) if get_origin(goto) is Command else None
        for dst in names or ():
            edges.add(Edge(name, dst, None, True))
        labels = node.destination_labels or (None,) * len(node.destinations)
        for dst, label in zip(node.destinations, labels, strict=True):
            edges.add(Edge(name, dst, label if label != dst else None, True))
    if spec.deferred:  # a node with no way out ends the run's other work: a deferred
        # node may run after it (drawn dotted, as LangGraph draws it)
        sources = {e.source for e in edges} | {s for s, ts in spec.edges.items() if ts}
        for name in spec.nodes:
            if name not in sources and name not in spec.deferred:
                edges.update(Edge(name, d, None, True) for d in spec.deferred)
    return sorted(edges, key=lambda e: (e.source, e.target, e.conditional, e.data or ""))


def _last_step(spec: GraphSpec, edges: list[Edge]) -> set[str]:
    """The nodes the last step of a walk from START runs (each edge fires; a waiting
    edge once all its sources ran), stopping when no node is next or at the limit."""
    out: dict[str, set[str]] = {}
    for e in edges:
        out.setdefault(e.source, set()).add(e.target)
    joined = {(s, j.target) for j in spec.joins for s in j.sources}
    seen: dict[str, set[str]] = {j.target: set() for j in spec.joins}
    step, ran = {START}, {START}
    for _ in range(_STEP_LIMIT):
        nxt: set[str] = set()
        for src in step:
            for dst in out.get(src, ()):
                if (src, dst) in joined:
                    seen[dst].add(src)
                    sources = {s for j in spec.joins if j.target == dst for s in j.sources}
                    if seen[dst] >= sources:
                        seen[dst] = set()
                        nxt.add(dst)
                elif dst != END:
                    nxt.add(dst)
        if not nxt:
            break
        step, ran = nxt, nxt
    return ran


@dataclass(frozen=True, slots=True)
class GraphView:
    nodes: dict[str, Node]
    edges: list[Edge]
    _first: str | None = field(default=None, compare=False)

    @classmethod
    def of(cls, spec: GraphSpec, xray: bool | int = False) -> GraphView:
        if spec.writes is not None and spec.triggers is not None:
            return cls._of_pregel(spec)
        nodes = {START: Node(START, START)}
        for name, node in spec.nodes.items():
            kind = "graph" if node.subgraph is not None else "function"
            drawn = _drawn_metadata(spec, name)
            nodes[name] = Node(name, name, kind, drawn, _data_id(node))
        edges = _declared(spec)
        targets = {e.target for e in edges if e.target != END}
        termini = sorted(targets - {e.source for e in edges})
        has_end = any(e.target == END for e in edges)
        edges += [Edge(src, END) for src in termini]
        if not termini and not has_end:
            last = _last_step(spec, edges)
            if len(last) == 1 and START not in last:
                edges.append(Edge(next(iter(last)), END, None, True))
        if any(e.target == END for e in edges):
            nodes[END] = Node(END, END, "")
        view = cls(nodes, edges)
        if xray:
            depth = xray if isinstance(xray, int) and xray is not True else True
            for name, node in spec.nodes.items():
                sub = node.subgraph if node.subgraph is not None else _called_subgraph(node.fn)
                if sub is not None:
                    inner = depth if depth is True else int(depth) - 1
                    view = view._expanded(name, GraphView.of(sub.spec, inner))
        return view

    @classmethod
    def _of_pregel(cls, spec: GraphSpec) -> GraphView:
        """A Pregel app drawn as LangGraph draws one: its nodes, then START (a node of no
        class: the input) and END; edges from START to the nodes the input triggers,
        then each node to the nodes its writes trigger (a walk of the steps, each node
        writing all its channels; a node triggered with no writer of this step gets a
        dotted edge from each), sorted, then the END rule as for a graph."""
        writes = spec.writes or {}
        subscribed: dict[str, set[str]] = {}
        for chan, names in (spec.triggers or {}).items():
            for name in names:
                subscribed.setdefault(name, set()).add(chan)
        io = spec.io
        given = {io.input} if isinstance(io.input, str) else set(io.input)

        def triggered(chans: set[str]) -> list[str]:
            return [n for n in spec.nodes if subscribed.get(n, set()) & chans]

        start = triggered(given)
        edges: set[Edge] = set()
        sources: dict[str, set[str]] = {}
        step: dict[str, set[str]] = {}
        tasks = start
        for _ in range(_STEP_LIMIT + 1):
            if not tasks:
                break
            step = {t: set(writes.get(t, ())) for t in tasks}
            sources.update({t: set(c) for t, c in step.items()})
            by_channel: dict[str, set[str]] = {}
            for src, chans in sources.items():
                for chan in chans:
                    by_channel.setdefault(chan, set()).add(src)
            nxt = triggered(set().union(*step.values()))
            for task in nxt:
                added = False
                for chan in sorted(subscribed.get(task, ())):
                    for src in sorted(by_channel.get(chan, ())):
                        edges.add(Edge(src, task))
                        if chan in step.get(src, ()):
                            added = True
                        else:
                            sources[src].discard(chan)
                if not added:
                    edges.update(Edge(src, task, None, True) for src in step)
            tasks = nxt
        nodes = {name: Node(name, name, data_id=_data_id(n)) for name, n in spec.nodes.items()}
        nodes[START] = Node(START, START, "")
        drawn = [Edge(START, t) for t in start]
        drawn += sorted(edges, key=lambda e: (e.source, e.target, e.conditional, e.data or ""))
        termini = sorted({e.target for e in edges} - {e.source for e in edges} - {END})
        if termini:
            drawn += [Edge(src, END) for src in termini]
        elif len(step) == 1:
            drawn.append(Edge(next(iter(step)), END, None, True))
        if any(e.target == END for e in drawn):
            nodes[END] = Node(END, END, "")
        return cls(nodes, drawn)

    # -- first and last nodes ------------------------------------------------------------

    def first_node(self, exclude: tuple[str, ...] = ()) -> Node | None:
        """The one node no edge (from outside ``exclude``) goes to; None when not one."""
        targets = {e.target for e in self.edges if e.source not in exclude}
        found = [n for n in self.nodes.values() if n.id not in exclude and n.id not in targets]
        return found[0] if len(found) == 1 else None

    def last_node(self, exclude: tuple[str, ...] = ()) -> Node | None:
        """The one node no edge (to outside ``exclude``) leaves; None when not one."""
        sources = {e.source for e in self.edges if e.target not in exclude}
        found = [n for n in self.nodes.values() if n.id not in exclude and n.id not in sources]
        return found[0] if len(found) == 1 else None

    def _expanded(self, name: str, inner: GraphView) -> GraphView:
        """This view with node ``name`` replaced by the subgraph ``inner`` (ids
        prefixed ``name:``); the subgraph's START / END are dropped when another node
        stands alone first / last without them and they have one edge."""
        first, last = inner.first_node(), inner.last_node()
        if len(inner.nodes) <= 1 or name not in self.nodes or first is None or last is None:
            return self
        nodes, edges = dict(inner.nodes), list(inner.edges)
        leaving = {e for e in edges if e.source == first.id}
        if inner.first_node((first.id,)) is not None and len(leaving) == 1:
            nodes.pop(first.id)
            edges = [e for e in edges if first.id not in (e.source, e.target)]
        trimmed = GraphView(nodes, edges)
        last = trimmed.last_node()
        arriving = {e for e in edges if last is not None and e.target == last.id}
        if last is not None and trimmed.last_node((last.id,)) is not None and len(arriving) == 1:
            nodes.pop(last.id)
            edges = [e for e in edges if last.id not in (e.source, e.target)]
        inner = GraphView(nodes, edges)
        head, tail = inner.first_node(), inner.last_node()

        def prefixed(node_id: str) -> str:
            return f"{name}:{node_id}"

        out = {k: v for k, v in self.nodes.items() if k != name}
        out.update(
            {
                prefixed(k): replace(v, id=prefixed(k), name=prefixed(v.name))
                for k, v in nodes.items()
            }
        )
        moved: list[Edge] = []
        for e in self.edges:
            if e.source == name and tail is not None:
                e = e._replace(source=prefixed(tail.id))
            if e.target == name and head is not None:
                e = e._replace(target=prefixed(head.id))
            moved.append(e)
        moved += [e._replace(source=prefixed(e.source), target=prefixed(e.target)) for e in edges]
        return GraphView(out, moved)

    # -- output ----------------------------------------------------------------------------

    def to_json(self) -> dict[str, list[dict[str, Any]]]:
        """``{"nodes": [{"id", "type", "data"}], "edges": [{"source", "target",
        "data"?, "conditional"?}]}``, as LangGraph writes it: END has no data; a node's
        data names the class path of what runs it (:func:`_data_id`) and the node's
        name."""
        nodes: list[dict[str, Any]] = []
        for node in self.nodes.values():
            if node.kind == "":  # END (of this graph or of a drawn subgraph): no data
                nodes.append({"id": node.id})
                continue
            entry: dict[str, Any] = {
                "id": node.id,
                "type": "runnable",
                "data": {"id": list(node.data_id), "name": node.name},
            }
            if node.metadata:
                entry["metadata"] = dict(node.metadata)
            nodes.append(entry)
        edges: list[dict[str, Any]] = []
        for e in self.edges:
            item: dict[str, Any] = {"source": e.source, "target": e.target}
            if e.data is not None:
                item["data"] = e.data
            if e.conditional:
                item["conditional"] = True
            edges.append(item)
        return {"nodes": nodes, "edges": edges}

    def draw_mermaid(
        self,
        *,
        with_styles: bool = True,
        curve_style: Any = "linear",
        wrap_label_n_words: int = 9,
        node_colors: Any = None,
        frontmatter_config: Mapping[str, Any] | None = None,
    ) -> str:
        """Mermaid flowchart text (paste it into any Mermaid renderer), as LangGraph
        writes it; ``with_styles=False`` gives the edges only. ``node_colors`` (LangChain's
        ``NodeStyles``, or a mapping of class name to style) replaces the class styles;
        ``frontmatter_config`` is merged into the YAML front matter (it needs PyYAML)."""
        from oncegraph.graph.mermaid import mermaid

        styles: Mapping[str, str] | None = None
        if node_colors is not None:
            dc = is_dataclass(node_colors) and not isinstance(node_colors, type)
            fields = asdict(node_colors) if dc else node_colors
            styles = {str(k): str(v) for k, v in dict(fields).items()}
        first, last = self.first_node(), self.last_node()
        return mermaid(
            self,
            first=first.id if first else None,
            last=last.id if last else None,
            with_styles=with_styles,
            curve=str(getattr(curve_style, "value", curve_style)),
            wrap=wrap_label_n_words,
            styles=styles,
            frontmatter=frontmatter_config,
        )

    def draw_mermaid_png(self, *args: Any, **kwargs: Any) -> bytes:
        raise ConfigError(
            "draw_mermaid_png() needs an online Mermaid renderer, which oncegraph does not "
            "call; render app.get_graph().draw_mermaid() with any Mermaid tool instead"
        )


__all__ = ["Edge", "GraphView", "Node"]
