"""LangGraph docs, "Stream outputs": ``stream()`` defaults to ``"updates"`` (one chunk
per node, no chunk for the input); ``"values"`` yields the whole state after each step;
several modes yield ``(mode, chunk)``."""

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

updates = []
for chunk in graph.stream({"topic": "ice cream"}):
    print(chunk)
    updates.append(chunk)

values = list(graph.stream({"topic": "ice cream"}, stream_mode="values"))
print(values)

modes = []
for mode, chunk in graph.stream({"topic": "ice cream"}, stream_mode=["updates", "values"]):
    print(f"Stream mode: {mode}")
    print(chunk)
    modes.append(mode)

# -- checks (oncegraph's) ----------------------------------------------------------------
assert updates == [
    {"refine_topic": {"topic": "ice cream and cats"}},
    {"generate_joke": {"joke": "This is a joke about ice cream and cats"}},
]
assert values[0] == {"topic": "ice cream"} and len(values) == 3
assert modes == ["values", "updates", "values", "updates", "values"]
