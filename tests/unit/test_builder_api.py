"""LangGraph's builder API: ``set_conditional_entry_point``, ``set_node_defaults``,
``add_node(error_handler=...)``; callable objects and LangChain Runnables as nodes."""

from __future__ import annotations

import operator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

from oncegraph import END, START, Command, StateGraph
from oncegraph.errors import GraphValidationError, NodeError
from oncegraph.storage.checkpointer import SqliteCheckpointer
from oncegraph.types import RetryPolicy


class S(TypedDict):
    route: str
    foo: Annotated[list[str], operator.add]


def _fail(state: S) -> dict[str, Any]:
    raise RuntimeError(f"{state['route']} failed")


def test_a_conditional_entry_point_routes_the_first_step() -> None:
    g = StateGraph(S)
    g.add_node("a", lambda s: {"foo": ["a"]})
    g.add_node("b", lambda s: {"foo": ["b"]})
    g.set_conditional_entry_point(lambda s: s["route"], {"to_a": "a", "to_b": "b"})
    app = g.compile()
    assert app.invoke({"route": "to_b", "foo": []})["foo"] == ["b"]
    assert app.invoke({"route": "to_a", "foo": []})["foo"] == ["a"]


def test_an_error_handler_runs_after_the_retries_and_routes() -> None:
    attempts: list[int] = []
    seen: list[NodeError] = []

    def flaky(state: S) -> dict[str, Any]:
        attempts.append(1)
        raise ValueError("always")

    def handler(state: S, error: NodeError) -> Command:
        seen.append(error)
        return Command(update={"foo": ["handled"]}, goto="after")

    g = StateGraph(S)
    retry = RetryPolicy(max_attempts=3, initial_interval=0.0, jitter=False, retry_on=ValueError)
    g.add_node("flaky", flaky, retry_policy=retry, error_handler=handler)
    g.add_node("after", lambda s: {"foo": ["after"]})
    g.add_node("edge_target", lambda s: {"foo": ["not reached"]})
    g.add_edge(START, "flaky")
    g.add_edge("flaky", "edge_target")  # the failed node's edges do not fire
    out = g.compile().invoke({"route": "", "foo": []})
    assert out["foo"] == ["handled", "after"]
    assert len(attempts) == 3
    assert seen[0].node == "flaky" and isinstance(seen[0].error, ValueError)


def test_a_handler_that_fails_fails_the_run() -> None:
    def handler(state: S) -> dict[str, Any]:
        raise KeyError("handler broke")

    g = StateGraph(S)
    g.add_node("bad", _fail, error_handler=handler)
    g.add_edge(START, "bad")
    with pytest.raises(KeyError, match="handler broke"):
        g.compile().invoke({"route": "bad", "foo": []})


def test_node_defaults_give_every_node_a_handler_unless_it_has_its_own() -> None:
    g = StateGraph(S).set_node_defaults(
        error_handler=lambda s, error: {"foo": [f"default:{error.node}"]}
    )
    g.add_node("fail_a", _fail)
    g.add_node("fail_b", _fail, error_handler=lambda s: {"foo": ["own"]})
    g.set_conditional_entry_point(lambda s: s["route"], ["fail_a", "fail_b"])
    app = g.compile()
    assert app.invoke({"route": "fail_a", "foo": []})["foo"] == ["default:fail_a"]
    assert app.invoke({"route": "fail_b", "foo": []})["foo"] == ["own"]


def test_node_defaults_retry_and_timeout_fill_what_a_node_leaves_out() -> None:
    calls: dict[str, int] = {"a": 0, "b": 0}

    def counted(name: str) -> Any:
        def node(state: S) -> dict[str, Any]:
            calls[name] += 1
            raise ValueError(name)

        node.__name__ = name
        return node

    g = StateGraph(S).set_node_defaults(
        retry_policy=RetryPolicy(max_attempts=2, initial_interval=0.0, retry_on=ValueError),
        timeout=30.0,
    )
    g.add_node(counted("a"))
    one = RetryPolicy(max_attempts=1)
    g.add_node(counted("b"), retry_policy=one, timeout=5.0)
    g.set_conditional_entry_point(lambda s: s["route"], ["a", "b"])
    spec = g.validate()
    assert spec.nodes["a"].timeout == 30.0 and spec.nodes["b"].timeout == 5.0
    app = g.compile()
    for name in ("a", "b"):
        with pytest.raises(ValueError):
            app.invoke({"route": name, "foo": []})
    assert calls == {"a": 2, "b": 1}


def test_a_user_node_with_the_default_handlers_name_is_refused() -> None:
    g = StateGraph(S).set_node_defaults(error_handler=lambda s: None)
    g.add_node("__default_error_handler__", lambda s: None)
    g.add_edge(START, "__default_error_handler__")
    with pytest.raises(GraphValidationError, match="already a node"):
        g.compile()


def test_a_handled_step_resumes_after_an_interrupt_from_a_real_database(tmp_path: Path) -> None:
    from oncegraph.types import interrupt

    def handler(state: S, error: NodeError) -> dict[str, Any]:
        return {"foo": [f"{error.node}:{interrupt('retry by hand?')}"]}

    g = StateGraph(S)
    g.add_node("bad", _fail, error_handler=handler)
    g.add_edge(START, "bad")
    g.add_edge("bad", END)
    app = g.compile(checkpointer=SqliteCheckpointer(str(tmp_path / "runs.db")))
    cfg = {"configurable": {"thread_id": "t"}}
    first = app.invoke({"route": "bad", "foo": []}, cfg)
    assert [i.value for i in first["__interrupt__"]] == ["retry by hand?"]
    assert app.invoke(Command(resume="no"), cfg)["foo"] == ["bad:no"]


def test_a_callable_object_is_named_by_its_class() -> None:
    class Doubler:
        def __call__(self, state: S) -> dict[str, Any]:
            return {"foo": state["foo"]}

    g = StateGraph(S)
    g.add_node(Doubler())
    g.add_edge(START, "Doubler")
    assert g.compile().invoke({"route": "", "foo": ["x"]})["foo"] == ["x", "x"]


def test_a_langchain_runnable_is_a_node() -> None:
    runnables = pytest.importorskip("langchain_core.runnables")
    seen: list[dict[str, Any]] = []

    def step(state: S, config: dict[str, Any]) -> dict[str, Any]:
        seen.append(config)
        return {"foo": ["lambda"]}

    g = StateGraph(S)
    g.add_node("chain", runnables.RunnableLambda(step))
    g.add_node("parallel", {"foo": runnables.RunnableLambda(lambda s: [len(s["foo"])])})
    g.add_edge(START, "chain")
    g.add_edge("chain", "parallel")
    out = g.compile().invoke({"route": "", "foo": []}, {"configurable": {"user": "ada"}})
    assert out["foo"] == ["lambda", 1]
    assert seen[0]["configurable"]["user"] == "ada"
