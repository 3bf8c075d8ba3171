"""Mermaid text of a :class:`~oncegraph.graph.view.GraphView`, in the layout LangGraph's
``draw_mermaid()`` writes (so a drawing pasted from either looks the same).

With styles: a front matter (``curve``), each node (the first ``([...]):::first``, the
last ``([...]):::last``, the others ``id(label)``; a node's metadata, when it has
any, under its label as ``key = value`` lines), the edges, and class styles; without
styles the edges only. A subgraph's nodes (ids ``<sub>:<id>``) and the edges inside it
go in a ``subgraph <sub> ... end`` block, nested as deep as the ids are. Ids keep
``[A-Za-z0-9_-]`` and write any other character as ``\\<hex>``; a label that starts and
ends with ``*``, ``_`` or a backtick is wrapped in ``<p>...</p>``.
"""

from __future__ import annotations

import importlib
import string
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from oncegraph.errors import ConfigError

if TYPE_CHECKING:
    from oncegraph.graph.view import Edge, GraphView, Node

_ALLOWED = frozenset(string.ascii_letters + string.digits + "_-")
_MARKS = ("*", "_", "`")
_STYLES = (
    "\tclassDef default fill:#f2f0ff,line-height:1.2\n"
    "\tclassDef first fill-opacity:0\n"
    "\tclassDef last fill:#bfb6fc\n"
)


def safe_id(label: str) -> str:
    return "".join(c if c in _ALLOWED else f"\\{ord(c):x}" for c in label)


def mermaid(
    view: GraphView,
    *,
    first: str | None,
    last: str | None,
    with_styles: bool,
    curve: str,
    wrap: int,
    styles: Mapping[str, str] | None = None,
    frontmatter: Mapping[str, Any] | None = None,
) -> str:
    out: list[str] = []
    if with_styles:
        out.append(f"---\n{_frontmatter(curve, frontmatter)}---\ngraph TD;\n")
    else:
        out.append("graph TD;\n")
    inner: dict[str, dict[str, Node]] = {}
    top: dict[str, Node] = {}
    for key, node in view.nodes.items():
        if ":" in key:
            inner.setdefault(key.rsplit(":", 1)[0], {})[key] = node
        else:
            top[key] = node

    def node_line(key: str, node: Node) -> str:
        name = node.name.split(":")[-1]
        label = f"<p>{name}</p>" if name.startswith(_MARKS) and name.endswith(_MARKS) else name
        lines = _metadata_lines(node.metadata or {})
        if lines:
            label = f"{label}<hr/><small><em>" + "\n".join(lines) + "</em></small>"
        if key == first:
            return f"\t{safe_id(key)}([{label}]):::first\n"
        if key == last:
            return f"\t{safe_id(key)}([{label}]):::last\n"
        return f"\t{safe_id(key)}({label})\n"

    if with_styles:
        out.extend(node_line(k, n) for k, n in top.items())
    groups: dict[str, list[Edge]] = {}
    for e in view.edges:
        src, dst = e.source.split(":"), e.target.split(":")
        prefix = ":".join(a for a, b in zip(src, dst, strict=False) if a == b)
        groups.setdefault(prefix, []).append(e)
    seen: set[str] = set()

    def block(edges: list[Edge], prefix: str) -> None:
        self_loop = len(edges) == 1 and edges[0].source == edges[0].target
        if prefix and not self_loop:
            sub = prefix.rsplit(":", 1)[-1]
            if sub in seen:
                raise ValueError(
                    f"two subgraphs are drawn as {sub!r}: a subgraph node name is used twice; "
                    "give the subgraph nodes distinct names"
                )
            seen.add(sub)
            out.append(f"\tsubgraph {sub}\n")
            if with_styles:
                out.extend(node_line(k, n) for k, n in inner.get(prefix, {}).items())
        out.extend(_edge_line(e, wrap) for e in edges)
        for nested, nested_edges in groups.items():
            if not nested.startswith(prefix + ":") or nested == prefix:
                continue
            if ":" in nested[len(prefix) + 1 :]:
                continue
            block(nested_edges, nested)
        if prefix and not self_loop:
            out.append("\tend\n")

    block(groups.get("", []), "")
    for prefix, edges in groups.items():
        if prefix and ":" not in prefix:
            block(edges, prefix)
            seen.add(prefix)
    if with_styles:
        for prefix, members in inner.items():
            if ":" not in prefix and prefix not in seen:
                out.append(f"\tsubgraph {prefix}\n")
                out.extend(node_line(k, n) for k, n in members.items())
                out.append("\tend\n")
                seen.add(prefix)
        out.append(
            _STYLES
            if styles is None
            else "".join(f"\tclassDef {name} {style}\n" for name, style in styles.items())
        )
    return "".join(out)


def _frontmatter(curve: str, given: Mapping[str, Any] | None) -> str:
    """The YAML front matter: ``given`` (``frontmatter_config``) with the flowchart's
    curve set, keys sorted as PyYAML writes them."""
    config = dict(given or {})
    inner = dict(config.get("config") or {})
    inner["flowchart"] = {**dict(inner.get("flowchart") or {}), "curve": curve}
    config["config"] = inner
    if config == {"config": {"flowchart": {"curve": curve}}}:
        return f"config:\n  flowchart:\n    curve: {curve}\n"
    try:
        yaml: Any = importlib.import_module("yaml")
    except ImportError:
        raise ConfigError(
            "draw_mermaid(frontmatter_config=...) writes the front matter as YAML, which "
            "needs PyYAML; install it (pip install pyyaml) or leave frontmatter_config out"
        ) from None
    return str(yaml.dump(config, default_flow_style=False))


# characters a node label escapes (Mermaid reads them as syntax), "#" first
_ESCAPES = {c: f"#{ord(c)};" for c in "[](){}<>|"} | {'"': "#quot;"}


def _metadata_lines(metadata: dict[str, Any]) -> list[str]:
    """``key = value`` for each metadata entry whose value is a scalar or a collection
    of scalars (a set sorted), escaped; other values are left out."""
    lines = []
    for key, value in metadata.items():
        if isinstance(value, str | int | float | bool):
            text = str(value)
        elif isinstance(value, list | tuple | set) and all(
            isinstance(v, str | int | float | bool) for v in value
        ):
            items = [str(v) for v in value]
            text = ", ".join(sorted(items) if isinstance(value, set) else items)
        else:
            continue
        line = f"{key} = {text}".replace("#", "#35;")
        for char, entity in _ESCAPES.items():
            line = line.replace(char, entity)
        lines.append(line)
    return lines


def _edge_line(e: Edge, wrap: int) -> str:
    if e.data is None:
        arrow = " -.-> " if e.conditional else " --> "
    else:
        words = str(e.data).split()
        text = str(e.data)
        if len(words) > wrap:
            text = "&nbsp<br>&nbsp".join(
                " ".join(words[i : i + wrap]) for i in range(0, len(words), wrap)
            )
        arrow = f" -. &nbsp;{text}&nbsp; .-> " if e.conditional else f" -- &nbsp;{text}&nbsp; --> "
    return f"\t{safe_id(e.source)}{arrow}{safe_id(e.target)};\n"


__all__ = ["mermaid", "safe_id"]
