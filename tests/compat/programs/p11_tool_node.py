"""LangGraph docs, "Call tools": a model node, ToolNode and a router on
``last_message.tool_calls``, streamed in "values" mode. The model is a plain function
that asks for the tool once, then answers with its result."""

from langchain_core.messages import AIMessage

from oncegraph import END, START, MessagesState, StateGraph, tool
from oncegraph.prebuilt.agent import tools_condition
from oncegraph.tools import ToolNode


@tool
def get_weather(location: str):
    """Call to get the current weather."""
    if location.lower() in ["sf", "san francisco"]:
        return "It's 60 degrees and foggy."
    else:
        return "It's 90 degrees and sunny."


tools = [get_weather]
tool_node = ToolNode(tools)


class FakeModelWithTools:
    def invoke(self, messages):
        last = messages[-1]
        if last.type == "tool":
            return AIMessage(f"The weather: {last.content}")
        call = {"name": "get_weather", "args": {"location": "sf"}, "id": "tool_call_id", "type": "tool_call"}
        return AIMessage(content="", tool_calls=[call])


model_with_tools = FakeModelWithTools()


def should_continue(state: MessagesState):
    messages = state["messages"]
    last_message = messages[-1]
    if last_message.tool_calls:
        return "tools"
    return END


def call_model(state: MessagesState):
    messages = state["messages"]
    response = model_with_tools.invoke(messages)
    return {"messages": [response]}


workflow = StateGraph(MessagesState)
workflow.add_node("agent", call_model)
workflow.add_node("tools", tool_node)
workflow.add_edge(START, "agent")
workflow.add_conditional_edges("agent", should_continue, ["tools", END])
workflow.add_edge("tools", "agent")
app = workflow.compile()

chunks = []
for chunk in app.stream({"messages": [("human", "what's the weather in sf?")]}, stream_mode="values"):
    chunk["messages"][-1].pretty_print()
    chunks.append(chunk)

# -- checks (oncegraph's) ----------------------------------------------------------------
final = chunks[-1]["messages"]
assert [m.type for m in final] == ["human", "ai", "tool", "ai"]
assert final[-1].content == "The weather: It's 60 degrees and foggy."
assert isinstance(final[1], AIMessage)
assert tools_condition({"messages": [final[1]]}) == "tools"
