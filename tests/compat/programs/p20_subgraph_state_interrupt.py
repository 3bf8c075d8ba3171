"""LangGraph docs, "View subgraph state": an ``interrupt`` inside a subgraph pauses the
parent; ``get_state(config, subgraphs=True)`` shows the subgraph's state in the task;
``Command(resume=...)`` goes on."""

from typing_extensions import TypedDict

from oncegraph.graph import START, StateGraph
from oncegraph.storage.checkpointer import InMemoryCheckpointer as MemorySaver
from oncegraph.types import Command, interrupt


class State(TypedDict):
    foo: str


# Subgraph


def subgraph_node_1(state: State):
    value = interrupt("Provide value:")
    return {"foo": state["foo"] + value}


subgraph_builder = StateGraph(State)
subgraph_builder.add_node(subgraph_node_1)
subgraph_builder.add_edge(START, "subgraph_node_1")

subgraph = subgraph_builder.compile()

# Parent graph

builder = StateGraph(State)
builder.add_node("node_1", subgraph)
builder.add_edge(START, "node_1")

checkpointer = MemorySaver()
graph = builder.compile(checkpointer=checkpointer)

config = {"configurable": {"thread_id": "1"}}

first = graph.invoke({"foo": ""}, config)
parent_state = graph.get_state(config)
subgraph_state = graph.get_state(config, subgraphs=True).tasks[0].state

print(first["__interrupt__"][0].value)
print(parent_state.next, subgraph_state.next)

# resume the subgraph
result = graph.invoke(Command(resume="bar"), config)
print(result)

# -- checks (oncegraph's) ----------------------------------------------------------------
assert first["__interrupt__"][0].value == "Provide value:"
assert parent_state.next == ("node_1",)
assert subgraph_state.next == ("subgraph_node_1",)
assert subgraph_state.values == {"foo": ""}
assert result == {"foo": "bar"}
