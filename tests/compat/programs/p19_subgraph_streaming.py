"""LangGraph docs, "Stream subgraph outputs": ``stream(..., subgraphs=True)`` yields
``(namespace, chunk)``; the parent's chunks have the empty namespace."""

from typing_extensions import TypedDict

from oncegraph.graph import START, StateGraph


# Define subgraph
class SubgraphState(TypedDict):
    foo: str  # note that this key is shared with the parent graph state
    bar: str


def subgraph_node_1(state: SubgraphState):
    return {"bar": "bar"}


def subgraph_node_2(state: SubgraphState):
    return {"foo": state["foo"] + state["bar"]}


subgraph_builder = StateGraph(SubgraphState)
subgraph_builder.add_node(subgraph_node_1)
subgraph_builder.add_node(subgraph_node_2)
subgraph_builder.add_edge(START, "subgraph_node_1")
subgraph_builder.add_edge("subgraph_node_1", "subgraph_node_2")
subgraph = subgraph_builder.compile()


# Define parent graph
class ParentState(TypedDict):
    foo: str


def node_1(state: ParentState):
    return {"foo": "hi! " + state["foo"]}


builder = StateGraph(ParentState)
builder.add_node("node_1", node_1)
builder.add_node("node_2", subgraph)
builder.add_edge(START, "node_1")
builder.add_edge("node_1", "node_2")
graph = builder.compile()

seen = []
for chunk in graph.stream(
    {"foo": "foo"},
    stream_mode="updates",
    subgraphs=True,
):
    print(chunk)
    seen.append(chunk)

# -- checks (oncegraph's) ----------------------------------------------------------------
assert seen[0][0] == () and seen[-1][0] == ()
assert seen[1][0][0].startswith("node_2:") and seen[1][1] == {"subgraph_node_1": {"bar": "bar"}}
assert seen[2][1] == {"subgraph_node_2": {"foo": "hi! foobar"}}
assert seen[-1][1] == {"node_2": {"foo": "hi! foobar"}}
