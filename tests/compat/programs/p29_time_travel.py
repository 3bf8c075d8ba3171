"""LangGraph docs, "Time travel": ``get_state_history`` lists every checkpoint, newest
first, the input one included; a snapshot's ``config`` reads one back with
``get_state``; ``update_state`` on it and ``invoke(None, new_config)`` fork the thread
(a new run of its own, here as in LangGraph the thread's head)."""

from typing import NotRequired

from typing_extensions import TypedDict

from oncegraph.graph import END, START, StateGraph
from oncegraph.storage.checkpointer import InMemoryCheckpointer as InMemorySaver


class State(TypedDict):
    topic: NotRequired[str]
    joke: NotRequired[str]


def generate_topic(state: State):
    return {"topic": "socks in the dryer"}


def write_joke(state: State):
    return {"joke": f"Why do {state['topic']} disappear? They elope!"}


# Build workflow
workflow = StateGraph(State)

# Add nodes
workflow.add_node("generate_topic", generate_topic)
workflow.add_node("write_joke", write_joke)

# Add edges to connect nodes
workflow.add_edge(START, "generate_topic")
workflow.add_edge("generate_topic", "write_joke")
workflow.add_edge("write_joke", END)

# Compile
checkpointer = InMemorySaver()
graph = workflow.compile(checkpointer=checkpointer)

config = {"configurable": {"thread_id": "time-travel"}}
state = graph.invoke({}, config)
print(state["joke"])

# The states are returned in reverse chronological order.
states = list(graph.get_state_history(config))

for state in states:
    print(state.next)
    print(state.config["configurable"]["checkpoint_id"])
    print()

# This is the state before last (states are listed in chronological order)
selected_state = states[1]
print(selected_state.next)
print(selected_state.values)
again = graph.get_state(selected_state.config)

# Update the state at that checkpoint, then resume from it: a fork of the thread
new_config = graph.update_state(selected_state.config, values={"topic": "chickens"})
print(new_config)
forked = graph.invoke(None, new_config)
print(forked["joke"])

# -- checks (oncegraph's) ----------------------------------------------------------------
assert [s.next for s in states] == [(), ("write_joke",), ("generate_topic",), ("__start__",)]
assert selected_state.values == {"topic": "socks in the dryer"}
assert again.values == selected_state.values and again.next == ("write_joke",)
assert states[-1].metadata["source"] == "input" and states[-1].values == {}
assert all(s.config["configurable"]["thread_id"] == "time-travel" for s in states)
assert new_config["configurable"]["thread_id"] == "time-travel"
assert forked == {"topic": "chickens", "joke": "Why do chickens disappear? They elope!"}
assert graph.get_state(config).values == forked  # the fork is the thread's head
assert len(list(graph.get_state_history(config))) == len(states) + 2  # the old ones kept
