"""A node's return value as a :class:`~oncegraph.runtime.engine.TaskResult`.

A node returns a dict of updates, a state object, a ``Command``, ``None``, or (as in
LangGraph) a list holding ``Command`` objects and dicts: each item is one update of the
task, applied in order (a reducer sees each), and their ``goto`` targets are joined.
A task's several updates are kept as its result's ``update`` (the first) and ``more``.
A ``Command(update=[(field, value), ...])`` writes each pair in order: one update when
no field repeats, else one update a pair (so a reducer sees every value).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from oncegraph.graph.spec import GraphSpec
from oncegraph.hitl.command import Command
from oncegraph.hitl.send import Send
from oncegraph.runtime.engine import TaskResult
from oncegraph.state.channels import ROOT


def result_of(spec: GraphSpec, node: str, value: Any, key: str) -> TaskResult:
    """What task ``key`` of ``node`` wrote, from the value its node returned."""
    if isinstance(value, Command):
        pairs = _pairs(value.update)
        if pairs is not None:
            pairs = [u for p in pairs if (u := spec.schema.known(node, p))]
            first, *rest = pairs or [{}]
            return TaskResult(node, first, value.goto_nodes(), key, tuple(rest))
        return TaskResult(node, spec.schema.to_update(node, value.update), value.goto_nodes(), key)
    if _is_list_of_updates(spec, value):
        updates: list[Mapping[str, Any]] = []
        goto: list[str | Send] = []
        for item in value:
            if isinstance(item, Command):
                updates.append(spec.schema.to_update(node, item.update))
                goto.extend(item.goto_nodes())
            else:
                updates.append(spec.schema.to_update(node, item))
        updates = [u for u in updates if u] or [{}]
        return TaskResult(node, updates[0], tuple(goto), key, tuple(updates[1:]))
    update = spec.schema.to_update(node, value)
    if type(value) is dict and len(update) < len(value):  # keys the state has no field for
        extra = {k: v for k, v in value.items() if k not in update}
        return TaskResult(node, update, (), key, extra=extra)
    return TaskResult(node, update, (), key)


def _pairs(update: Any) -> list[Mapping[str, Any]] | None:
    """A ``Command``'s update given as ``(field, value)`` pairs, as updates applied in
    order: one when no field repeats, else one a pair; None when it is not such a list."""
    if not isinstance(update, (list, tuple)) or not all(
        isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str) for p in update
    ):
        return None
    if len({k for k, _ in update}) == len(update):
        return [dict(update)] if update else []
    return [{k: v} for k, v in update]


def written(result: TaskResult) -> dict[str, Any]:
    """What a task wrote, as LangGraph's task views show it: each field's value, or
    ``{"$writes": [...]}`` for a field the task wrote more than once."""
    if not result.more:
        return dict(result.update)
    values: dict[str, list[Any]] = {}
    for update in (result.update, *result.more):
        for k, v in update.items():
            values.setdefault(k, []).append(v)
    return {k: vs[0] if len(vs) == 1 else {"$writes": vs} for k, vs in values.items()}


def _is_list_of_updates(spec: GraphSpec, value: Any) -> bool:
    """A list (or tuple) holding a ``Command``: LangGraph's several updates of one task.
    (In a root-value state a list without one is the state's value.)"""
    return (
        isinstance(value, (list, tuple))
        and bool(value)
        and any(isinstance(v, Command) for v in value)
    )


def shown(result: TaskResult, root: bool = False) -> Any:
    """A result as the ``updates`` stream shows it: the update (a list of them when the
    node returned several; None when it wrote nothing; a root-value state's value)."""
    first = result.as_returned  # as the node returned it (its messages' ids not filled in)
    if result.more:
        return [u.get(ROOT) if root else dict(u) for u in (first, *result.more)]
    if not first:
        return None  # the node wrote nothing (returned None or {}), as LangGraph shows it
    return first.get(ROOT) if root else dict(first)


__all__ = ["result_of", "shown", "written"]
