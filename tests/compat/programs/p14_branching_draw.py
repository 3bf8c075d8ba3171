"""LangGraph docs, "Conditional branching": a router with a ``Literal`` return type,
and the graph drawn as Mermaid text."""

import operator
from typing import Annotated, Literal

from typing_extensions import TypedDict

from oncegraph import END, START, StateGraph


class State(TypedDict):
    aggregate: Annotated[list, operator.add]
    which: str


def a(state: State):
    print(f'Adding "A" to {state["aggregate"]}')
    return {"aggregate": ["A"]}


def b(state: State):
    print(f'Adding "B" to {state["aggregate"]}')
    return {"aggregate": ["B"]}


def c(state: State):
    print(f'Adding "C" to {state["aggregate"]}')
    return {"aggregate": ["C"]}


def route_bc(state: State) -> Literal["b", "c"]:
    if state["which"] == "b":
        return "b"
    return "c"


builder = StateGraph(State)
builder.add_node(a)
builder.add_node(b)
builder.add_node(c)
builder.add_edge(START, "a")
builder.add_conditional_edges("a", route_bc)
builder.add_edge("b", END)
builder.add_edge("c", END)
graph = builder.compile()

print(graph.get_graph().draw_mermaid())
result = graph.invoke({"aggregate": [], "which": "c"})
print(result)

# -- checks (oncegraph's) ----------------------------------------------------------------
assert result == {"aggregate": ["A", "C"], "which": "c"}
drawing = graph.get_graph().draw_mermaid()
assert "a -.-> b;" in drawing and "a -.-> c;" in drawing and "c --> __end__;" in drawing
assert {(e.source, e.target) for e in graph.get_graph().edges} >= {("a", "b"), ("a", "c")}
