"""Routers' inputs, and async routers: a conditional edge whose function is a coroutine
function.

The engine decides a step purely, and a pure function cannot await; so before the
decision the driver awaits each async router of the step's finished tasks on the state
those tasks' writes make, and hands what they picked to the engine (``routed``, by
``(node, branch index)``). A router that raises is handed on as
:class:`~oncegraph.runtime.engine.RouterFailed`: the decision fails the step as it does
for a sync router. Graphs without async routers do none of this.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from oncegraph.graph.constants import START
from oncegraph.graph.spec import GraphSpec
from oncegraph.runtime.engine import (
    Head,
    RouterFailed,
    StepPlan,
    TaskOutcome,
    TaskResult,
    tasks_of,
    with_finished,
)
from oncegraph.runtime.routes import router_state

if TYPE_CHECKING:
    from oncegraph.runtime.config import RunConfig
    from oncegraph.storage.records import RunRecord


def router_config(config: RunConfig, thread: str, run_id: str) -> dict[str, Any]:
    """What a router that takes ``(state, config)`` receives."""
    configurable = dict(config.configurable)
    return {
        "thread_id": thread,
        "run_id": run_id,
        **configurable,
        "configurable": {**configurable, "thread_id": thread, "run_id": run_id},
        "recursion_limit": config.recursion_limit,
    }


class _Driver(Protocol):
    spec: GraphSpec
    _async_routers: bool

    def _router_config(self, run: RunRecord) -> dict[str, Any] | None: ...


async def routed_input(
    driver: _Driver, head: Head, update: Mapping[str, Any], run: RunRecord
) -> dict[tuple[str, int], Any] | None:
    """What the async routers from START pick for a run's input (None: there are none)."""
    if not driver._async_routers:
        return None
    results = [TaskResult(START, update)]
    values = with_finished(driver.spec, head.values, results)
    return await routed(driver.spec, values, results, driver._router_config(run))


async def routed_step(
    driver: _Driver,
    head: Head,
    plan: StepPlan,
    outcomes: Sequence[TaskOutcome],
    config: Mapping[str, Any] | None,
) -> dict[tuple[str, int], Any] | None:
    """What the async routers of a step that finished pick (None: the graph has none,
    the step does not commit, or routes nowhere through an async router)."""
    if not driver._async_routers:
        return None
    spec = driver.spec
    if any(o.result is None for o in outcomes):
        return None  # a failure, interrupt or crash: the step does not route
    done = dict(plan.done)
    for o in outcomes:
        assert o.result is not None
        done[o.key] = o.result
    tasks = plan.tasks or tasks_of(spec, head.checkpoint)
    results = [done[t.key] for t in tasks if t.key in done]
    return await routed(spec, with_finished(spec, head.values, results), results, config)


async def routed(
    spec: GraphSpec,
    values: Mapping[str, Any],
    results: Sequence[TaskResult],
    config: Mapping[str, Any] | None,
) -> dict[tuple[str, int], Any] | None:
    """Await the async routers of ``results``' nodes on ``values``."""
    out: dict[tuple[str, int], Any] = {}
    extras: dict[str, dict[str, Any]] = {}
    for r in results:
        if r.extra:
            extras.setdefault(r.node, {}).update(r.extra)
    for node in dict.fromkeys(r.node for r in results):
        for index, branch in enumerate(spec.branches.get(node, ())):
            if not branch.is_async:
                continue
            state = router_state(spec, branch, values, extras.get(node))
            try:
                if branch.takes_config:
                    out[(node, index)] = await branch.router(state, dict(config or {}))
                else:
                    out[(node, index)] = await branch.router(state)
            except Exception as exc:  # the decision fails the step with it
                out[(node, index)] = RouterFailed(exc)
    return out or None


__all__ = ["routed", "routed_input", "routed_step", "router_config"]
