"""LangGraph docs, "Process state updates with reducers": ``operator.add`` on a list."""

from operator import add
from typing import Annotated

from typing_extensions import TypedDict

from oncegraph import START, StateGraph


class State(TypedDict):
    foo: int
    bar: Annotated[list[str], add]


def node_a(state: State):
    return {"foo": 2, "bar": ["a"]}


def node_b(state: State):
    return {"bar": ["b"]}


builder = StateGraph(State)
builder.add_node(node_a)
builder.add_node(node_b)
builder.add_edge(START, "node_a")
builder.add_edge("node_a", "node_b")
graph = builder.compile()

result = graph.invoke({"foo": 1, "bar": ["hi"]})
print(result)

# -- checks (oncegraph's) ----------------------------------------------------------------
assert result == {"foo": 2, "bar": ["hi", "a", "b"]}
