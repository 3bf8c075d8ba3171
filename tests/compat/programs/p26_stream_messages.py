"""LangGraph docs, "Stream LLM tokens" with ``stream_mode="messages"``: each message a
node returns is streamed as ``(message, metadata)``, metadata naming the node. The
model is a plain function (no token stream), so whole messages arrive, as LangGraph
streams them from a model that does not stream."""

from langchain_core.messages import AIMessage

from oncegraph import START, MessagesState, StateGraph


class FakeModel:
    def invoke(self, messages):
        return AIMessage(f"Why did the {messages[-1].content} cross the road?")


llm = FakeModel()


def call_model(state: MessagesState):
    response = llm.invoke(state["messages"])
    return {"messages": [response]}


builder = StateGraph(MessagesState)
builder.add_node("call_model", call_model)
builder.add_edge(START, "call_model")
graph = builder.compile()

seen = []
for message_chunk, metadata in graph.stream(
    {"messages": [{"role": "user", "content": "ice cream"}]},
    stream_mode="messages",
):
    if message_chunk.content:
        print(message_chunk.content, end="|", flush=True)
        seen.append((message_chunk, metadata))
print()

# -- checks (oncegraph's) ----------------------------------------------------------------
((message, metadata),) = seen
assert isinstance(message, AIMessage) and message.content.endswith("cross the road?")
assert metadata["langgraph_node"] == "call_model"
