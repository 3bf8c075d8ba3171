"""A picture of a graph as inline SVG, drawn on the server: no script, no build step,
nothing fetched from elsewhere.

Nodes are laid out in rows by their distance from START along the graph's edges (as
:meth:`oncegraph.app.CompiledGraph.get_graph` sees them); an edge to the same or an
earlier row (a loop) is drawn as a curve on the right, one over rows between as a curve
on the left. Static edges are solid, conditional ones dashed. The ``current`` nodes
(what the run does next, or where it waits) are marked with the class ``current`` and
``data-current``; every node has ``data-node``.
Styling is the stylesheet's (``svg.graph`` in ``oncegraph.css``): the page's policy
allows no inline style.
"""

from __future__ import annotations

from collections.abc import Iterable
from html import escape

from oncegraph.graph.constants import END, START
from oncegraph.graph.view import GraphView

ROW = 70  # px between rows
GAP = 24  # px between nodes of a row
HEIGHT = 30  # a node's box
CHAR = 7.2  # px per character of a label (12 px monospace)
PAD = 16
SIDE = 40  # px each side for edges drawn around the rows


def _rows(view: GraphView) -> list[list[str]]:
    """Node ids by row: breadth-first from START; nodes never reached go last but one,
    END last."""
    out: dict[str, list[str]] = {}
    for e in view.edges:
        out.setdefault(e.source, []).append(e.target)
    depth = {START: 0}
    frontier = [START]
    while frontier:
        following: list[str] = []
        for node in frontier:
            for target in out.get(node, []):
                if target not in depth and target != END:
                    depth[target] = depth[node] + 1
                    following.append(target)
        frontier = following
    deepest = max(depth.values())
    for node in view.nodes:
        if node not in depth and node != END:
            deepest += 1
            depth[node] = deepest
    if END in view.nodes:
        depth[END] = deepest + 1
    rows: list[list[str]] = [[] for _ in range(max(depth.values()) + 1)]
    for node in view.nodes:  # the graph's own order within a row
        rows[depth[node]].append(node)
    return [r for r in rows if r]


def _width(label: str) -> float:
    return len(label) * CHAR + 2 * PAD


def svg(view: GraphView, current: Iterable[str] = ()) -> str:
    """The graph as an ``<svg>`` element (a string of markup, every name escaped)."""
    marked = set(current)
    rows = _rows(view)
    widths = [sum(_width(n) for n in row) + GAP * (len(row) - 1) for row in rows]
    total = max(widths) + 2 * PAD + 2 * SIDE  # room on each side for long edges
    place: dict[str, tuple[float, float, float]] = {}  # node -> (x, y, width)
    for r, row in enumerate(rows):
        x = (total - widths[r]) / 2
        for node in row:
            w = _width(node)
            place[node] = (x, PAD + r * ROW, w)
            x += w + GAP
    height = PAD * 2 + (len(rows) - 1) * ROW + HEIGHT
    parts = [
        f'<svg class="graph" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {total:.0f} '
        f'{height:.0f}" width="{total:.0f}" role="img" aria-label="graph of the run">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
        'class="arrow-head"/></marker></defs>',
    ]
    for e in view.edges:
        if e.source not in place or e.target not in place:
            continue
        sx, sy, sw = place[e.source]
        tx, ty, tw = place[e.target]
        kind = "edge conditional" if e.conditional else "edge"
        if sy < ty <= sy + ROW:
            d = f"M{sx + sw / 2:.1f},{sy + HEIGHT:.1f} L{tx + tw / 2:.1f},{ty:.1f}"
        elif ty > sy:  # over rows between: around the left side
            left = SIDE / 2
            d = (
                f"M{sx:.1f},{sy + HEIGHT / 2:.1f} C{left:.1f},{sy + HEIGHT / 2:.1f} "
                f"{left:.1f},{ty + HEIGHT / 2:.1f} {tx:.1f},{ty + HEIGHT / 2:.1f}"
            )
        else:  # a loop back (or a self-loop): around the right side
            right = total - SIDE / 2
            d = (
                f"M{sx + sw:.1f},{sy + HEIGHT / 2:.1f} C{right:.1f},{sy + HEIGHT / 2:.1f} "
                f"{right:.1f},{ty + HEIGHT / 2:.1f} {tx + tw:.1f},{ty + HEIGHT / 2:.1f}"
            )
        label = f"<title>{escape(e.data)}</title>" if e.data else ""
        parts.append(
            f'<path d="{d}" class="{kind}" marker-end="url(#arrow)" '
            f'data-edge="{escape(e.source)}&gt;{escape(e.target)}">{label}</path>'
        )
    for node, (x, y, w) in place.items():
        ends = node in (START, END)
        classes = ["node", "terminal" if ends else "step"]
        if node in marked:
            classes.append("current")
        name = escape(view.nodes[node].name)
        flag = ' data-current="true"' if node in marked else ""
        parts.append(
            f'<g class="{" ".join(classes)}" data-node="{escape(node)}"{flag}>'
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{HEIGHT}" '
            f'rx="{HEIGHT / 2 if ends else 6}"/>'
            f'<text x="{x + w / 2:.1f}" y="{y + HEIGHT / 2 + 4:.1f}" '
            f'text-anchor="middle">{name}</text></g>'
        )
    parts.append("</svg>")
    return "".join(parts)


__all__ = ["svg"]
