"""The writes of a step of several tasks apply in one order whoever finishes first: the
nodes the edges pulled by name, then the ``Send`` tasks in the order they were sent (as
LangGraph applies them). And each task that asks a question streams its own
``__interrupt__`` chunk."""

from __future__ import annotations

import asyncio
import operator
from typing import Annotated, Any, TypedDict

from oncegraph import END, START, Command, Send, StateGraph, interrupt
from oncegraph.storage.protocols import Checkpointer


class State(TypedDict):
    log: Annotated[list[str], operator.add]


def sleeper(name: str, seconds: float) -> Any:
    async def node(state: Any) -> dict[str, Any]:
        await asyncio.sleep(seconds)
        return {"log": [name]}

    return node


async def test_pulled_nodes_apply_by_name_not_by_declaration_or_finish(
    checkpointer: Checkpointer,
) -> None:
    builder = StateGraph(State)
    builder.add_node("zeta", sleeper("zeta", 0))  # declared first, finishes first
    builder.add_node("alpha", sleeper("alpha", 0.05))
    builder.add_node("mid", sleeper("mid", 0.02))
    for name in ("zeta", "alpha", "mid"):
        builder.add_edge(START, name)
        builder.add_edge(name, END)
    app = builder.compile(checkpointer=checkpointer)
    out = await app.ainvoke({"log": []}, {"thread_id": "order-1"})
    assert out["log"] == ["alpha", "mid", "zeta"]


async def test_sends_apply_after_pulled_nodes_in_the_order_sent() -> None:
    builder = StateGraph(State)
    builder.add_node("fan", lambda s: {"log": ["fan"]})
    builder.add_node("b_pulled", sleeper("b_pulled", 0.03))

    async def work(arg: str) -> dict[str, Any]:
        await asyncio.sleep(0.01 * (3 - int(arg)))  # the last sent finishes first
        return {"log": [f"sent{arg}"]}

    builder.add_node("a_sent", work)
    builder.add_edge(START, "fan")
    builder.add_edge("fan", "b_pulled")
    builder.add_conditional_edges("fan", lambda s: [Send("a_sent", str(i)) for i in range(3)])
    out = await builder.compile().ainvoke({"log": []})
    assert out["log"] == ["fan", "b_pulled", "sent0", "sent1", "sent2"]


def test_each_task_asking_streams_its_own_interrupt_chunk(checkpointer: Checkpointer) -> None:
    builder = StateGraph(State)
    builder.add_node("left", lambda s: {"log": [f"left:{interrupt('left?')}"]})
    builder.add_node("right", lambda s: {"log": [f"right:{interrupt('right?')}"]})
    builder.add_edge(START, "left")
    builder.add_edge(START, "right")
    app = builder.compile(checkpointer=checkpointer)
    config = {"thread_id": "ask-2"}
    chunks = [c for c in app.stream({"log": []}, config) if "__interrupt__" in c]
    assert [[i.value for i in c["__interrupt__"]] for c in chunks] == [["left?"], ["right?"]]
    asked = app.get_state(config).interrupts  # the state still holds every open question
    assert sorted(i.value for i in asked) == ["left?", "right?"]
    answers = {i.id: f"a-{i.value}" for i in asked}
    final = app.invoke(Command(resume=answers), config)
    assert final["log"] == ["left:a-left?", "right:a-right?"]
