"""LangGraph docs, "Set static breakpoints at run time": ``interrupt_before`` and
``interrupt_after`` passed to ``invoke``."""

from typing_extensions import TypedDict

from oncegraph.graph import END, START, StateGraph
from oncegraph.storage.checkpointer import InMemoryCheckpointer as InMemorySaver


class State(TypedDict):
    trail: list


def node_a(state: State):
    return {"trail": state["trail"] + ["a"]}


def node_b(state: State):
    return {"trail": state["trail"] + ["b"]}


def node_c(state: State):
    return {"trail": state["trail"] + ["c"]}


builder = StateGraph(State)
builder.add_node("node_a", node_a)
builder.add_node("node_b", node_b)
builder.add_node("node_c", node_c)
builder.add_edge(START, "node_a")
builder.add_edge("node_a", "node_b")
builder.add_edge("node_b", "node_c")
builder.add_edge("node_c", END)
graph = builder.compile(checkpointer=InMemorySaver())

config = {"configurable": {"thread_id": "some_thread"}}

# Run the graph until the breakpoint
first = graph.invoke(
    {"trail": []},
    interrupt_before=["node_a"],
    interrupt_after=["node_b", "node_c"],
    config=config,
)
print(first, graph.get_state(config).next)

# Resume the graph (breakpoints given at run time hold for that call only)
second = graph.invoke(None, config=config, interrupt_after=["node_b"])
print(second, graph.get_state(config).next)
third = graph.invoke(None, config=config)
print(third, graph.get_state(config).next)

# -- checks (oncegraph's) ----------------------------------------------------------------
assert first == {"trail": []}
assert second == {"trail": ["a", "b"]}  # paused after node_b
assert third == {"trail": ["a", "b", "c"]}
