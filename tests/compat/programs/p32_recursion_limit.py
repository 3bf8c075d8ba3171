"""LangGraph docs, "How to control graph recursion limit": a graph that takes exactly 3
steps (b and c run in one step) fails with ``recursion_limit`` 3 (the limit counts the
input step) and runs with 4."""

import operator
from typing import Annotated

from typing_extensions import TypedDict

from oncegraph.errors import GraphRecursionError
from oncegraph.graph import END, START, StateGraph


class State(TypedDict):
    # The operator.add reducer fn makes this append-only
    aggregate: Annotated[list, operator.add]


def node_a(state):
    return {"aggregate": ["I'm A"]}


def node_b(state):
    return {"aggregate": ["I'm B"]}


def node_c(state):
    return {"aggregate": ["I'm C"]}


def node_d(state):
    return {"aggregate": ["I'm A"]}


builder = StateGraph(State)
builder.add_node("a", node_a)
builder.add_edge(START, "a")
builder.add_node("b", node_b)
builder.add_node("c", node_c)
builder.add_node("d", node_d)
builder.add_edge("a", "b")
builder.add_edge("a", "c")
builder.add_edge("b", "d")
builder.add_edge("c", "d")
builder.add_edge("d", END)
graph = builder.compile()

hit = False
try:
    graph.invoke({"aggregate": []}, {"recursion_limit": 3})
except GraphRecursionError:
    print("Recursion Error")
    hit = True

result = graph.invoke({"aggregate": []}, {"recursion_limit": 4})
print(result)

# -- checks (oncegraph's) ----------------------------------------------------------------
assert hit
assert result == {"aggregate": ["I'm A", "I'm B", "I'm C", "I'm A"]}
