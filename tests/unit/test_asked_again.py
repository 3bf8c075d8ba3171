"""``invoke(None, config)`` on a run waiting for an answer gives back the state and the
open question, as its last call did, and runs nothing: no node runs again only to ask
what it asked, a finished sibling's writes are shown, and the answer still goes on."""

from __future__ import annotations

import asyncio
import operator
from typing import Annotated, Any, TypedDict

from oncegraph import Command, StateGraph, interrupt
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import RunStatus


class State(TypedDict):
    hello: Annotated[str, operator.add]


def test_none_on_a_waiting_run_asks_the_same_question_and_runs_nothing(
    checkpointer: Checkpointer,
) -> None:
    calls: list[str] = []

    async def slow(state: State) -> dict[str, Any]:
        calls.append("slow")
        await asyncio.sleep(0.01)
        return {"hello": " again"}

    def ask(state: State) -> dict[str, Any]:
        calls.append("ask")
        return {"hello": interrupt("are you sure?")}

    b = StateGraph(State)
    b.add_node("slow", slow)
    b.add_node("ask", ask)
    b.set_conditional_entry_point(lambda _: ["slow", "ask"])
    app = b.compile(checkpointer=checkpointer)
    config = {"configurable": {"thread_id": "t"}}

    async def go() -> None:
        first = await app.ainvoke({"hello": "world"}, config)
        assert first["hello"] == "world again"
        again = await app.ainvoke(None, config)
        assert again == first  # the same state and the same question (its id too)
        assert [i.value for i in again["__interrupt__"]] == ["are you sure?"]
        assert sorted(calls) == ["ask", "slow"]  # nothing ran again
        (run,) = app.runs(thread_id="t")
        assert run.status is RunStatus.INTERRUPTED  # the question is still open
        done = await app.ainvoke(Command(resume=" yes"), config)
        assert done == {"hello": "world yes again"}  # applied in node order, as LangGraph
        assert calls.count("slow") == 1

    asyncio.run(go())
    assert app.invoke(None, config) == {"hello": "world yes again"}  # finished: as it ended
