"""LangGraph docs, "Define input and output schemas": invoke returns only the output
schema's fields."""

from typing_extensions import TypedDict

from oncegraph import END, START, StateGraph


class InputState(TypedDict):
    question: str


class OutputState(TypedDict):
    answer: str


class OverallState(InputState, OutputState):
    pass


def answer_node(state: InputState):
    return {"answer": "bye", "question": state["question"]}


builder = StateGraph(OverallState, input_schema=InputState, output_schema=OutputState)
builder.add_node(answer_node)
builder.add_edge(START, "answer_node")
builder.add_edge("answer_node", END)
graph = builder.compile()

result = graph.invoke({"question": "hi"})
print(result)

# -- checks (oncegraph's) ----------------------------------------------------------------
assert result == {"answer": "bye"}
