"""Replay inputs, classified: recorded facts, message ids derived from the run, and the
replay class a node or tool declares.

On memory, SQLite and PostgreSQL:

* ``oncegraph.now()`` / ``uuid4()`` / ``random()`` in a node, a ``@task`` and a subgraph
  node give the same values to a resumed node (every run path) and to a replay in each
  mode; an evidence replay refuses a value the original run never drew;
* a plain ``StateGraph`` node that returns id-less messages with a tool call is replayed
  from evidence (its messages get the ids the original run gave them, so the tool call
  finds its record);
* a crash in a fresh OS process after an effect's intent keeps the value the node drew
  before it (tests/integration/facts_worker.py).
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

import pytest
from tests.conftest import RunPath

import oncegraph
from oncegraph import END, START, Command, StateGraph, ToolNode, interrupt, tool
from oncegraph.errors import MissingRecordError
from oncegraph.func import entrypoint, task
from oncegraph.state import add_messages
from oncegraph.storage.protocols import Checkpointer


class Drawn(TypedDict, total=False):
    seen: Annotated[list[Any], operator.add]
    answer: str
    inner: str


def _draw() -> list[Any]:
    return [oncegraph.now().isoformat(), str(oncegraph.uuid4()), oncegraph.random()]


def _facts(app: Any, thread_id: str) -> list[Any]:
    return [e for e in app.effects(thread_id=thread_id) if e.effect_type == "oncegraph.facts"]


def test_a_resumed_node_gets_the_values_it_drew(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    runs: list[list[Any]] = []

    def ask(state: Drawn) -> dict[str, Any]:
        drawn = _draw()
        runs.append(drawn)
        return {"seen": drawn, "answer": interrupt("ok?")}

    g = StateGraph(Drawn)
    g.add_node("ask", ask)
    g.add_edge(START, "ask")
    g.add_edge("ask", END)
    app = g.compile(checkpointer=checkpointer)
    cfg = {"thread_id": "t-facts"}
    run_path(app, {}, cfg)
    out = run_path(app, Command(resume="yes"), cfg)
    assert len(runs) == 2 and runs[0] == runs[1]  # the node ran twice, drew once
    assert out["seen"] == runs[0] and out["answer"] == "yes"
    (record,) = _facts(app, "t-facts")  # one record for the task, no commit of its own
    assert record.result == {
        "facts": {"": [["now", runs[0][0]], ["uuid4", runs[0][1]], ["random", runs[0][2]]]}
    }
    fresh = _draw()  # outside a run: live values
    assert fresh[1] != runs[0][1] and isinstance(
        oncegraph.now().tzinfo, type(oncegraph.now().tzinfo)
    )


def _with_subgraph(checkpointer: Checkpointer) -> Any:
    class Inner(TypedDict, total=False):
        inner: str

    def inner_node(state: Inner) -> dict[str, Any]:
        return {"inner": str(oncegraph.uuid4())}

    inner = StateGraph(Inner)
    inner.add_node("deep", inner_node)
    inner.add_edge(START, "deep")
    inner.add_edge("deep", END)

    def top(state: Drawn) -> dict[str, Any]:
        return {"seen": _draw()}

    g = StateGraph(Drawn)
    g.add_node("top", top)
    g.add_node("sub", inner.compile())
    g.add_edge(START, "top")
    g.add_edge("top", "sub")
    g.add_edge("sub", END)
    return g.compile(checkpointer=checkpointer)


@pytest.mark.parametrize("mode", ["evidence", "simulation", "live"])
def test_a_replay_gets_the_values_the_run_drew(checkpointer: Checkpointer, mode: str) -> None:
    app = _with_subgraph(checkpointer)
    out = app.invoke({}, {"thread_id": "t-sub"})
    assert len(out["seen"]) == 3 and out["inner"]  # drawn at the top and in the subgraph
    run_id = app.runs(thread_id="t-sub")[0].run_id
    replayed = app.replay(run_id, mode=mode, reason="same values?", actor="ana")
    assert replayed.status == "completed"
    assert replayed.result["seen"] == out["seen"]
    assert replayed.result["inner"] == out["inner"]


def test_a_task_gets_its_values_back_and_evidence_refuses_a_new_draw(
    checkpointer: Checkpointer,
) -> None:
    extra: list[bool] = [False]

    @task
    def stamp(label: str) -> str:
        return f"{label}:{oncegraph.uuid4()}"

    @entrypoint(checkpointer=checkpointer)
    def flow(inp: dict[str, Any]) -> dict[str, Any]:
        first = stamp("a").result()
        second = stamp("b").result()
        when = oncegraph.now().isoformat()
        if extra[0]:
            oncegraph.random()  # the code now draws one more value than it recorded
        return {"stamps": [first, second], "when": when}

    out = flow.invoke({}, {"thread_id": "t-task"})
    assert out["stamps"][0] != out["stamps"][1]  # each task call draws in its own scope
    run_id = flow.runs(thread_id="t-task")[0].run_id
    again = flow.replay(run_id, mode="evidence", reason="same?", actor="ana")
    assert again == out
    extra[0] = True
    with pytest.raises(MissingRecordError, match=r"oncegraph\.random\(\).*never recorded"):
        flow.replay(run_id, mode="evidence", reason="drawn more?", actor="ana")


class Chat(TypedDict):
    messages: Annotated[list[Any], add_messages]


def test_evidence_replay_of_a_plain_graph_with_id_less_messages(checkpointer: Checkpointer) -> None:
    calls: list[str] = []

    @tool(effect="read")
    def lookup(order_id: str) -> str:
        """Look an order up."""
        calls.append(order_id)
        return f"order {order_id}: delivered"

    def agent(state: Chat) -> dict[str, Any]:
        if state["messages"][-1]["role"] == "tool":
            return {"messages": [{"role": "assistant", "content": "It was delivered."}]}
        call = {"id": "call_1", "name": "lookup", "args": {"order_id": "1042"}}
        return {"messages": [{"role": "assistant", "content": "", "tool_calls": [call]}]}

    def route(state: Chat) -> str:
        return "tools" if state["messages"][-1].get("tool_calls") else END

    g = StateGraph(Chat)
    g.add_node("agent", agent)
    g.add_node("tools", ToolNode([lookup]))
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", route, ["tools", END])
    g.add_edge("tools", "agent")
    app = g.compile(checkpointer=checkpointer)
    out = app.invoke(
        {"messages": [{"role": "user", "content": "where is 1042?"}]}, {"thread_id": "t-msg"}
    )
    assert calls == ["1042"]
    run_id = app.runs(thread_id="t-msg")[0].run_id
    replayed = app.replay(run_id, mode="evidence", reason="why?", actor="ana")
    assert calls == ["1042"]  # served from the record
    assert replayed.result["messages"] == out["messages"]  # the same ids too


def test_a_node_two_subgraphs_deep_gets_its_values_back_on_every_path(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    drawn: list[str] = []

    class Inner(TypedDict, total=False):
        inner: str
        answer: str

    def deep(state: Inner) -> dict[str, Any]:
        value = str(oncegraph.uuid4())
        drawn.append(value)
        return {"inner": value, "answer": interrupt("ok?")}

    def nest(graph: Any, name: str) -> Any:
        g = StateGraph(Inner)
        g.add_node(name, graph)
        g.add_edge(START, name)
        g.add_edge(name, END)
        return g

    app = nest(nest(nest(deep, "deep").compile(), "middle").compile(), "top").compile(
        checkpointer=checkpointer
    )
    cfg = {"thread_id": "t-deep"}
    run_path(app, {}, cfg)
    out = run_path(app, Command(resume="yes"), cfg)
    assert len(drawn) == 2 and drawn[0] == drawn[1]
    assert out["inner"] == drawn[0] and out["answer"] == "yes"


class Counting:
    """A real store that counts the ledger writes made outside a step's commit."""

    def __init__(self, inner: Checkpointer) -> None:
        self.inner = inner
        self.saved: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def save_effect(self, record: Any, *, fence: int | None = None) -> None:
        self.saved.append(record.effect_type)
        await self.inner.save_effect(record, fence=fence)


