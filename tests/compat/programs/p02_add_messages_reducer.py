"""LangGraph docs, "Use the graph API / Process state updates with reducers": with
``add_messages``, dict messages in the input become LangChain messages."""

from typing import Annotated

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from typing_extensions import TypedDict

from oncegraph import START, StateGraph
from oncegraph.graph import add_messages


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    extra_field: int


def node(state: State):
    new_message = AIMessage("Hello!")
    return {"messages": [new_message], "extra_field": 10}


graph = StateGraph(State).add_node(node).add_edge(START, "node").compile()

input_message = {"role": "user", "content": "Hi"}
result = graph.invoke({"messages": [input_message]})
for message in result["messages"]:
    message.pretty_print()

# -- checks (oncegraph's) ----------------------------------------------------------------
assert isinstance(result["messages"][0], HumanMessage)
assert result["messages"][0].content == "Hi" and result["messages"][0].id
assert isinstance(result["messages"][1], AIMessage)
