"""LangGraph docs, "Create a sequence of steps": add_sequence, then invoke."""

from typing_extensions import TypedDict

from oncegraph import START, StateGraph


class State(TypedDict):
    value_1: str
    value_2: int


def step_1(state: State):
    return {"value_1": "a"}


def step_2(state: State):
    current_value_1 = state["value_1"]
    return {"value_1": f"{current_value_1} b"}


def step_3(state: State):
    return {"value_2": 10}


builder = StateGraph(State).add_sequence([step_1, step_2, step_3])
builder.add_edge(START, "step_1")
graph = builder.compile()

result = graph.invoke({"value_1": "c"})
print(result)

# -- checks (oncegraph's) ----------------------------------------------------------------
assert result == {"value_1": "a b", "value_2": 10}
assert "step_1 --> step_2;" in graph.get_graph().draw_mermaid()
