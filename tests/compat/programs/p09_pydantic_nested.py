"""LangGraph docs, "Use Pydantic models for graph state / Serialization": a nested
model given as a dict is validated into the model, and stays one after storage."""

from pydantic import BaseModel

from oncegraph import END, START, StateGraph
from oncegraph.storage.checkpointer import InMemoryCheckpointer as InMemorySaver


class NestedModel(BaseModel):
    value: str


class ComplexState(BaseModel):
    text: str
    count: int
    nested: NestedModel


def process_node(state: ComplexState):
    print(f"Input state type: {type(state)}")
    print(f"Nested type: {type(state.nested)}")
    return {"text": state.text + " processed", "count": state.count + 1}


builder = StateGraph(ComplexState)
builder.add_node("process", process_node)
builder.add_edge(START, "process")
builder.add_edge("process", END)
checkpointer = InMemorySaver()
graph = builder.compile(checkpointer=checkpointer)

config = {"configurable": {"thread_id": "1"}}
result = graph.invoke({"text": "hello", "count": 0, "nested": {"value": "test"}}, config)
print(f"Output: {result}")

# -- checks (oncegraph's) ----------------------------------------------------------------
assert result["text"] == "hello processed" and result["count"] == 1
stored = builder.compile(checkpointer=checkpointer).get_state(config).values
assert type(stored["nested"]) is NestedModel and stored["nested"].value == "test"
