"""LangGraph's tests (``test_send_react_interrupt``-like): an agent's tool calls are sent
one ``Send`` each, with the tool call as the payload; the results come back as tool
messages. The model is a plain function."""

from langchain_core.messages import AIMessage, ToolMessage

from oncegraph import END, START, MessagesState, StateGraph
from oncegraph.types import Send


class FakeModel:
    def invoke(self, messages):
        if isinstance(messages[-1], ToolMessage):
            return AIMessage("answer")
        return AIMessage(
            "",
            tool_calls=[
                {"id": "tool1", "name": "foo", "args": {"hi": 1}},
                {"id": "tool2", "name": "foo", "args": {"hi": 2}},
            ],
        )


model = FakeModel()


def agent(state: MessagesState):
    return {"messages": [model.invoke(state["messages"])]}


def route(state: MessagesState):
    last = state["messages"][-1]
    if isinstance(last, AIMessage) and last.tool_calls:
        return [Send("foo", call) for call in last.tool_calls]
    return END


def foo(call):
    return {"messages": [ToolMessage(f"{call['args']['hi']} done", tool_call_id=call["id"])]}


builder = StateGraph(MessagesState)
builder.add_node(agent)
builder.add_node(foo)
builder.add_edge(START, "agent")
builder.add_conditional_edges("agent", route)
builder.add_edge("foo", "agent")
graph = builder.compile()

result = graph.invoke({"messages": [("user", "what's the weather?")]})
for message in result["messages"]:
    print(message.type, message.content)

# -- checks (oncegraph's) ----------------------------------------------------------------
assert [m.type for m in result["messages"]] == ["human", "ai", "tool", "tool", "ai"]
assert [m.content for m in result["messages"][2:4]] == ["1 done", "2 done"]
