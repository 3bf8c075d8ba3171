"""LangGraph habits that need the run loop: breakpoints, node retries, batch, every
stream mode, node and router config, and the shapes of what comes back.

Each habit is shown working (or refused with a message that says why and what to do);
the laws still hold on every path: a breakpoint is a recorded pause, a retried node
repeats no recorded effect, a batch returns only when every run has ended.
"""

from __future__ import annotations

import asyncio
import operator
import threading
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

import pytest

from oncegraph import (
    END,
    START,
    Command,
    EffectRetry,
    Interrupt,
    Reconciled,
    StateGraph,
    add_messages,
    effect,
    get_stream_writer,
    interrupt,
    tool,
)
from oncegraph._json import dumps, loads
from oncegraph.app import CompiledGraph
from oncegraph.config import get_config
from oncegraph.errors import ConfigError, GraphRecursionError, GraphValidationError
from oncegraph.runtime.context import current_task
from oncegraph.storage.checkpointer import InMemoryCheckpointer
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import RunStatus
from oncegraph.tools import ToolNode
from oncegraph.types import RetryPolicy

RunPath = Callable[..., dict[str, Any]]


class S(TypedDict, total=False):
    trail: Annotated[list[str], operator.add]
    x: int


class Chat(TypedDict, total=False):
    messages: Annotated[list[Any], add_messages]


class Reply(TypedDict, total=False):
    reply: str


def _mark(name: str) -> Callable[[S], dict[str, Any]]:
    return lambda state: {"trail": [name]}


def _line(checkpointer: Checkpointer | None, **compile: Any) -> CompiledGraph:
    g = StateGraph(S)
    for name in ("a", "b", "c"):
        g.add_node(name, _mark(name))
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_edge("b", "c")
    g.add_edge("c", END)
    return g.compile(checkpointer=checkpointer, **compile)


def _status(app: CompiledGraph, thread: str) -> RunStatus:
    return app.runs(thread_id=thread, limit=1)[0].status


# -- interrupt_before / interrupt_after --------------------------------------------------


