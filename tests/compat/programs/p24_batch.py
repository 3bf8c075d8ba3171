"""LangGraph's tests (``test_batch_two_processes_in_out``-like, on a StateGraph): ``batch``
and ``abatch`` run one graph on many inputs, results in input order."""

import asyncio

from typing_extensions import TypedDict

from oncegraph.graph import START, StateGraph


class State(TypedDict):
    value: int


def add_one(state: State):
    return {"value": state["value"] + 1}


builder = StateGraph(State)
builder.add_node("one", add_one)
builder.add_node("two", add_one)
builder.add_edge(START, "one")
builder.add_edge("one", "two")
app = builder.compile()

results = app.batch([{"value": 3}, {"value": 2}, {"value": 1}, {"value": 3}, {"value": 5}])
print(results)
aresults = asyncio.run(app.abatch([{"value": 3}, {"value": 2}]))
print(aresults)

# -- checks (oncegraph's) ----------------------------------------------------------------
assert [r["value"] for r in results] == [5, 4, 3, 5, 7]
assert aresults == [{"value": 5}, {"value": 4}]
