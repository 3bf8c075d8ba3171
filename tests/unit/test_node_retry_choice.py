"""A node's retry policies as LangGraph's: a sequence chosen by the error, jitter of up
to one second, and a sync run's waits made with ``time.sleep`` (off the event loop)."""

from __future__ import annotations

import time
from typing import Any, TypedDict
from unittest.mock import patch

import pytest

from oncegraph import START, StateGraph
from oncegraph.graph.retry import node_retry
from oncegraph.types import RetryPolicy


class S(TypedDict, total=False):
    kind: str
    out: str


def _flaky(fails: dict[str, int]) -> Any:
    seen: dict[str, int] = {}

    def node(state: S) -> dict[str, Any]:
        kind = state["kind"]
        seen[kind] = seen.get(kind, 0) + 1
        if seen[kind] <= fails[kind]:
            raise (ValueError if kind == "value" else KeyError)(kind)
        return {"out": f"{kind} after {seen[kind]}"}

    return node


def test_a_sequence_of_policies_is_chosen_by_the_error() -> None:
    value = RetryPolicy(max_attempts=2, initial_interval=0, jitter=False, retry_on=ValueError)
    key = RetryPolicy(max_attempts=3, initial_interval=0, jitter=False, retry_on=KeyError)
    g = StateGraph(S)
    g.add_node("n", _flaky({"value": 1, "key": 2}), retry_policy=(value, key))
    g.add_edge(START, "n")
    app = g.compile()
    assert app.invoke({"kind": "value"})["out"] == "value after 2"
    assert app.invoke({"kind": "key"})["out"] == "key after 3"

    g2 = StateGraph(S)  # KeyError's policy allows 3 tries: the third failure is final
    g2.add_node("n", _flaky({"value": 0, "key": 3}), retry_policy=[value, key])
    g2.add_edge(START, "n")
    with pytest.raises(KeyError):
        g2.compile().invoke({"kind": "key"})


def test_langgraph_jitter_adds_up_to_a_second() -> None:
    retry = node_retry("n", RetryPolicy(initial_interval=0.5, jitter=True))
    assert retry is not None
    with patch("random.uniform", return_value=0.25) as uniform:
        assert retry.delay(1) == 0.75
    uniform.assert_called_with(0, 1.0)


async def test_sync_runs_wait_with_time_sleep_and_async_runs_do_not() -> None:
    policy = RetryPolicy(max_attempts=3, initial_interval=0.01, jitter=False, retry_on=ValueError)

    def app() -> Any:
        g = StateGraph(S)
        g.add_node("n", _flaky({"value": 2, "key": 0}), retry_policy=policy)
        g.add_edge(START, "n")
        return g.compile()

    real = time.sleep
    with patch("time.sleep", side_effect=real) as sleep:
        assert app().invoke({"kind": "value"})["out"] == "value after 3"
        assert [c.args[0] for c in sleep.call_args_list] == [0.01, 0.02]
        sleep.reset_mock()
        assert (await app().ainvoke({"kind": "value"}))["out"] == "value after 3"
        assert sleep.call_args_list == []
