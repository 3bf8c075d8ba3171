"""LangGraph docs, "Stream debug output": ``stream_mode="debug"`` yields checkpoint, task
and task-result events, each ``{"step", "timestamp", "type", "payload"}`` (checkpoint
events only from a graph with a checkpointer)."""

from typing_extensions import TypedDict

from oncegraph.graph import END, START, StateGraph


class State(TypedDict):
    topic: str
    joke: str


def refine_topic(state: State):
    return {"topic": state["topic"] + " and cats"}


def generate_joke(state: State):
    return {"joke": f"This is a joke about {state['topic']}"}


graph = (
    StateGraph(State)
    .add_node(refine_topic)
    .add_node(generate_joke)
    .add_edge(START, "refine_topic")
    .add_edge("refine_topic", "generate_joke")
    .add_edge("generate_joke", END)
    .compile()
)

events = []
for chunk in graph.stream({"topic": "ice cream"}, stream_mode="debug"):
    print(chunk["type"], chunk["step"], chunk["payload"].get("name", ""))
    events.append(chunk)

# -- checks (oncegraph's) ----------------------------------------------------------------
# compiled without a checkpointer: no checkpoint is kept, so none is streamed (as LangGraph)
assert [e["type"] for e in events] == ["task", "task_result", "task", "task_result"]
assert [e["step"] for e in events] == [1, 1, 2, 2]
assert events[1]["payload"]["result"] == {"topic": "ice cream and cats"}
assert events[-1]["payload"]["result"] == {"joke": "This is a joke about ice cream and cats"}
