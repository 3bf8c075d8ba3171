"""Routing, pure: where a step goes after its tasks ran.

:func:`route` reads the finished tasks' edges, their routers (a sync router is called
here; an async one was awaited before, see :mod:`oncegraph.runtime.routers`, and
arrives in ``routed``), their ``Command(goto=...)`` and ``Send`` items, a Pregel app's
subscriptions and the waiting edges, and names the next step's tasks
(:class:`Routes`). The engine (:mod:`oncegraph.runtime.engine`) builds the next
checkpoint from them.
"""

from __future__ import annotations

import contextlib
import inspect
import typing
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from oncegraph._slots import slot_init
from oncegraph.errors import ConfigError, GraphValidationError
from oncegraph.graph.constants import END
from oncegraph.graph.spec import GraphSpec
from oncegraph.hitl.send import Send


class Finished(Protocol):
    """What routing reads of a finished task (an engine ``TaskResult``): its node, its
    updates and where it said to go."""

    @property
    def node(self) -> str: ...

    @property
    def update(self) -> Mapping[str, Any]: ...

    @property
    def goto(self) -> tuple[str | Send, ...]: ...

    @property
    def more(self) -> tuple[Mapping[str, Any], ...]: ...

    @property
    def extra(self) -> Mapping[str, Any] | None: ...


def router_state(
    spec: GraphSpec, branch: Any, values: Mapping[str, Any], extra: Mapping[str, Any] | None
) -> Any:
    """What ``branch``'s router reads: the state as its schema gives it, and, as LangGraph
    passes them, the keys the node returned that the state has no field for (a router
    with no schema of its own, on a dict state; the state's values win)."""
    state = branch.state_for(spec.schema, values)
    if extra and isinstance(state, dict) and _takes_extra(branch.router):
        return {**extra, **state}
    return state


_TAKES_EXTRA: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()


def _takes_extra(router: Any) -> bool:
    """Whether LangGraph would pass a node's extra keys to ``router``: its first parameter
    is not annotated with a class that declares fields (a state schema of its own)."""
    try:
        return _TAKES_EXTRA[router]
    except (KeyError, TypeError):
        pass
    takes = True
    try:
        params = list(inspect.signature(router).parameters.values())
        hints = typing.get_type_hints(router) if params else {}
        hint = hints.get(params[0].name) if params else None
        if isinstance(hint, type) and typing.get_type_hints(hint):
            takes = False
    except Exception:  # an annotation that does not resolve: no schema to go by
        takes = True
    with contextlib.suppress(TypeError):  # not weakly referable: worked out each time
        _TAKES_EXTRA[router] = takes
    return takes


