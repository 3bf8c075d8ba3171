"""LangGraph docs, "Use Pydantic models for graph state": a run validates its input."""

from pydantic import BaseModel

from oncegraph import END, START, StateGraph


class OverallState(BaseModel):
    a: str


def node(state: OverallState):
    return {"a": "goodbye"}


builder = StateGraph(OverallState)
builder.add_node(node)
builder.add_edge(START, "node")
builder.add_edge("node", END)
graph = builder.compile()

print(graph.invoke({"a": "hello"}))

try:
    graph.invoke({"a": 123})
except Exception as e:
    print("An exception was raised because `a` is an integer rather than a string.")
    print(e)
    raised = e
else:
    raised = None

# -- checks (oncegraph's) ----------------------------------------------------------------
assert graph.invoke({"a": "hello"}) == {"a": "goodbye"}
assert raised is not None and "a" in str(raised)
