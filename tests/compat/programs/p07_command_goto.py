"""LangGraph docs, "Combine control flow and state updates with Command": a node
annotated ``-> Command[Literal[...]]`` routes without edges; the drawing shows its
targets."""

import random
from typing import Literal

from typing_extensions import TypedDict

from oncegraph import START, Command, StateGraph


class State(TypedDict):
    foo: str


def node_a(state: State) -> Command[Literal["node_b", "node_c"]]:
    print("Called A")
    value = random.choice(["b", "c"])
    if value == "b":
        goto = "node_b"
    else:
        goto = "node_c"
    return Command(update={"foo": value}, goto=goto)


def node_b(state: State):
    print("Called B")
    return {"foo": state["foo"] + "b"}


def node_c(state: State):
    print("Called C")
    return {"foo": state["foo"] + "c"}


builder = StateGraph(State)
builder.add_edge(START, "node_a")
builder.add_node(node_a)
builder.add_node(node_b)
builder.add_node(node_c)
graph = builder.compile()

print(graph.get_graph().draw_mermaid())
result = graph.invoke({"foo": ""})
print(result)

# -- checks (oncegraph's) ----------------------------------------------------------------
assert result["foo"] in ("bb", "cc")
drawing = graph.get_graph().draw_mermaid()
assert "node_a -.-> node_b;" in drawing and "node_a -.-> node_c;" in drawing
