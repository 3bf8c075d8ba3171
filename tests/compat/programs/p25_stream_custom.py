"""LangGraph docs, "Stream custom data": a node writes progress with
``get_stream_writer()``; ``stream_mode="custom"`` yields it."""

from typing_extensions import TypedDict

from oncegraph.config import get_stream_writer
from oncegraph.graph import START, StateGraph


class State(TypedDict):
    query: str
    answer: str


def node(state: State):
    writer = get_stream_writer()  # (1)!
    writer({"custom_key": "Generating custom data inside node"})  # (2)!
    return {"answer": "some data"}


graph = StateGraph(State).add_node(node).add_edge(START, "node").compile()

inputs = {"query": "example"}

# Usage
chunks = []
for chunk in graph.stream(inputs, stream_mode="custom"):  # (3)!
    print(chunk)
    chunks.append(chunk)

both = list(graph.stream(inputs, stream_mode=["updates", "custom"]))
print(both)

# -- checks (oncegraph's) ----------------------------------------------------------------
assert chunks == [{"custom_key": "Generating custom data inside node"}]
assert both == [
    ("custom", {"custom_key": "Generating custom data inside node"}),
    ("updates", {"node": {"answer": "some data"}}),
]
