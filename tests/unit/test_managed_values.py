"""Managed state fields (``oncegraph.managed``): the run fills ``RemainingSteps`` and
``IsLastStep`` in for each step; they are not channels, so they are never stored nor
returned, and a node can end a loop before the recursion limit fails the run."""

from __future__ import annotations

import dataclasses
from typing import NotRequired, TypedDict

from oncegraph import END, START, StateGraph
from oncegraph.managed import IsLastStep, RemainingSteps
from oncegraph.storage.checkpointer import InMemoryCheckpointer


class Loop(TypedDict):
    n: int
    remaining_steps: NotRequired[RemainingSteps]
    is_last_step: IsLastStep


def _loop(seen: list[tuple[int, bool]]) -> StateGraph:
    def work(state: Loop) -> dict[str, int]:
        seen.append((state["remaining_steps"], state["is_last_step"]))
        return {"n": -1 if state["remaining_steps"] <= 2 else state["n"] + 1}

    def again(state: Loop) -> str:
        return END if state["n"] < 0 else "work"

    g = StateGraph(Loop)
    g.add_node("work", work)
    g.add_edge(START, "work")
    g.add_conditional_edges("work", again)
    return g


def test_managed_fields_are_known_and_are_not_channels() -> None:
    g = _loop([])
    assert set(g.managed) == {"remaining_steps", "is_last_step"}
    assert set(g.schema.channels) == {"n"}


def test_a_node_sees_the_steps_left_and_stops_before_the_limit() -> None:
    seen: list[tuple[int, bool]] = []
    app = _loop(seen).compile(checkpointer=InMemoryCheckpointer())
    config = {"configurable": {"thread_id": "t"}, "recursion_limit": 6}
    # the input step counts, as in LangGraph: the first node's step leaves 5
    assert app.invoke({"n": 0}, config) == {"n": -1}
    assert seen == [(5, False), (4, False), (3, False), (2, False)]
    assert app.get_state(config).values == {"n": -1}  # never stored


def test_the_last_step_is_marked() -> None:
    seen: list[tuple[int, bool]] = []

    @dataclasses.dataclass
    class State:
        n: int
        is_last_step: IsLastStep = False

    def work(state: State) -> dict[str, int]:
        seen.append((state.n, state.is_last_step))
        return {"n": -1 if state.is_last_step else state.n + 1}

    g = StateGraph(State)
    g.add_node("work", work)
    g.add_edge(START, "work")
    g.add_conditional_edges("work", lambda s: END if s.n < 0 else "work")
    assert g.compile().invoke({"n": 0}, {"recursion_limit": 3}) == {"n": -1}
    assert seen == [(0, False), (1, True)]
