"""Persistence as LangGraph's docs write it (``thread_id`` a ``uuid.uuid4()``), with a
dataclass state holding a datetime and an Enum: a second compiled graph on the same
checkpointer reads them back with their types."""

import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import Enum

from oncegraph import START, StateGraph
from oncegraph.storage.checkpointer import InMemoryCheckpointer as InMemorySaver


class Status(Enum):
    NEW = "new"
    DONE = "done"


@dataclass
class Ticket:
    title: str
    status: Status = Status.NEW
    opened: datetime | None = None
    notes: list[str] = field(default_factory=list)


def close(state: Ticket):
    return {"status": Status.DONE, "notes": state.notes + [f"closed {state.title}"]}


builder = StateGraph(Ticket)
builder.add_node("close", close)
builder.add_edge(START, "close")
checkpointer = InMemorySaver()
graph = builder.compile(checkpointer=checkpointer)

config = {"configurable": {"thread_id": uuid.uuid4()}}
opened = datetime(2024, 4, 1, 9, 30, tzinfo=timezone.utc)
print(graph.invoke({"title": "printer", "opened": opened}, config))

snapshot = builder.compile(checkpointer=checkpointer).get_state(config)
print(snapshot.values)

# -- checks (oncegraph's) ----------------------------------------------------------------
assert snapshot.values["status"] is Status.DONE
assert snapshot.values["opened"] == opened and isinstance(snapshot.values["opened"], datetime)
assert snapshot.values["notes"] == ["closed printer"]
