"""LangGraph docs, "Map-reduce branches" with ``Send``: one joke per subject, each made
by its own task with its own payload, then the best one picked. The model is a plain
function."""

import operator
from typing import Annotated

from typing_extensions import TypedDict

from oncegraph import END, START, StateGraph
from oncegraph.types import Send


class OverallState(TypedDict):
    topic: str
    subjects: list
    jokes: Annotated[list, operator.add]
    best_selected_joke: str


class JokeState(TypedDict):
    subject: str


def generate_topics(state: OverallState):
    return {"subjects": ["lions", "elephants", "penguins"]}


def generate_joke(state: JokeState):
    joke_map = {
        "lions": "Why don't lions like fast food? Because they can't catch it!",
        "elephants": "Why don't elephants use computers? They're afraid of the mouse!",
        "penguins": "Why don't penguins like talking to strangers at parties? Because they find it hard to break the ice.",
    }
    return {"jokes": [joke_map[state["subject"]]]}


def continue_to_jokes(state: OverallState):
    # We will return a list of `Send` objects
    # Each `Send` object consists of the name of a node in the graph
    # as well as the state to send to that node
    return [Send("generate_joke", {"subject": s}) for s in state["subjects"]]


def best_joke(state: OverallState):
    return {"best_selected_joke": "penguins"}


builder = StateGraph(OverallState)
builder.add_node("generate_topics", generate_topics)
builder.add_node("generate_joke", generate_joke)
builder.add_node("best_joke", best_joke)
builder.add_edge(START, "generate_topics")
builder.add_conditional_edges("generate_topics", continue_to_jokes, ["generate_joke"])
builder.add_edge("generate_joke", "best_joke")
builder.add_edge("best_joke", END)
graph = builder.compile()

steps = []
for step in graph.stream({"topic": "animals"}):
    print(step)
    steps.append(step)

# -- checks (oncegraph's) ----------------------------------------------------------------
assert [next(iter(s)) for s in steps] == [
    "generate_topics",
    "generate_joke",
    "generate_joke",
    "generate_joke",
    "best_joke",
]
assert steps[-1] == {"best_joke": {"best_selected_joke": "penguins"}}
result = graph.invoke({"topic": "animals"})
assert len(result["jokes"]) == 3 and result["jokes"][0].startswith("Why don't lions")
