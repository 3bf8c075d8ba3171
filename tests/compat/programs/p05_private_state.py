"""LangGraph docs, "Pass private state between nodes": a node's own input schema adds
a field the graph's state does not declare; the run returns the state's fields only."""

from typing_extensions import TypedDict

from oncegraph import START, StateGraph


class OverallState(TypedDict):
    a: str


class Node1Output(TypedDict):
    private_data: str


def node_1(state: OverallState) -> Node1Output:
    output = {"private_data": "set by node_1"}
    print(f"Entered node `node_1`:\n\tInput: {state}.\n\tReturned: {output}")
    return output


class Node2Input(TypedDict):
    private_data: str


def node_2(state: Node2Input) -> OverallState:
    output = {"a": "set by node_2"}
    print(f"Entered node `node_2`:\n\tInput: {state}.\n\tReturned: {output}")
    return output


def node_3(state: OverallState) -> OverallState:
    output = {"a": "set by node_3"}
    print(f"Entered node `node_3`:\n\tInput: {state}.\n\tReturned: {output}")
    return output


builder = StateGraph(OverallState).add_sequence([node_1, node_2, node_3])
builder.add_edge(START, "node_1")
graph = builder.compile()

response = graph.invoke({"a": "set at start"})
print(f"\nOutput of graph invocation: {response}")

# -- checks (oncegraph's) ----------------------------------------------------------------
assert response == {"a": "set by node_3"}
