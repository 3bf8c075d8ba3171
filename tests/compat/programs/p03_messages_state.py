"""LangGraph docs, "MessagesState": subclass it to add fields."""

from langchain_core.messages import AIMessage, HumanMessage

from oncegraph.graph import START, MessagesState, StateGraph


class State(MessagesState):
    extra_field: int


def node(state: State):
    last = state["messages"][-1]
    return {"messages": [AIMessage(f"You said: {last.content}")], "extra_field": 1}


builder = StateGraph(State)
builder.add_node("node", node)
builder.add_edge(START, "node")
graph = builder.compile()

result = graph.invoke({"messages": [HumanMessage("Hi there")]})
print(result["messages"][-1].content)

# -- checks (oncegraph's) ----------------------------------------------------------------
assert isinstance(result["messages"][0], HumanMessage)
assert isinstance(result["messages"][-1], AIMessage)
assert result["messages"][-1].content == "You said: Hi there"
assert result["extra_field"] == 1
