"""Interrupts are control flow (guarantee 11), on all four run paths and both stores.

``interrupt(value)`` pauses the run (status ``interrupted``, ``__interrupt__`` in the
output); ``Command(resume=x)`` restarts the interrupted node from the top, where the
same ``interrupt()`` call now returns ``x``. A node that swallows the signal is an
error, never a silent "declined".
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

import pytest

from oncegraph import (
    END,
    START,
    Command,
    Interrupt,
    StateGraph,
    UnfinishedRunError,
    effect,
    interrupt,
)
from oncegraph.app import CompiledGraph
from oncegraph.errors import (
    AmbiguousAnswerError,
    ConfigError,
    GraphInterrupt,
    InterruptSwallowedError,
    NodeError,
    NoRunToResumeError,
    OnceGraphError,
)
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import RunStatus

RunPath = Callable[..., dict[str, Any]]  # the conftest's run_path fixture


class S(TypedDict, total=False):
    log: Annotated[list[str], operator.add]
    answer: Any


def _asked(out: dict[str, Any]) -> list[tuple[Any, str, int]]:
    """The open questions of a run's output: ``(value, node, index)`` of each Interrupt."""
    found = []
    for i in out["__interrupt__"]:
        assert isinstance(i, Interrupt) and len(i.id) == 32
        found.append((i.value, i.node, i.index))
    return found


def _status(app: CompiledGraph, thread_id: str) -> RunStatus:
    return app.runs(thread_id=thread_id, limit=1)[0].status


def _graph(checkpointer: Checkpointer, ask: Callable[[S], Any]) -> CompiledGraph:
    def before(state: S) -> dict[str, Any]:
        return {"log": ["before"]}

    def after(state: S) -> dict[str, Any]:
        return {"log": ["after"]}

    g = StateGraph(S)
    g.add_node("before", before)
    g.add_node("ask", ask)
    g.add_node("after", after)
    g.add_edge(START, "before")
    g.add_edge("before", "ask")
    g.add_edge("ask", "after")
    g.add_edge("after", END)
    return g.compile(checkpointer=checkpointer)


