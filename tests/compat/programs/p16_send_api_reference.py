"""LangGraph's API reference for ``Send``: a router on START sends each subject to
``generate_joke``; the reducer gathers the jokes. Also from LangGraph's tests: a node
returns ``Command(goto=[Send(...)])``."""

import operator
from typing import Annotated

from typing_extensions import TypedDict

from oncegraph.graph import END, START, StateGraph
from oncegraph.types import Command, Send


class OverallState(TypedDict):
    subjects: list[str]
    jokes: Annotated[list[str], operator.add]


def continue_to_jokes(state: OverallState):
    return [Send("generate_joke", {"subject": s}) for s in state["subjects"]]


builder = StateGraph(OverallState)
builder.add_node("generate_joke", lambda state: {"jokes": [f"Joke about {state['subject']}"]})
builder.add_conditional_edges(START, continue_to_jokes)
builder.add_edge("generate_joke", END)
graph = builder.compile()

# Invoking with two subjects results in a generated joke for each
result = graph.invoke({"subjects": ["cats", "dogs"]})
print(result)


def fan_out(state: OverallState) -> Command:
    return Command(goto=[Send("generate_joke", {"subject": s}) for s in state["subjects"]])


builder = StateGraph(OverallState)
builder.add_node("fan_out", fan_out)
builder.add_node("generate_joke", lambda state: {"jokes": [f"Joke about {state['subject']}"]})
builder.add_edge(START, "fan_out")
graph2 = builder.compile()
result2 = graph2.invoke({"subjects": ["owls"]})
print(result2)

# -- checks (oncegraph's) ----------------------------------------------------------------
assert result == {"subjects": ["cats", "dogs"], "jokes": ["Joke about cats", "Joke about dogs"]}
assert result2["jokes"] == ["Joke about owls"]
