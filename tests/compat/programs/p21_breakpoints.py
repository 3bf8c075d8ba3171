"""LangGraph docs, "Use breakpoints": ``compile(interrupt_before=[...])`` pauses the run
before a node; ``invoke(None, thread)`` (or ``stream(None, ...)``) continues it."""

from typing_extensions import TypedDict

from oncegraph.graph import END, START, StateGraph
from oncegraph.storage.checkpointer import InMemoryCheckpointer as InMemorySaver


class State(TypedDict):
    input: str


def step_1(state):
    print("---Step 1---")
    pass


def step_2(state):
    print("---Step 2---")
    pass


def step_3(state):
    print("---Step 3---")
    pass


builder = StateGraph(State)
builder.add_node("step_1", step_1)
builder.add_node("step_2", step_2)
builder.add_node("step_3", step_3)
builder.add_edge(START, "step_1")
builder.add_edge("step_1", "step_2")
builder.add_edge("step_2", "step_3")
builder.add_edge("step_3", END)

# Set up a checkpointer
checkpointer = InMemorySaver()  # (1)!

graph = builder.compile(
    checkpointer=checkpointer,  # (2)!
    interrupt_before=["step_3"],  # (3)!
)

# Input
initial_input = {"input": "hello world"}

# Thread
thread = {"configurable": {"thread_id": "1"}}

# Run the graph until the first interruption
seen = []
for event in graph.stream(initial_input, thread, stream_mode="values"):
    print(event)
    seen.append(event)

paused = graph.get_state(thread)
print(paused.next)

# This will run until the breakpoint
# You can get the state of the graph at this point
print(graph.get_state(thread))

# You can continue the graph execution by passing in `None` for the input
for event in graph.stream(None, thread, stream_mode="values"):
    print(event)
    seen.append(event)

# -- checks (oncegraph's) ----------------------------------------------------------------
assert paused.next == ("step_3",)
assert seen == [{"input": "hello world"}] * 5  # a resumed stream starts with the state
assert graph.get_state(thread).next == ()
