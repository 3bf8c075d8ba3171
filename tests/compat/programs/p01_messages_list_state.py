"""LangGraph docs, "Use the graph API / Define and update state": a message list
without a reducer, updated by returning the whole list. Read back by a second compiled
graph from the checkpointer: still LangChain messages."""

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from typing_extensions import TypedDict

from oncegraph import StateGraph
from oncegraph.storage.checkpointer import InMemoryCheckpointer as InMemorySaver


class State(TypedDict):
    messages: list[AnyMessage]
    extra_field: int


def node(state: State):
    messages = state["messages"]
    new_message = AIMessage("Hello!")
    return {"messages": messages + [new_message], "extra_field": 10}


builder = StateGraph(State)
builder.add_node(node)
builder.set_entry_point("node")
checkpointer = InMemorySaver()
graph = builder.compile(checkpointer=checkpointer)

config = {"configurable": {"thread_id": "1"}}
result = graph.invoke({"messages": [HumanMessage("Hi")]}, config)
for message in result["messages"]:
    message.pretty_print()

# -- checks (oncegraph's) ----------------------------------------------------------------
assert result["extra_field"] == 10
assert [type(m) for m in result["messages"]] == [HumanMessage, AIMessage]
again = builder.compile(checkpointer=checkpointer).get_state(config).values
assert again["messages"] == result["messages"]
assert isinstance(again["messages"][1], AIMessage)
