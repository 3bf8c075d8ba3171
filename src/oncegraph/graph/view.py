"""``app.get_graph()``: a drawable view of a compiled graph (nodes and edges).

Edges come from the graph's shape only: static edges are solid; a conditional edge is
dotted and goes to its ``path_map`` targets, else to the ``Literal[...]`` its router's
return annotation names, else to every node and END (the router may pick any); a node
annotated ``-> Command[Literal["a", "b"]]`` gets dotted edges to those names. Nothing
runs to draw it.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, get_args, get_origin

from oncegraph.errors import ConfigError
from oncegraph.graph.constants import END, START
from oncegraph.graph.spec import GraphSpec
from oncegraph.hitl.command import Command


@dataclass(frozen=True, slots=True)
class Node:
    id: str
    name: str


@dataclass(frozen=True, slots=True)
class Edge:
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


@dataclass(frozen=True, slots=True)
class GraphView:
    nodes: dict[str, Node]
    edges: list[Edge]

    @classmethod
    def of(cls, spec: GraphSpec) -> GraphView:
        names = [START, *spec.nodes, END]
        nodes = {n: Node(n, n) for n in names}
        edges: list[Edge] = []
        for src, targets in spec.edges.items():
            edges.extend(Edge(src, dst) for dst in targets)
        for src, branches in spec.branches.items():
            for branch in branches:
                if branch.path_map is not None:
                    for key, dst in branch.path_map.items():
                        edges.append(Edge(src, dst, key if key != dst else None, True))
                    continue
                picked = _literal_names(_return_annotation(branch.router))
                for dst in picked if picked is not None else [*spec.nodes, END]:
                    edges.append(Edge(src, dst, None, True))
        for name, node in spec.nodes.items():
            goto = _return_annotation(node.fn)
            if get_origin(goto) is Command:
                for dst in _literal_names(goto) or []:
                    edges.append(Edge(name, dst, None, True))
        used = {e.source for e in edges} | {e.target for e in edges}
        if END not in used:
            del nodes[END]
        return cls(nodes, edges)

    def draw_mermaid(self) -> str:
        """Mermaid flowchart text (paste it into any Mermaid renderer)."""
        lines = ["graph TD;"]
        for node in self.nodes.values():
            if node.id in (START, END):
                lines.append(f"\t{node.id}([<p>{node.name}</p>]):::{_cls(node.id)}")
            elif node.id.isidentifier():
                lines.append(f"\t{node.id}({node.name})")
            else:
                lines.append(f'\t{_mid(node.id)}("{node.name}")')
        for e in self.edges:
            src, dst = _mid(e.source), _mid(e.target)
            if not e.conditional:
                lines.append(f"\t{src} --> {dst};")
            elif e.data is not None:
                lines.append(f"\t{src} -. &nbsp;{e.data}&nbsp; .-> {dst};")
            else:
                lines.append(f"\t{src} -.-> {dst};")
        lines += [
            "\tclassDef default fill:#f2f0ff,line-height:1.2",
            "\tclassDef first fill-opacity:0",
            "\tclassDef last fill:#bfb6fc",
        ]
        return "\n".join(lines) + "\n"

    def draw_mermaid_png(self, *args: Any, **kwargs: Any) -> bytes:
        raise ConfigError(
            "draw_mermaid_png() needs an online Mermaid renderer, which oncegraph does not "
            "call; render app.get_graph().draw_mermaid() with any Mermaid tool instead"
        )


def _cls(node: str) -> str:
    return "first" if node == START else "last"


def _mid(node: str) -> str:
    """A Mermaid-safe id (node names may hold spaces or dashes)."""
    if node.isidentifier():
        return node
    return "n_" + "".join(c if c.isalnum() else f"_{ord(c):x}_" for c in node)


__all__ = ["Edge", "GraphView", "Node"]