def test_compiled_breakpoints_pause_and_invoke_none_continues(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    app = _line(checkpointer, interrupt_before=["b"], interrupt_after=["b"])
    cfg = {"thread_id": "t"}
    out = run_path(app, {"trail": []}, cfg)
    assert out["trail"] == ["a"] and "__interrupt__" not in out
    assert _status(app, "t") is RunStatus.INTERRUPTED
    state = app.get_state(cfg)
    assert state.next == ("b",) and state.interrupts == ()  # a breakpoint asks nothing
    out = run_path(app, None, cfg)  # LangGraph's way to go on
    assert out["trail"] == ["a", "b"]
    assert app.get_state(cfg).next == ("c",)
    out = run_path(app, None, cfg)
    assert out["trail"] == ["a", "b", "c"]
    assert _status(app, "t") is RunStatus.COMPLETED
    assert len(app.runs(thread_id="t")) == 1  # one run, paused twice


def test_breakpoints_as_call_arguments_and_for_every_node() -> None:
    app = _line(InMemoryCheckpointer())
    cfg = {"thread_id": "t"}
    assert app.invoke({"trail": []}, cfg, interrupt_after="*")["trail"] == ["a"]
    assert app.invoke(Command(resume=None), cfg)["trail"] == ["a", "b", "c"]  # also goes on
    chunks = list(app.stream({"trail": []}, {"thread_id": "u"}, interrupt_before=["c"]))
    assert chunks == [{"a": {"trail": ["a"]}}, {"b": {"trail": ["b"]}}, {"__interrupt__": ()}]
    with pytest.raises(GraphValidationError, match=r"interrupt_before=\['zz'\].*'zz' is not"):
        app.invoke({"trail": []}, {"thread_id": "v"}, interrupt_before=["zz"])
    with pytest.raises(GraphValidationError, match="is not a node"):
        _line(None, interrupt_after=["nope"])


# -- node retry policies ----------------------------------------------------------------


def test_a_node_retry_policy_retries_with_backoff_and_repeats_no_effect(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    waits: list[float] = []
    sent: list[int] = []
    fails = [2]

    async def no_wait(seconds: float) -> None:
        waits.append(seconds)

    def send(n: int) -> str:
        sent.append(n)
        return f"sent {n}"

    def flaky(state: S) -> dict[str, Any]:
        note = effect(send, 1)  # recorded on the first attempt; served from the ledger after
        if fails[0]:
            fails[0] -= 1
            raise ConnectionError("upstream hiccup")
        return {"trail": [note]}

    g = StateGraph(S)
    policy = RetryPolicy(initial_interval=1.0, backoff_factor=3.0, jitter=False)
    g.add_node("flaky", flaky, retry_policy=policy)
    g.add_edge(START, "flaky")
    app = g.compile(checkpointer=checkpointer)
    out = run_path(app, {"trail": []}, {"thread_id": "t", "sleep": no_wait})
    assert out["trail"] == ["sent 1"]
    assert waits == [1.0, 3.0]
    assert sent == [1]


def test_retry_on_decides_and_the_last_error_reaches_the_caller() -> None:
    calls: list[str] = []

    async def no_wait(seconds: float) -> None:
        return None

    def broken(state: S) -> dict[str, Any]:
        calls.append("x")
        raise ValueError("bad input")  # not retried by LangGraph's default

    g = StateGraph(S)
    g.add_node("broken", broken, retry_policy=RetryPolicy(max_attempts=5))
    g.add_edge(START, "broken")
    with pytest.raises(ValueError, match="bad input"):
        g.compile().invoke({}, {"sleep": no_wait})
    assert calls == ["x"]

    g = StateGraph(S)
    g.add_node("broken", broken, retry_policy=RetryPolicy(max_attempts=3, retry_on=ValueError))
    g.add_edge(START, "broken")
    with pytest.raises(ValueError):
        g.compile().invoke({}, {"sleep": no_wait})
    assert len(calls) == 4  # 1 + 3 attempts

    g = StateGraph(S)  # oncegraph's own EffectRetry is accepted too
    g.add_node("broken", broken, retry_policy=EffectRetry(max_attempts=2, jitter=0.0))
    g.add_edge(START, "broken")
    with pytest.raises(ValueError):
        g.compile().invoke({}, {"sleep": no_wait})
    assert len(calls) == 6
    with pytest.raises(ConfigError, match="retry_policy must be a RetryPolicy"):
        StateGraph(S).add_node("n", broken, retry_policy=3)


# -- batch ------------------------------------------------------------------------------


def test_batch_and_abatch() -> None:
    def double(state: S) -> dict[str, Any]:
        if state["x"] < 0:
            raise ValueError(f"negative {state['x']}")
        return {"x": state["x"] * 2}

    g = StateGraph(S)
    g.add_node("double", double)
    g.add_edge(START, "double")
    app = g.compile()
    assert [o["x"] for o in app.batch([{"x": 1}, {"x": 2}, {"x": 3}])] == [2, 4, 6]
    out = asyncio.run(app.abatch([{"x": 1}, {"x": -1}], return_exceptions=True))
    assert out[0]["x"] == 2 and isinstance(out[1], ValueError)
    with pytest.raises(ValueError, match="negative -2"):
        app.batch([{"x": -2}, {"x": 5}])
    stored = g.compile(checkpointer=InMemoryCheckpointer())
    outs = stored.batch([{"x": 1}, {"x": 10}], [{"thread_id": "one"}, {"thread_id": "two"}])
    assert [o["x"] for o in outs] == [2, 20]
    assert stored.get_state({"thread_id": "two"}).values["x"] == 20
    with pytest.raises(ConfigError, match="2 inputs and 1 configs"):
        stored.batch([{"x": 1}, {"x": 2}], [{"thread_id": "one"}])


# -- stream modes -----------------------------------------------------------------------


def test_custom_stream_from_sync_and_async_nodes_in_order(checkpointer: Checkpointer) -> None:
    def sync_node(state: S) -> dict[str, Any]:
        writer = get_stream_writer()
        assert threading.current_thread().name.startswith("oncegraph-sync")
        for i in range(3):
            writer({"progress": i})
        return {"trail": ["sync"]}

    async def async_node(state: S) -> dict[str, Any]:
        get_stream_writer()("async says hi")
        return {"trail": ["async"]}

    g = StateGraph(S)
    g.add_node("sync_node", sync_node)
    g.add_node("async_node", async_node)
    g.add_edge(START, "sync_node")
    g.add_edge("sync_node", "async_node")
    app = g.compile(checkpointer=checkpointer)
    items = list(app.stream({"trail": []}, {"thread_id": "t"}, stream_mode=["custom", "updates"]))
    assert items == [
        ("custom", {"progress": 0}),
        ("custom", {"progress": 1}),
        ("custom", {"progress": 2}),
        ("updates", {"sync_node": {"trail": ["sync"]}}),
        ("custom", "async says hi"),
        ("updates", {"async_node": {"trail": ["async"]}}),
    ]
    with pytest.raises(ConfigError, match="inside a running graph node"):
        get_stream_writer()


def test_debug_stream_has_langgraph_shapes() -> None:
    app = _line(InMemoryCheckpointer())
    items = list(app.stream({"trail": []}, {"thread_id": "t"}, stream_mode="debug"))
    kinds = [i["type"] for i in items]
    # the state before the input (step -1), then with it (step 0), as the history shows
    assert kinds == ["checkpoint"] * 2 + ["task", "task_result", "checkpoint"] * 3
    assert all(set(i) == {"step", "timestamp", "type", "payload"} for i in items)
    assert [i["step"] for i in items[:2]] == [-1, 0]
    before, first = items[0]["payload"], items[1]["payload"]
    assert before["next"] == ["__start__"] and before["metadata"]["source"] == "input"
    assert first["parent_config"] == before["config"]
    assert first["next"] == ["a"] and first["config"]["configurable"]["checkpoint_id"]
    task, result = items[2]["payload"], items[3]["payload"]
    assert task["name"] == "a" and task["id"] == result["id"]
    assert result["result"] == {"trail": ["a"]} and result["error"] is None
    assert items[-1]["payload"]["next"] == [] and items[-1]["payload"]["values"]["trail"] == [
        "a",
        "b",
        "c",
    ]


def test_debug_stream_without_a_checkpointer_has_no_checkpoints() -> None:
    # as LangGraph's: a graph compiled without a checkpointer keeps none to show
    items = list(_line(None).stream({"trail": []}, stream_mode=["debug", "checkpoints", "tasks"]))
    assert [(m, c["type"]) for m, c in items if m == "debug"] == [
        ("debug", "task"),
        ("debug", "task_result"),
    ] * 3
    assert [m for m, _ in items if m != "debug"] == ["tasks"] * 6


def test_messages_stream_passes_model_chunks_through() -> None:
    """The model adapters emit ``(chunk, metadata)`` on ``messages``; a tiny in-test
    model does the same here."""

    async def model_node(state: Reply) -> dict[str, Any]:
        ctx = current_task()
        assert ctx is not None
        text = ""
        for delta in ("Hel", "lo", "!"):
            text += delta
            meta = {"langgraph_node": ctx.node_name, "langgraph_step": ctx.step + 1}
            ctx.emit("messages", ({"role": "assistant", "content": delta, "id": "m1"}, meta))
        return {"reply": text}

    g = StateGraph(Reply)
    g.add_node("model", model_node)
    g.add_edge(START, "model")
    app = g.compile()
    chunks = list(app.stream({}, stream_mode="messages"))
    assert [c["content"] for c, _ in chunks] == ["Hel", "lo", "!"]
    assert all(m["langgraph_node"] == "model" for _, m in chunks)
    both = list(app.stream({}, stream_mode=["messages", "values"]))
    # an empty input writes no field: no values chunk before the node's (as LangGraph)
    assert [mode for mode, _ in both] == ["messages", "messages", "messages", "values"]


def test_events_stream_shows_what_the_ledger_did(checkpointer: Checkpointer) -> None:
    @tool(effect="irreversible", reconcile=lambda record: Reconciled.done({"ok": True}))
    def pay(order_id: str) -> dict[str, Any]:
        """Pay."""
        return {"ok": True}

    def agent(state: Chat) -> dict[str, Any]:
        if state["messages"][-1]["role"] == "tool":
            return {"messages": [("assistant", "paid")]}
        call = {"id": "call_1", "name": "pay", "args": {"order_id": "1"}}
        return {"messages": [{"role": "assistant", "content": "", "tool_calls": [call]}]}

    g = StateGraph(Chat)
    g.add_node("agent", agent)
    g.add_node("tools", ToolNode([pay]))
    g.add_edge(START, "agent")
    g.add_conditional_edges(
        "agent", lambda s: "tools" if s["messages"][-1].get("tool_calls") else END
    )
    g.add_edge("tools", "agent")
    app = g.compile(checkpointer=checkpointer)
    events = list(app.stream({"messages": ["pay"]}, {"thread_id": "t"}, stream_mode="events"))
    ledger = [(e["event"], e.get("status")) for e in events if e["event"].startswith("effect")]
    assert ledger == [("effect_intent", "pending"), ("effect_result", "completed")]
    intent = next(e for e in events if e["event"] == "effect_intent")
    assert intent["effect_type"] == "pay" and intent["node"] == "tools"
    assert intent["command_id"].endswith(":call_1")


# -- config in nodes and routers; shapes -------------------------------------------------


def test_nodes_and_routers_read_configurable_as_langgraph_writes_it(
    checkpointer: Checkpointer,
) -> None:
    seen: dict[str, Any] = {}

    def greet(state: S, config: dict[str, Any]) -> dict[str, Any]:
        seen["node"] = config["configurable"]["user_id"]
        seen["meta"] = config["metadata"]["langgraph_node"]
        seen["thread"] = config["configurable"]["thread_id"]
        seen["get_config"] = get_config()["configurable"]["user_id"]
        return {"trail": ["greet"]}

    def route(state: S, config: dict[str, Any]) -> str:
        return "vip" if config["configurable"]["user_id"] == "ada" else END

    g = StateGraph(S)
    g.add_node("greet", greet)
    g.add_node("vip", _mark("vip"))
    g.add_edge(START, "greet")
    g.add_conditional_edges("greet", route)
    app = g.compile(checkpointer=checkpointer)
    out = app.invoke({"trail": []}, {"configurable": {"thread_id": "t", "user_id": "ada"}})
    assert out["trail"] == ["greet", "vip"]
    assert seen == {"node": "ada", "meta": "greet", "thread": "t", "get_config": "ada"}
    out = app.invoke({"trail": []}, {"configurable": {"thread_id": "u", "user_id": "bob"}})
    assert out["trail"] == ["greet"]


def test_interrupts_are_objects_that_store_as_json(checkpointer: Checkpointer) -> None:
    def ask(state: S) -> dict[str, Any]:
        return {"x": interrupt({"question": "how many?"})}

    g = StateGraph(S)
    g.add_node("ask", ask)
    g.add_edge(START, "ask")
    app = g.compile(checkpointer=checkpointer)
    out = app.invoke({}, {"thread_id": "t"})
    (asked,) = out["__interrupt__"]
    assert isinstance(asked, Interrupt) and asked.value == {"question": "how many?"}
    assert asked["value"] == asked.value  # the dict-style read still works
    assert loads(dumps(out))["__interrupt__"] == [asked.to_json()]
    assert app.get_state({"thread_id": "t"}).interrupts == (asked,)
    assert app.invoke(Command(resume=3), {"thread_id": "t"})["x"] == 3


def test_recursion_limit_counts_like_langgraph() -> None:
    calls: list[int] = []

    def step(state: S) -> dict[str, Any]:
        calls.append(1)
        return {"trail": ["s"]}

    g = StateGraph(S)
    for name in ("a", "b", "c"):
        g.add_node(name, step)
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_edge("b", "c")
    app = g.compile()
    # LangGraph's docs: a 3-step graph needs recursion_limit 4 (the input step counts)
    with pytest.raises(GraphRecursionError):
        app.invoke({"trail": []}, {"recursion_limit": 3})
    assert len(app.invoke({"trail": []}, {"recursion_limit": 4})["trail"]) == 3
    assert issubclass(GraphRecursionError, RecursionError)


@pytest.mark.parametrize("reconcile", [True, False])
def test_events_stream_shows_a_reconcile_or_a_park(reconcile: bool) -> None:
    from oncegraph import FaultPlan, NeedsReviewError
    from oncegraph.errors import _CrashSignal

    sent: list[str] = []

    def pay(order: str) -> str:
        sent.append(order)
        return f"paid {order}"

    def found(record: Any) -> Reconciled:
        return Reconciled.done(f"paid {record.request['args'][0]}")

    def node(state: S) -> dict[str, Any]:
        note = effect(pay, "1", effect_class="irreversible", reconcile=found if reconcile else None)
        return {"trail": [note]}

    g = StateGraph(S)
    g.add_node("pay", node)
    g.add_edge(START, "pay")
    app = g.compile(checkpointer=InMemoryCheckpointer())
    cfg = {"thread_id": "t"}
    with pytest.raises(_CrashSignal):  # the call went out; its result was never recorded
        app.invoke({"trail": []}, {**cfg, "fault_plan": FaultPlan("after_tool_return")})
    events: list[dict[str, Any]] = []
    if reconcile:
        for chunk in app.stream(None, cfg, stream_mode="events"):
            events.append(chunk)
        ledger = [e for e in events if e["event"].startswith("effect")]
        assert [e["event"] for e in ledger] == ["effect_reconciled"]
        assert ledger[0]["verdict"] == "done" and ledger[0]["status"] == "completed"
        assert app.get_state(cfg).values["trail"] == ["paid 1"]
    else:
        with pytest.raises(NeedsReviewError):
            for chunk in app.stream(None, cfg, stream_mode="events"):
                events.append(chunk)
        (parked,) = [e for e in events if e["event"] == "effect_parked"]
        assert "needs_review" in parked["reason"] and parked["status"] == "pending"
    assert sent == ["1"]  # never sent again