def _targets(
    spec: GraphSpec,
    node: str,
    values: Mapping[str, Any],
    config: Mapping[str, Any] | None,
    routed: Mapping[tuple[str, int], Any] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> list[str | Send]:
    out: list[str | Send] = list(spec.edges.get(node, ()))
    for index, branch in enumerate(spec.branches.get(node, ())):
        if routed is not None and (node, index) in routed:  # an async router, awaited
            picked = routed[(node, index)]
            if isinstance(picked, RouterFailed):
                raise picked.error
        elif branch.takes_config:
            picked = branch.router(router_state(spec, branch, values, extra), dict(config or {}))
        else:
            picked = branch.router(router_state(spec, branch, values, extra))
        if type(picked) is not str and inspect.isawaitable(picked):
            close = getattr(picked, "close", None)
            if close:
                close()
            raise ConfigError(f"the router of {node!r} must be a plain function, not async")
        items = picked if isinstance(picked, (list, tuple)) else [picked]
        for item in items:
            if isinstance(item, Send):
                out.append(item)
                continue
            key = str(item)
            if branch.path_map is not None:
                if key not in branch.path_map:
                    raise GraphValidationError(
                        f"router of {node!r} returned {item!r}, which is not in its path_map "
                        f"{sorted(branch.path_map)}"
                    )
                key = branch.path_map[key]
            elif key not in spec.nodes and key != END:
                raise GraphValidationError(
                    f"router of {node!r} returned {item!r}, which is not a node of the graph"
                )
            out.append(key)
    return out


@dataclass(frozen=True, slots=True)
class RouterFailed:
    """An async router that raised (awaited before the step's pure decision)."""

    error: Exception


@slot_init
@dataclass(frozen=True, slots=True)
class Routes:
    """Where a step goes: the nodes its edges pull (declaration order), the sends (in
    order), what each waiting edge has seen since it last fired, and the deferred nodes
    (``add_node(defer=True)``) pulled so far that wait for the run to have nothing else
    to do."""

    pulled: tuple[str, ...]
    sends: tuple[Send, ...] = ()
    joins: Mapping[str, list[str]] = field(default_factory=dict)
    deferred: tuple[str, ...] = ()


def route(
    spec: GraphSpec,
    values: Mapping[str, Any],
    finished: Sequence[Finished],
    *,
    joins: Mapping[str, Sequence[str]] | None = None,
    config: Mapping[str, Any] | None = None,
    routed: Mapping[tuple[str, int], Any] | None = None,
    deferred: Sequence[str] | None = None,
) -> Routes:
    """The next step's tasks after ``finished`` ran and ``values`` is the new state.
    ``routed``: what the async routers picked, by ``(node, branch index)``;
    ``deferred``: the deferred nodes pulled before, still waiting.

    A deferred node (``add_node(defer=True)``) pulled by a step waits (kept in
    :attr:`Routes.deferred`) until a step pulls nothing else and sends nothing: then
    the waiting deferred nodes are the next step, as LangGraph runs them when the run
    is about to end."""
    found: set[str] = set()
    sends: list[Send] = []
    for task in finished:
        targets = _targets(spec, task.node, values, config, routed, task.extra)
        for target in (*targets, *task.goto):
            if isinstance(target, Send):
                if target.node not in spec.nodes:
                    raise GraphValidationError(
                        f"node {task.node!r} sent Send({target.node!r}, ...); no such node"
                    )
                sends.append(target)
                continue
            if target != END and target not in spec.nodes:
                raise GraphValidationError(
                    f"node {task.node!r} returned Command(goto={target!r}); no such node"
                )
            found.add(target)
    if spec.triggers is not None:  # a Pregel app: the nodes subscribed to what was written
        triggers = spec.triggers
        for task in finished:
            for update in (task.update, *task.more):
                for chan in update:
                    found.update(triggers.get(chan, ()))
    seen: dict[str, list[str]] = {}
    if spec.joins:
        ran = {t.node for t in finished}
        before = joins or {}
        for join in spec.joins:
            got = set(before.get(join.key, ())) | (ran & set(join.sources))
            if got >= set(join.sources):
                found.add(join.target)
            elif got:
                seen[join.key] = [s for s in join.sources if s in got]
    found.discard(END)
    waiting: tuple[str, ...] = ()
    if spec.deferred or deferred:
        held = set(deferred or ()) | (found & spec.deferred)
        found -= held
        if found or sends:
            waiting = tuple(n for n in spec.nodes if n in held)
        else:  # nothing else to run: the deferred nodes run now
            found = held
    if len(found) < 2:  # nothing to order (spec.order builds its dict on every read)
        return Routes(tuple(found), tuple(sends), seen, waiting)
    order = spec.order
    return Routes(tuple(sorted(found, key=order.__getitem__)), tuple(sends), seen, waiting)


def next_nodes(
    spec: GraphSpec, values: Mapping[str, Any], finished: Sequence[Finished]
) -> tuple[str, ...]:
    """Nodes (pulled by edges) to run after ``finished``, in declaration order, END
    dropped; sends and waiting edges are in :func:`route`."""
    return route(spec, values, finished).pulled


__all__ = ["Finished", "RouterFailed", "Routes", "next_nodes", "route", "router_state"]