def test_facts_ride_the_step_commit_unless_an_effect_follows(checkpointer: Checkpointer) -> None:
    from typing import cast

    counting = Counting(checkpointer)
    sent: list[str] = []

    def send(order: str) -> str:
        sent.append(order)
        return "sent"

    def quiet(state: Drawn) -> dict[str, Any]:
        return {"seen": _draw()}

    def loud(state: Drawn) -> dict[str, Any]:
        order = str(oncegraph.uuid4())
        oncegraph.effect(send, order, effect_type="send")
        return {"seen": [order]}

    g = StateGraph(Drawn)
    g.add_node("quiet", quiet)
    g.add_node("loud", loud)
    g.add_edge(START, "quiet")
    g.add_edge("quiet", "loud")
    g.add_edge("loud", END)
    app = g.compile(checkpointer=cast(Checkpointer, counting))
    out = app.invoke({}, {"thread_id": "t-cost"})
    # quiet's facts went with its step's commit; loud's were written before send's intent
    assert counting.saved == ["oncegraph.facts", "send"]
    assert sent == [out["seen"][-1]]
    assert len(_facts(app, "t-cost")) == 2


def test_a_retried_node_gets_the_values_its_failed_attempt_drew(
    checkpointer: Checkpointer,
) -> None:
    from oncegraph.graph.retry import RetryPolicy

    attempts: list[list[Any]] = []

    async def no_wait(seconds: float) -> None:
        return None

    def flaky(state: Drawn) -> dict[str, Any]:
        drawn = _draw()
        attempts.append(drawn)
        if len(attempts) == 1:
            raise ConnectionError("upstream hiccup")
        return {"seen": [*drawn, oncegraph.random()]}  # one more draw than before

    g = StateGraph(Drawn)
    g.add_node("flaky", flaky, retry_policy=RetryPolicy(jitter=False))
    g.add_edge(START, "flaky")
    g.add_edge("flaky", END)
    app = g.compile(checkpointer=checkpointer)
    out = app.invoke({}, {"thread_id": "t-retry", "sleep": no_wait})
    assert len(attempts) == 2 and attempts[0] == attempts[1]
    assert out["seen"][:3] == attempts[0] and len(out["seen"]) == 4
    (record,) = _facts(app, "t-retry")
    assert [kind for kind, _ in record.result["facts"][""]] == ["now", "uuid4", "random", "random"]


def test_a_changed_draw_order_is_named_not_served(checkpointer: Checkpointer) -> None:
    from oncegraph.errors import NondeterminismError

    swapped = [False]

    def ask(state: Drawn) -> dict[str, Any]:
        first = oncegraph.now().isoformat() if swapped[0] else str(oncegraph.uuid4())
        return {"seen": [first], "answer": interrupt("ok?")}

    g = StateGraph(Drawn)
    g.add_node("ask", ask)
    g.add_edge(START, "ask")
    g.add_edge("ask", END)
    app = g.compile(checkpointer=checkpointer)
    cfg = {"thread_id": "t-order"}
    app.invoke({}, cfg)
    swapped[0] = True  # a deploy: the node now reads the clock where it drew an id
    with pytest.raises(NondeterminismError, match=r"oncegraph\.now\(\).*oncegraph\.uuid4\(\)"):
        app.invoke(Command(resume="yes"), cfg)
