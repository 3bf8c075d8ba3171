"""LangGraph docs, "Use subgraphs" / "Different state schemas": the subgraph shares no
key with the parent, so a node invokes it and maps the state in and out."""

from typing_extensions import TypedDict

from oncegraph.graph import START, StateGraph


# Define subgraph
class SubgraphState(TypedDict):
    # note that none of these keys are shared with the parent graph state
    bar: str
    baz: str


def subgraph_node_1(state: SubgraphState):
    return {"baz": "baz"}


def subgraph_node_2(state: SubgraphState):
    return {"bar": state["bar"] + state["baz"]}


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


def node_2(state: ParentState):
    # transform the state to the subgraph state
    response = subgraph.invoke({"bar": state["foo"]})
    # transform response back to the parent state
    return {"foo": response["bar"]}


builder = StateGraph(ParentState)
builder.add_node("node_1", node_1)
# note that instead of using the compiled subgraph we are using `node_2` function that is calling the subgraph
builder.add_node("node_2", node_2)
builder.add_edge(START, "node_1")
builder.add_edge("node_1", "node_2")
graph = builder.compile()

chunks = []
for chunk in graph.stream({"foo": "foo"}, subgraphs=True):
    print(chunk)
    chunks.append(chunk)

# -- checks (oncegraph's) ----------------------------------------------------------------
assert chunks[0] == ((), {"node_1": {"foo": "hi! foo"}})
inner = [(ns[0].split(":")[0], next(iter(c))) for ns, c in chunks if ns]
assert inner == [("node_2", "subgraph_node_1"), ("node_2", "subgraph_node_2")]
assert chunks[-1] == ((), {"node_2": {"foo": "hi! foobaz"}})
