"""LangGraph docs, "Add retry policies": ``add_node(..., retry_policy=RetryPolicy(...))``
retries a node that raised; a flaky lookup stands in for the docs' database call."""

import operator
from typing import Annotated

from typing_extensions import TypedDict

from oncegraph.graph import END, START, StateGraph
from oncegraph.types import RetryPolicy

attempts = []


class State(TypedDict):
    messages: Annotated[list, operator.add]


def query_database(state: State):
    attempts.append("query")
    if len(attempts) < 3:
        raise ConnectionError("database is busy")  # a transient error: retried
    return {"messages": ["Artist: AC/DC"]}


def call_model(state: State):
    return {"messages": [f"model saw {state['messages'][-1]}"]}


builder = StateGraph(State)
builder.add_node(
    "query_database",
    query_database,
    retry_policy=RetryPolicy(retry_on=ConnectionError, initial_interval=0.01, jitter=False),
)
builder.add_node("model", call_model, retry_policy=RetryPolicy(max_attempts=5))
builder.add_edge(START, "model")
builder.add_edge("model", "query_database")
builder.add_edge("query_database", END)
graph = builder.compile()

result = graph.invoke({"messages": ["hi"]})
print(result)

# -- checks (oncegraph's) ----------------------------------------------------------------
assert attempts == ["query", "query", "query"]
assert result["messages"] == ["hi", "model saw hi", "Artist: AC/DC"]
