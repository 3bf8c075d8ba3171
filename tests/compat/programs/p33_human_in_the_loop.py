"""LangGraph docs, "Human-in-the-loop" / "interrupt": the result carries
``__interrupt__`` with ``Interrupt`` objects (``.value``, ``.id``);
``Command(resume=...)`` answers; the thread id is a ``uuid.uuid4()``."""

import uuid

from typing_extensions import TypedDict

from oncegraph.graph import START, StateGraph
from oncegraph.storage.checkpointer import InMemoryCheckpointer as InMemorySaver
from oncegraph.types import Command, interrupt


class State(TypedDict):
    some_text: str


def human_node(state: State):
    value = interrupt(  # (1)!
        {
            "text_to_revise": state["some_text"]  # (2)!
        }
    )
    return {
        "some_text": value  # (3)!
    }


# Build the graph
graph_builder = StateGraph(State)
graph_builder.add_node("human_node", human_node)
graph_builder.add_edge(START, "human_node")
checkpointer = InMemorySaver()  # (4)!
graph = graph_builder.compile(checkpointer=checkpointer)
# Pass a thread ID to the graph to run it.
config = {"configurable": {"thread_id": uuid.uuid4()}}
# Run the graph until the interrupt is hit.
result = graph.invoke({"some_text": "original text"}, config=config)  # (5)!

print(result["__interrupt__"])  # (6)!

resumed = graph.invoke(Command(resume="Edited text"), config=config)  # (7)!
print(resumed)

# -- checks (oncegraph's) ----------------------------------------------------------------
(asked,) = result["__interrupt__"]
assert asked.value == {"text_to_revise": "original text"} and isinstance(asked.id, str)
assert result["some_text"] == "original text"
assert resumed == {"some_text": "Edited text"}
