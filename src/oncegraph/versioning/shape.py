"""A graph's shape as data: what a run remembers of the graph that started it. Pure.

The shape is JSON (stored with each run): its nodes in declaration order, static edges,
conditional edges with their path maps, and the state's fields with their declared type
and whether they are optional. :func:`changes` compares two shapes and says, in words,
what a deploy changed that a run standing on the old shape would notice.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from oncegraph.graph.spec import GraphSpec

Shape = dict[str, Any]


def shape_of(spec: GraphSpec) -> Shape:
    schema = spec.schema
    optional = _optional_fields(schema.source, schema.kind)
    hints = _hints(schema.source)
    return {
        "nodes": list(spec.nodes),
        "edges": {src: sorted(dst) for src, dst in sorted(spec.edges.items())},
        "branches": {
            src: [sorted((b.path_map or {}).items()) for b in branches]
            for src, branches in sorted(spec.branches.items())
        },
        "state": {
            name: {
                "type": _type_name(hints.get(name)),
                "optional": name in optional or channel.default is not None,
            }
            for name, channel in sorted(schema.channels.items())
        },
    }


def changes(old: Mapping[str, Any], new: Mapping[str, Any], stands_on: Sequence[str]) -> list[str]:
    """What breaks a run of ``old`` standing on nodes ``stands_on`` if it goes on under
    ``new``; empty when the change is compatible (additions it does not stand on)."""
    found: list[str] = []
    old_nodes, new_nodes = set(old.get("nodes", ())), set(new.get("nodes", ()))
    for node in sorted(old_nodes - new_nodes):
        found.append(f"node {node!r} was removed")
    for node in stands_on:
        if node not in new_nodes:
            found.append(f"the run is about to run node {node!r}, which no longer exists")
    old_edges, new_edges = old.get("edges", {}), new.get("edges", {})
    for src, targets in old_edges.items():
        missing = sorted(set(targets) - set(new_edges.get(src, ())))
        if missing:
            found.append(f"edge(s) {src!r} -> {missing} were removed")
    for src in stands_on:
        added = sorted(set(new_edges.get(src, ())) - set(old_edges.get(src, ())))
        if added:
            found.append(f"node {src!r}, which the run is about to run, gained edges to {added}")
    old_branches, new_branches = old.get("branches", {}), new.get("branches", {})
    for src, maps in old_branches.items():
        if _canon(new_branches.get(src)) != _canon(maps):
            found.append(f"the conditional edges of {src!r} changed")
    for src in stands_on:
        if src not in old_branches and src in new_branches:
            found.append(f"node {src!r}, which the run is about to run, gained a router")
    old_state, new_state = old.get("state", {}), new.get("state", {})
    for name, field in old_state.items():
        now = new_state.get(name)
        if now is None:
            found.append(f"state field {name!r} was removed")
        elif now.get("type") != field.get("type"):
            found.append(
                f"state field {name!r} changed type ({field.get('type')} -> {now.get('type')})"
            )
    for name in sorted(set(new_state) - set(old_state)):
        if not new_state[name].get("optional"):
            found.append(f"state field {name!r} was added as required (give it a default)")
    return found


def _canon(value: Any) -> Any:
    """One spelling of a branch list, whether it was just built (tuples) or read back from
    a run's stored shape (JSON lists), so a deploy is not refused for a change of spelling."""
    if value is None:
        return None
    return json.dumps(value, sort_keys=True, default=str)


def _hints(source: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(source, include_extras=False)
    except Exception:  # a dict schema, or hints that cannot be resolved: names only
        return {}


def _optional_fields(source: Any, kind: str) -> set[str]:
    if kind == "typeddict":
        optional = set(getattr(source, "__optional_keys__", ()))
        # Under ``from __future__ import annotations`` Python 3.11 counts a ``NotRequired``
        # field as required (its annotation is a string then); the resolved hints still say.
        try:
            hints = typing.get_type_hints(source, include_extras=True)
        except Exception:  # hints that cannot be resolved: the class's own word only
            return optional
        for name, hint in hints.items():
            origin = typing.get_origin(hint)
            if origin is typing.NotRequired:
                optional.add(name)
            elif origin is typing.Required:
                optional.discard(name)
        return optional
    if kind == "pydantic":
        fields = getattr(source, "model_fields", {})
        return {n for n, f in fields.items() if not f.is_required()}
    return set()  # dataclasses: their defaults make channel defaults


def _type_name(hint: Any) -> str:
    if hint is None:
        return "any"
    if typing.get_origin(hint) is None and isinstance(hint, type):
        return f"{hint.__module__}.{hint.__qualname__}"
    return repr(hint)


__all__ = ["Shape", "changes", "shape_of"]
