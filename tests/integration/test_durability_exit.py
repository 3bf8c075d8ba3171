"""``durability="exit"``: every step is still committed as the run goes, and when a call
exits (it finished, asked a question, failed) its step checkpoints are folded into its
last one, so the thread's history reads as LangGraph's under ``"exit"``:

* the exit checkpoint is the one left of the call, its parent the checkpoint the call
  started from; earlier runs' history is untouched;
* the run record, its effect records and its audit stay complete;
* a question, and a failure, keep what the resume needs (the head and its task writes),
  and each later call folds from where the one before exited;
* a crash before the fold leaves every step committed: the resume sends no recorded call
  again, and the fold at its exit takes the crashed call's steps too;
* a subgraph inherits the run's durability.

On every store (memory, SQLite, PostgreSQL). The SIGKILL case across real processes is in
``test_crash_matrix.py``.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

import pytest

from oncegraph import END, START, Command, StateGraph, interrupt, tool
from oncegraph.errors import ConfigError, _CrashSignal
from oncegraph.prebuilt.agent import ReactAgent
from oncegraph.prebuilt.models.scripted import ScriptedModel
from oncegraph.runtime.faults import FaultPlan
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import EffectStatus, RunStatus


class State(TypedDict):
    log: Annotated[list[str], operator.add]


def _line(checkpointer: Checkpointer, *, ask: bool = False, fail: list[bool] | None = None) -> Any:
    """``a -> b -> c``; ``b`` asks a question (``ask``) or raises while ``fail[0]``."""

    def a(state: State) -> State:
        return {"log": ["a"]}

    def b(state: State) -> State:
        if fail and fail[0]:
            raise RuntimeError("b is down")
        if ask:
            return {"log": [f"b:{interrupt('ok?')}"]}
        return {"log": ["b"]}

    def c(state: State) -> State:
        return {"log": ["c"]}

    g = StateGraph(State)
    g.add_node("a", a)
    g.add_node("b", b)
    g.add_node("c", c)
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_edge("b", "c")
    g.add_edge("c", END)
    return g.compile(checkpointer=checkpointer)


def _ids(app: Any, cfg: dict[str, Any]) -> list[tuple[str, str | None]]:
    """``(checkpoint_id, parent checkpoint_id)`` of the history, newest first."""
    out = []
    for snap in app.get_state_history(cfg):
        parent = snap.parent_config["configurable"]["checkpoint_id"] if snap.parent_config else None
        out.append((snap.config["configurable"]["checkpoint_id"], parent))
    return out


def test_an_exit_run_leaves_one_checkpoint_whose_parent_is_the_one_before_it(
    checkpointer: Checkpointer,
) -> None:
    app = _line(checkpointer)
    cfg = {"configurable": {"thread_id": "t"}}
    app.invoke({"log": []}, cfg)  # the default: every step in the history
    before = _ids(app, cfg)
    assert len(before) == 5  # LangGraph's input entry, the input applied, a, b, c

    assert app.invoke({"log": ["again"]}, cfg, durability="exit")["log"] == [
        "a", "b", "c", "again", "a", "b", "c"
    ]  # fmt: skip
    after = _ids(app, cfg)
    assert after[1:] == before  # the first run's history is untouched
    exit_id, parent = after[0]
    assert parent == before[0][0]  # the exit checkpoint follows the first run's last
    state = app.get_state(cfg)
    assert state.config["configurable"]["checkpoint_id"] == exit_id
    assert state.next == () and state.metadata["source"] == "loop"
    assert "exit" not in state.metadata  # oncegraph's bookkeeping is not shown
    # the run record is complete; LangGraph's checkpointer list agrees with the history
    first, second = sorted(app.runs(thread_id="t"), key=lambda r: r.created_at)
    assert second.status is RunStatus.COMPLETED and first.status is RunStatus.COMPLETED
    assert len(list(checkpointer.list(cfg))) == len(after)


def test_a_question_keeps_what_the_answer_needs_and_each_call_folds_on_its_own(
    checkpointer: Checkpointer,
) -> None:
    app = _line(checkpointer, ask=True)
    cfg = {"configurable": {"thread_id": "t"}}
    out = app.invoke({"log": []}, cfg, durability="exit")
    assert [i.value for i in out["__interrupt__"]] == ["ok?"]
    ((asked, parent),) = _ids(app, cfg)
    assert parent is None  # the thread had nothing before this call
    state = app.get_state(cfg)
    assert state.next == ("b",) and [i.value for i in state.interrupts] == ["ok?"]

    # the answer is a call of its own (no durability named: the run's is kept)
    assert app.invoke(Command(resume="yes"), cfg)["log"] == ["a", "b:yes", "c"]
    history = _ids(app, cfg)
    assert len(history) == 2 and history[1] == (asked, None)
    assert history[0][1] == asked  # the answer's exit checkpoint follows the question's
    (run,) = app.runs(thread_id="t")
    assert run.status is RunStatus.COMPLETED
    assert any(a.action == "answer" for a in app.audit(run_id=run.run_id))


def test_a_failure_keeps_its_error_and_a_retry_goes_on_from_it(
    checkpointer: Checkpointer,
) -> None:
    fail = [True]
    app = _line(checkpointer, fail=fail)
    cfg = {"configurable": {"thread_id": "t"}}
    with pytest.raises(RuntimeError, match="b is down"):
        app.invoke({"log": []}, cfg, durability="exit")
    assert len(_ids(app, cfg)) == 1
    state = app.get_state(cfg)
    assert state.values == {"log": ["a"]} and state.next == ("b",)
    assert "b is down" in str(state.tasks[0].error)
    with pytest.raises(RuntimeError, match="b is down"):  # fails again: nothing new
        app.invoke(None, cfg, durability="exit")
    assert len(_ids(app, cfg)) == 1
    fail[0] = False
    assert app.invoke(None, cfg, durability="exit")["log"] == ["a", "b", "c"]
    assert len(_ids(app, cfg)) == 2


def test_a_crash_before_the_fold_loses_nothing_and_sends_nothing_twice(
    checkpointer: Checkpointer,
) -> None:
    sent: list[str] = []

    @tool(effect="irreversible")
    def pay(order_id: str) -> str:
        """Pay an order."""
        sent.append(order_id)
        return f"paid {order_id}"

    model = ScriptedModel.turns(
        {"content": "", "tool_calls": [{"id": "c1", "name": "pay", "args": {"order_id": "7"}}]},
        "Paid.",
    )
    app = ReactAgent(model=model, system_prompt="You pay.", tools=[pay]).compile(
        checkpointer=checkpointer
    )
    cfg = {"configurable": {"thread_id": "t"}}
    user = {"messages": [{"role": "user", "content": "pay order 7"}]}
    # killed right after the tool step's checkpoint: the model turn and the tool call are
    # committed, the run never reached its exit, so nothing was folded
    crash = {**cfg, "fault_plan": FaultPlan("after_checkpoint", nth=2)}
    with pytest.raises(_CrashSignal):
        app.invoke(user, crash, durability="exit")
    assert sent == ["7"]
    assert len(_ids(app, cfg)) == 3  # every step so far, as committed
    (run,) = app.runs(thread_id="t")
    assert run.status is RunStatus.RUNNING

    out = app.invoke(None, cfg)  # the resume keeps the run's durability
    assert out["messages"][-1]["content"] == "Paid."
    assert sent == ["7"]  # the recorded call is not sent again
    ((_, parent),) = _ids(app, cfg)  # the crashed call's steps are folded too
    assert parent is None
    (effect,) = [e for e in app.effects(run_id=run.run_id) if e.effect_type == "pay"]
    assert effect.status is EffectStatus.COMPLETED


def test_a_subgraph_inherits_the_run_s_durability(checkpointer: Checkpointer) -> None:
    inner = StateGraph(State)
    inner.add_node("i1", lambda s: {"log": ["i1"]})
    inner.add_node("i2", lambda s: {"log": ["i2"]})
    inner.add_edge(START, "i1")
    inner.add_edge("i1", "i2")
    g = StateGraph(State)
    g.add_node("inner", inner.compile())
    g.add_edge(START, "inner")
    app = g.compile(checkpointer=checkpointer)
    cfg = {"configurable": {"thread_id": "t"}}
    assert app.invoke({"log": []}, cfg, durability="exit")["log"] == ["i1", "i2"]
    assert len(list(checkpointer.list(cfg))) == 1  # the subgraph's steps are not listed


def test_an_unknown_durability_is_refused(checkpointer: Checkpointer) -> None:
    app = _line(checkpointer)
    with pytest.raises(ConfigError, match="durability must be one of"):
        app.invoke({"log": []}, {"configurable": {"thread_id": "t"}}, durability="never")
