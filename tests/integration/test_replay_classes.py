"""What a node or a tool is to a replay: ``replay="recorded" | "repeat" | "live"``.

An evidence replay refuses only what is live and unrecorded (naming it and the fix); a
``repeat`` tool is run again; a ``recorded`` tool's record answers a simulation replay
that has no stand-in for it; a node marked ``live`` is never run by a replay that must
not touch the world. On memory, SQLite and PostgreSQL.
"""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

import pytest

from oncegraph import END, START, StateGraph, ToolNode, tool
from oncegraph.errors import ConfigError, MissingRecordError
from oncegraph.state import add_messages
from oncegraph.storage.protocols import Checkpointer


class Chat(TypedDict):
    messages: Annotated[list[Any], add_messages]


class World:
    """A graph whose agent node asks for the tool calls in ``plan`` (then answers)."""

    def __init__(self, checkpointer: Checkpointer, node_replay: str = "repeat") -> None:
        self.plan: list[str] = ["convert"]
        self.ran: list[str] = []
        ran = self.ran

        @tool(effect="read", replay="repeat")
        def convert(amount: float) -> float:
            """Convert euros to cents."""
            ran.append("convert")
            return amount * 100

        @tool(effect="read", replay="live")
        def fetch_rate(currency: str) -> float:
            """Ask the bank for today's rate."""
            ran.append("fetch_rate")
            return 1.1

        @tool(effect="read")
        def lookup(order_id: str) -> str:
            """Look an order up."""
            ran.append("lookup")
            return "delivered"

        def agent(state: Chat) -> dict[str, Any]:
            ran.append("agent")
            if state["messages"][-1]["role"] == "tool":
                return {"messages": [{"role": "assistant", "content": "done"}]}
            args = {"convert": {"amount": 2.5}, "fetch_rate": {"currency": "usd"}}
            calls = [
                {"id": f"c{i}", "name": name, "args": args.get(name, {"order_id": "1042"})}
                for i, name in enumerate(self.plan)
            ]
            return {"messages": [{"role": "assistant", "content": "", "tool_calls": calls}]}

        def route(state: Chat) -> str:
            return "tools" if state["messages"][-1].get("tool_calls") else END

        g = StateGraph(Chat)
        g.add_node("agent", agent, replay=node_replay)
        g.add_node("tools", ToolNode([convert, fetch_rate, lookup]))
        g.add_edge(START, "agent")
        g.add_conditional_edges("agent", route, ["tools", END])
        g.add_edge("tools", "agent")
        self.app = g.compile(checkpointer=checkpointer)

    def run(self) -> str:
        self.app.invoke({"messages": [{"role": "user", "content": "go"}]}, {"thread_id": "t"})
        return str(self.app.runs(thread_id="t")[0].run_id)

    def replay(self, run_id: str, mode: str = "evidence") -> Any:
        return self.app.replay(run_id, mode=mode, reason="check", actor="ana")


def test_a_repeat_tool_runs_again_and_a_recorded_live_tool_is_served(
    checkpointer: Checkpointer,
) -> None:
    world = World(checkpointer)
    world.plan = ["convert", "fetch_rate"]
    run_id = world.run()
    assert world.ran.count("convert") == 1 and world.ran.count("fetch_rate") == 1
    replayed = world.replay(run_id)
    assert replayed.status == "completed"
    assert world.ran.count("convert") == 2  # a pure computation: run again
    assert world.ran.count("fetch_rate") == 1  # a live request on record: served


def test_evidence_refuses_only_a_live_request_it_has_no_record_of(
    checkpointer: Checkpointer,
) -> None:
    world = World(checkpointer)
    run_id = world.run()  # the run converted only
    world.plan = ["convert", "fetch_rate"]  # the code now also asks the bank
    with pytest.raises(MissingRecordError) as refused:
        world.replay(run_id)
    text = str(refused.value)
    assert "'fetch_rate'" in text and "replay='live'" in text and "no record" in text
    assert "replay='repeat'" in text and "mode='simulation'" in text  # the fixes
    assert world.ran.count("fetch_rate") == 0  # never called live
    world.plan = ["convert", "lookup"]  # a recorded-class tool missing: refused as well
    with pytest.raises(MissingRecordError, match=r"'lookup'.*replay='repeat'"):
        world.replay(run_id)
    assert world.ran.count("lookup") == 0


def test_simulation_serves_a_recorded_tool_and_refuses_a_live_one(
    checkpointer: Checkpointer,
) -> None:
    world = World(checkpointer)
    world.plan = ["lookup"]
    run_id = world.run()
    replayed = world.replay(run_id, mode="simulation")  # no simulate=: its record answers
    assert replayed.status == "completed" and world.ran.count("lookup") == 1
    world.plan = ["fetch_rate"]
    run_id = world.run()
    with pytest.raises(MissingRecordError, match=r"simulation replay.*'fetch_rate'.*simulate="):
        world.replay(run_id, mode="simulation")
    assert world.ran.count("fetch_rate") == 1  # only the run's own call


def test_a_node_marked_live_is_not_run_by_an_evidence_replay(checkpointer: Checkpointer) -> None:
    world = World(checkpointer, node_replay="live")
    run_id = world.run()
    agents = world.ran.count("agent")
    with pytest.raises(MissingRecordError, match=r"node 'agent', marked replay='live'"):
        world.replay(run_id)
    assert world.ran.count("agent") == agents  # not run
    replayed = world.replay(run_id, mode="live")  # a live replay may run it
    assert replayed.status == "completed" and world.ran.count("agent") > agents


def test_replay_classes_are_checked_when_declared() -> None:
    with pytest.raises(ConfigError, match=r"replay='recorded' is for tools"):
        StateGraph(Chat).add_node("a", lambda s: {}, replay="recorded")
    with pytest.raises(ConfigError, match=r"replay='sometimes' is not a replay class"):
        tool(lambda: 1, name="t", description="", replay="sometimes")


def test_effect_declares_its_replay_class_too(checkpointer: Checkpointer) -> None:
    from oncegraph import effect

    class Total(TypedDict, total=False):
        cents: int

    computed: list[float] = []

    def to_cents(amount: float) -> int:
        computed.append(amount)
        return int(amount * 100)

    def node(state: Total) -> Total:
        return {"cents": effect(to_cents, 2.5, effect_class="read", replay="repeat")}

    g = StateGraph(Total)
    g.add_node("node", node)
    g.add_edge(START, "node")
    g.add_edge("node", END)
    app = g.compile(checkpointer=checkpointer)
    app.invoke({}, {"thread_id": "t-eff"})
    run_id = app.runs(thread_id="t-eff")[0].run_id
    replayed = app.replay(run_id, mode="evidence", reason="check", actor="ana")
    assert replayed.result == {"cents": 250} and computed == [2.5, 2.5]  # run again
    with pytest.raises(ConfigError, match=r"replay='never' is not a replay class"):
        g2 = StateGraph(Total)
        g2.add_node("n", lambda s: {"cents": effect(to_cents, 1.0, replay="never")})
        g2.add_edge(START, "n")
        g2.compile().invoke({})