def test_interrupt_then_resume_restarts_the_node_from_the_top(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    calls: list[str] = []

    def ask(state: S) -> dict[str, Any]:
        calls.append("ask:top")
        answer = interrupt({"question": "approve?"})
        calls.append(f"ask:got {answer}")
        return {"answer": answer, "log": ["ask"]}

    app = _graph(checkpointer, ask)
    cfg = {"thread_id": "t"}
    out = run_path(app, {"log": []}, cfg)
    assert _asked(out) == [({"question": "approve?"}, "ask", 0)]
    assert out["__interrupt__"][0].value == {"question": "approve?"}  # LangGraph's shape
    assert out["log"] == ["before"]
    assert "answer" not in out
    assert _status(app, "t") is RunStatus.INTERRUPTED
    state = app.get_state(cfg)
    assert state.next == ("ask",)
    assert state.interrupts == tuple(out["__interrupt__"])  # the same ids in every view
    assert state.tasks[0].name == "ask" and state.tasks[0].interrupts == state.interrupts
    (run,) = app.runs(thread_id="t")

    out = run_path(app, Command(resume="yes"), cfg)
    assert calls == ["ask:top", "ask:top", "ask:got yes"]
    assert out["answer"] == "yes" and out["log"] == ["before", "ask", "after"]
    assert "__interrupt__" not in out
    (after,) = app.runs(thread_id="t")
    assert after.run_id == run.run_id and after.status is RunStatus.COMPLETED
    assert app.get_state(cfg).interrupts == ()


def test_async_node_interrupt(checkpointer: Checkpointer, run_path: RunPath) -> None:
    async def ask(state: S) -> dict[str, Any]:
        return {"answer": interrupt("number?") * 2}

    app = _graph(checkpointer, ask)
    cfg = {"thread_id": "t"}
    assert run_path(app, {}, cfg)["__interrupt__"][0]["value"] == "number?"
    assert run_path(app, Command(resume=21), cfg)["answer"] == 42


def test_two_interrupts_in_one_node_are_matched_by_order(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    calls: list[str] = []

    def ask(state: S) -> dict[str, Any]:
        calls.append("top")
        name = interrupt("name?")
        age = interrupt("age?")
        return {"answer": {"name": name, "age": age}}

    app = _graph(checkpointer, ask)
    cfg = {"thread_id": "t"}
    first = run_path(app, {}, cfg)
    assert _asked(first) == [("name?", "ask", 0)]
    second = run_path(app, Command(resume="ada"), cfg)
    assert _asked(second) == [("age?", "ask", 1)]
    assert "answer" not in second
    assert _status(app, "t") is RunStatus.INTERRUPTED
    third = run_path(app, Command(resume=36), cfg)
    assert third["answer"] == {"name": "ada", "age": 36}
    assert "__interrupt__" not in third
    assert calls == ["top", "top", "top"]
    assert _status(app, "t") is RunStatus.COMPLETED


def test_resume_value_may_be_none_or_falsy(checkpointer: Checkpointer, run_path: RunPath) -> None:
    def ask(state: S) -> dict[str, Any]:
        return {"answer": [interrupt("a"), interrupt("b")]}

    app = _graph(checkpointer, ask)
    cfg = {"thread_id": "t"}
    run_path(app, {}, cfg)
    run_path(app, Command(resume=None), cfg)
    assert run_path(app, Command(resume=0), cfg)["answer"] == [None, 0]


def test_interrupt_in_a_fan_out_keeps_the_finished_sibling(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    calls: list[str] = []

    def ask(state: S) -> dict[str, Any]:
        calls.append("ask")
        return {"answer": interrupt("ok?")}

    def work(state: S) -> dict[str, Any]:
        calls.append("work")
        return {"log": ["work"]}

    g = StateGraph(S)
    g.add_node("ask", ask)
    g.add_node("work", work)
    g.add_edge(START, "ask")
    g.add_edge(START, "work")
    app = g.compile(checkpointer=checkpointer)
    cfg = {"thread_id": "t"}
    out = run_path(app, {}, cfg)
    assert _asked(out) == [("ok?", "ask", 0)]
    assert sorted(calls) == ["ask", "work"]
    out = run_path(app, Command(resume="fine"), cfg)
    assert sorted(calls) == ["ask", "ask", "work"]  # work's saved writes were used
    assert out == {"log": ["work"], "answer": "fine"}


@pytest.mark.parametrize("style", ["bare_except", "except_base_returns", "reraise_other"])
def test_a_node_that_swallows_the_interrupt_is_an_error(
    checkpointer: Checkpointer, run_path: RunPath, style: str
) -> None:
    def ask(state: S) -> dict[str, Any]:
        if style == "bare_except":
            try:
                interrupt("q")
            except:  # noqa: E722 - the point of the test
                return {"answer": "declined"}
        elif style == "except_base_returns":
            try:
                interrupt("q")
            except BaseException:
                pass
            return {"answer": "declined"}
        else:
            try:
                interrupt("q")
            except BaseException as exc:
                raise RuntimeError("wrapped") from exc
        raise AssertionError("unreachable")

    app = _graph(checkpointer, ask)
    cfg = {"thread_id": "t"}
    with pytest.raises(InterruptSwallowedError, match="'ask' caught the interrupt") as info:
        run_path(app, {}, cfg)
    assert info.value.node == "ask"
    assert isinstance(info.value, NodeError)
    run = app.runs(thread_id="t")[0]
    assert run.status is RunStatus.FAILED
    assert "InterruptSwallowedError" in (run.error or "")
    assert app.get_state(cfg).values.get("answer") is None  # "declined" was not stored


def test_interrupt_signal_is_outside_the_error_tree() -> None:
    assert not issubclass(GraphInterrupt, Exception)
    assert not issubclass(GraphInterrupt, OnceGraphError)


def test_resume_without_an_interrupted_run_is_refused(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    fail = [True]

    def ask(state: S) -> dict[str, Any]:
        if fail[0]:
            raise RuntimeError("down")
        return {"answer": "x"}

    app = _graph(checkpointer, ask)
    with pytest.raises(NoRunToResumeError, match=r"no interrupted run.*invoke\(None, config\)"):
        run_path(app, Command(resume="x"), {"thread_id": "fresh"})
    with pytest.raises(RuntimeError, match="down"):
        run_path(app, {}, {"thread_id": "failed"})
    with pytest.raises(NoRunToResumeError, match="no interrupted run"):
        run_path(app, Command(resume="x"), {"thread_id": "failed"})
    assert _status(app, "failed") is RunStatus.FAILED
    fail[0] = False
    run_path(app, None, {"thread_id": "failed"})
    with pytest.raises(NoRunToResumeError, match="no interrupted run"):
        run_path(app, Command(resume="x"), {"thread_id": "failed"})


def test_interrupted_run_asks_again_on_none_and_refuses_new_input(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    app = _graph(checkpointer, lambda s: {"answer": interrupt("q")})
    cfg = {"thread_id": "t"}
    asked = run_path(app, {}, cfg)
    # None: the same state and question again, and nothing runs (it stays waiting)
    assert run_path(app, None, cfg) == asked and [i.value for i in asked["__interrupt__"]] == ["q"]
    with pytest.raises(UnfinishedRunError, match=r"\(interrupted\).*Command\(resume=\.\.\.\)"):
        run_path(app, {"log": ["new"]}, cfg)
    assert _status(app, "t") is RunStatus.INTERRUPTED
    app.abandon(cfg)
    assert _status(app, "t") is RunStatus.ABANDONED
    with pytest.raises(NoRunToResumeError):
        run_path(app, Command(resume="late"), cfg)


def test_effects_before_an_interrupt_are_served_from_the_ledger(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    sent: list[str] = []

    def send(to: str) -> str:
        sent.append(to)
        return f"sent to {to}"

    def ask(state: S) -> dict[str, Any]:
        receipt = effect(send, "ops")
        return {"answer": [receipt, interrupt("continue?")]}

    app = _graph(checkpointer, ask)
    cfg = {"thread_id": "t"}
    run_path(app, {}, cfg)
    out = run_path(app, Command(resume="go"), cfg)
    assert out["answer"] == ["sent to ops", "go"]
    assert sent == ["ops"]  # the node re-ran from the top; the effect did not
    (record,) = app.effects(thread_id="t")
    assert record.status == "completed" and record.result == "sent to ops"


def test_interrupt_outside_a_node_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="inside a running graph node"):
        interrupt("nobody is listening")


# Siblings waiting in one step: an answer names its question (Command(resume={id: ...})),
# a finished or already-answered sibling is never answered again, and one bare answer
# for several open questions is refused (which one it answers is not said).
def test_two_siblings_interrupting_in_one_step_are_answered_by_id(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    def left(state: S) -> dict[str, Any]:
        return {"log": [f"left={interrupt('left?')}"]}

    def right(state: S) -> dict[str, Any]:
        return {"log": [f"right={interrupt('right?')}"]}

    g = StateGraph(S)
    g.add_node("left", left)
    g.add_node("right", right)
    g.add_edge(START, "left")
    g.add_edge(START, "right")
    app = g.compile(checkpointer=checkpointer)
    cfg = {"thread_id": "t"}
    first = run_path(app, {}, cfg)
    assert [i["node"] for i in first["__interrupt__"]] == ["left", "right"]
    with pytest.raises(AmbiguousAnswerError, match="multiple pending interrupts"):
        run_path(app, Command(resume=1), cfg)
    assert len(app.get_state(cfg).interrupts) == 2  # nothing was answered
    right_id = app.get_state(cfg).interrupts[1].id
    second = run_path(app, Command(resume={right_id: 2}), cfg)
    assert [i["node"] for i in second["__interrupt__"]] == ["left"]
    third = run_path(app, Command(resume=1), cfg)  # one question left: a bare answer is it
    assert "__interrupt__" not in third
    assert sorted(third["log"]) == ["left=1", "right=2"]
    assert _status(app, "t") is RunStatus.COMPLETED


def test_resume_by_interrupt_ids_answers_each_named_question_and_refuses_others(
    checkpointer: Checkpointer,
) -> None:
    def left(state: S) -> dict[str, Any]:
        return {"log": [f"left={interrupt('left?')}"]}

    def right(state: S) -> dict[str, Any]:
        return {"log": [f"right={interrupt('right?')}"]}

    g = StateGraph(S)
    g.add_node("left", left)
    g.add_node("right", right)
    g.add_edge(START, "left")
    g.add_edge(START, "right")
    app = g.compile(checkpointer=checkpointer)
    cfg = {"thread_id": "t"}
    first, second = app.invoke({}, cfg)["__interrupt__"]
    with pytest.raises(ConfigError, match=r"not open.*Nothing was answered"):
        app.invoke(Command(resume={first.id: 1, "0" * 32: 2}), cfg)
    assert len(app.get_state(cfg).interrupts) == 2
    out = app.invoke(Command(resume={second.id: 2, first.id: 1}), cfg)
    assert "__interrupt__" not in out and out["log"] == ["left=1", "right=2"]
    (answer,) = [a for a in app.audit(thread_id="t") if a.action == "answer"]
    assert {answer.details["node"], *(x["node"] for x in answer.details["also"])} == {
        "left",
        "right",
    }
