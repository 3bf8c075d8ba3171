"""LangGraph docs, "Delete messages": RemoveMessage in a MessagesState graph, streamed
in "values" mode, on a checkpointer across two turns. The model is a plain function."""

from langchain_core.messages import AIMessage, RemoveMessage

from oncegraph import START, MessagesState, StateGraph
from oncegraph.storage.checkpointer import InMemoryCheckpointer as InMemorySaver


class FakeModel:
    def invoke(self, messages):
        return AIMessage(f"reply to {messages[-1].content!r} (I see {len(messages)})")


model = FakeModel()


def delete_messages(state):
    messages = state["messages"]
    if len(messages) > 2:
        # remove the earliest two messages
        return {"messages": [RemoveMessage(id=m.id) for m in messages[:2]]}


def call_model(state: MessagesState):
    response = model.invoke(state["messages"])
    return {"messages": response}


builder = StateGraph(MessagesState)
builder.add_sequence([call_model, delete_messages])
builder.add_edge(START, "call_model")

checkpointer = InMemorySaver()
app = builder.compile(checkpointer=checkpointer)

config = {"configurable": {"thread_id": "1"}}
seen = []
for event in app.stream(
    {"messages": [{"role": "user", "content": "hi! I'm bob"}]}, config, stream_mode="values"
):
    seen.append([(message.type, message.content) for message in event["messages"]])
    print(seen[-1])

for event in app.stream(
    {"messages": [{"role": "user", "content": "what's my name?"}]}, config, stream_mode="values"
):
    seen.append([(message.type, message.content) for message in event["messages"]])
    print(seen[-1])

# -- checks (oncegraph's) ----------------------------------------------------------------
final = [(m.type, m.content) for m in app.get_state(config).values["messages"]]
assert final == seen[-1]
assert [t for t, _ in final] == ["human", "ai"]
assert final[0][1] == "what's my name?" and "I see 3" in final[1][1]
