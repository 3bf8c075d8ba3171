"""A node's own exception reaches the caller as itself (``except ValueError`` catches
it, as in LangGraph); oncegraph adds the run id, and the failed run continues with
``invoke(None, config)`` once the cause is fixed."""

from typing_extensions import TypedDict

from oncegraph.graph import START, StateGraph
from oncegraph.storage.checkpointer import InMemoryCheckpointer as InMemorySaver


class State(TypedDict):
    amount: int


broken = [True]


def validate(state: State):
    if broken[0]:
        raise ValueError("amount must be positive")
    return {"amount": abs(state["amount"])}


builder = StateGraph(State)
builder.add_node("validate", validate)
builder.add_edge(START, "validate")
graph = builder.compile(checkpointer=InMemorySaver())
config = {"configurable": {"thread_id": "errors"}}

try:
    graph.invoke({"amount": -5}, config)
except ValueError as exc:
    print("caught:", exc)
    caught = exc

broken[0] = False
result = graph.invoke(None, config)
print(result)

# -- checks (oncegraph's) ----------------------------------------------------------------
assert str(caught) == "amount must be positive"
assert caught.oncegraph_run_id == graph.runs(thread_id="errors")[0].run_id
assert result == {"amount": 5}
