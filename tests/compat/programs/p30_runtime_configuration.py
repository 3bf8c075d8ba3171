"""LangGraph docs, "Add runtime configuration": a node reads
``config["configurable"]["user_id"]``; a router that takes ``(state, config)`` reads it
too."""

from typing_extensions import TypedDict

from oncegraph.graph import END, START, StateGraph


class State(TypedDict):
    greeting: str


def node(state: State, config):
    user_id = config["configurable"]["user_id"]
    return {"greeting": f"hello {user_id} (step {config['metadata']['langgraph_step']})"}


def route(state: State, config) -> str:
    if config["configurable"].get("vip"):
        return "vip_lounge"
    return END


def vip_lounge(state: State):
    return {"greeting": state["greeting"] + ", welcome to the lounge"}


builder = StateGraph(State)
builder.add_node("node", node)
builder.add_node("vip_lounge", vip_lounge)
builder.add_edge(START, "node")
builder.add_conditional_edges("node", route)
graph = builder.compile()

plain = graph.invoke({}, {"configurable": {"user_id": "user_123"}})
print(plain)
vip = graph.invoke({}, {"configurable": {"user_id": "user_456", "vip": True}})
print(vip)

# -- checks (oncegraph's) ----------------------------------------------------------------
assert plain == {"greeting": "hello user_123 (step 1)"}
assert vip == {"greeting": "hello user_456 (step 1), welcome to the lounge"}
