"""Crash tests that cannot pass vacuously: a fault plan names a point that exists."""

from __future__ import annotations

from typing import TypedDict

import pytest

from oncegraph import END, START, FaultPlan, StateGraph, crash_point, declare_crash_point
from oncegraph.errors import ConfigError, _CrashSignal
from oncegraph.runtime.faults import CRASH_POINTS, known_points


class S(TypedDict, total=False):
    x: int


def test_every_built_in_point_is_accepted() -> None:
    for point in CRASH_POINTS:
        assert FaultPlan(point).point == point


def test_an_unknown_point_is_refused_with_the_fix() -> None:
    with pytest.raises(ConfigError, match=r"unknown crash point 'afer_intent'.*would never fire"):
        FaultPlan("afer_intent")
    with pytest.raises(ConfigError, match=r"declare_crash_point\('in_my_tool'\)"):
        FaultPlan("in_my_tool")


def test_a_declared_point_fires_in_a_node() -> None:
    name = declare_crash_point("unit_test_point")
    assert name in known_points()

    def node(state: S) -> S:
        crash_point(name)
        return {"x": 1}

    g = StateGraph(S)
    g.add_node("n", node)
    g.add_edge(START, "n")
    g.add_edge("n", END)
    app = g.compile()
    with pytest.raises(_CrashSignal) as caught:
        app.invoke({}, {"fault_plan": FaultPlan(name)})
    assert caught.value.point == name


@pytest.mark.parametrize("bad", ["", "with space", "a:b", 3])
def test_bad_declarations(bad: object) -> None:
    with pytest.raises(ConfigError):
        declare_crash_point(bad)  # type: ignore[arg-type]


def test_an_unknown_point_in_the_environment_fails_the_run_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ONCEGRAPH_CRASH_AT", "no_such_point:2")
    g = StateGraph(S)
    g.add_node("n", lambda s: {"x": 1})
    g.add_edge(START, "n")
    g.add_edge("n", END)
    with pytest.raises(ConfigError, match="unknown crash point 'no_such_point'"):
        g.compile().invoke({}, None)


def test_a_fault_plan_in_configurable_is_not_a_control_key() -> None:
    g = StateGraph(S)
    g.add_node("n", lambda s: {"x": 1})
    g.add_edge(START, "n")
    g.add_edge("n", END)
    plan = FaultPlan("before_checkpoint")
    out = g.compile().invoke({}, {"configurable": {"fault_plan": plan, "tool_timeout": 0}})
    assert out == {"x": 1} and plan.hits == {}
