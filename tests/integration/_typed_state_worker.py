"""A worker program for the typed-state tests: typed state across a SIGKILL.

Usage::

    python _typed_state_worker.py <sqlite|postgres> <path | dsn> <work dir> <start|resume|read>

The graph is ``write -> check``. ``write`` returns a dataclass, a pydantic model, a
``datetime``, a ``date``, an ``Enum``, a ``UUID``, a ``Decimal``, ``bytes``, a tuple, a
set, a TypedDict holding a ``datetime`` and dataclasses, dataclasses appended to a log
channel, and LangChain messages (an ``AIMessage`` with tool calls) in a LangChain-typed
message field. ``check`` records the type of every field as it reads it
(``state["item"].sku`` style) and, with ``start``, writes ``<work dir>/check.marker`` and
blocks until the test SIGKILLs the process. ``resume`` continues the run in a fresh
process; ``read`` only reads the thread's state. Both print one JSON line: the type of
every value, whether the values equal the ones written, and what ``check`` saw.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import json
import operator
import sys
import threading
import uuid
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pydantic
import typing_extensions
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage

from oncegraph import END, START, StateGraph, add_messages
from oncegraph.storage.checkpointer import PgCheckpointer, SqliteCheckpointer

THREAD = {"thread_id": "typed-thread"}


@dataclasses.dataclass(frozen=True)
class Item:
    sku: str
    qty: int
    photo: bytes


class Tier(enum.Enum):
    GOLD = "gold"
    SILVER = "silver"


class Customer(pydantic.BaseModel):
    name: str
    since: datetime.date
    tier: Tier


class Shipment(typing_extensions.TypedDict):
    when: datetime.datetime
    items: list[Item]


class State(TypedDict, total=False):
    item: Item
    customer: Customer
    at: datetime.datetime
    day: datetime.date
    tier: Tier
    order_id: uuid.UUID
    price: decimal.Decimal
    blob: bytes
    pair: tuple[int, str]
    tags: set[str]
    shipment: Shipment
    events: Annotated[list[Item], operator.add]
    messages: Annotated[list[AnyMessage], add_messages]
    seen: dict[str, str]


AT = datetime.datetime(
    2024, 2, 29, 23, 59, 58, 999, tzinfo=datetime.timezone(datetime.timedelta(hours=2))
)


def written() -> dict[str, Any]:
    return {
        "item": Item("sku-1", 2, b"\x89PNG\x00\xff"),
        "customer": Customer(name="Ada", since=datetime.date(2020, 1, 31), tier=Tier.GOLD),
        "at": AT,
        "day": datetime.date(2024, 3, 1),
        "tier": Tier.SILVER,
        "order_id": uuid.UUID("12345678-1234-5678-1234-567812345678"),
        "price": decimal.Decimal("19.990"),
        "blob": bytes(range(256)),
        "pair": (7, "seven"),
        "tags": {"fragile", "gift"},
        "shipment": {"when": AT, "items": [Item("sku-2", 1, b"")]},
        "events": [Item("ev-1", 1, b"\x01"), Item("ev-2", 2, b"\x02")],
        "messages": [
            AIMessage(
                content="",
                id="ai-1",
                tool_calls=[{"id": "call_1", "name": "lookup", "args": {"sku": "sku-1"}}],
            ),
            ToolMessage(content="in stock", tool_call_id="call_1", id="tool-1"),
        ],
    }


def _types(values: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {k: type(v).__name__ for k, v in values.items()}
    out["shipment.when"] = type(values["shipment"]["when"]).__name__
    out["shipment.items[0]"] = type(values["shipment"]["items"][0]).__name__
    out["events[0]"] = type(values["events"][0]).__name__
    out["customer.tier"] = type(values["customer"].tier).__name__
    out["messages"] = [type(m).__name__ for m in values["messages"]]
    return out


def build(backend: str, where: str, workdir: Path, block: bool) -> Any:
    def write(state: State) -> dict[str, Any]:
        return written()

    def check(state: State) -> dict[str, Any]:
        # Attribute access as user code does it: raises after a restart if types changed.
        seen = {
            "item.sku": state["item"].sku,
            "customer.tier": state["customer"].tier.value,
            "at.year": str(state["at"].year),
            "shipment.when.tz": str(state["shipment"]["when"].utcoffset()),
            "events[1].photo": state["events"][1].photo.hex(),
            "messages": ",".join(type(m).__name__ for m in state["messages"]),
            "tool call": state["messages"][1].tool_calls[0]["name"]
            + ":"
            + state["messages"][2].tool_call_id,
        }
        if block:
            marker = workdir / "check.marker"
            marker.with_suffix(".tmp").write_text("ready")
            marker.with_suffix(".tmp").replace(marker)
            threading.Event().wait()  # until the test SIGKILLs this process
        return {"seen": {k: str(v) for k, v in seen.items()}}

    g = StateGraph(State)
    g.add_node("write", write)
    g.add_node("check", check)
    g.add_edge(START, "write")
    g.add_edge("write", "check")
    g.add_edge("check", END)
    store = PgCheckpointer(where) if backend == "postgres" else SqliteCheckpointer(where)
    return g.compile(checkpointer=store)


def main() -> None:
    backend, where, workdir, action = sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4]
    app = build(backend, where, workdir, block=action == "start")
    print("STORE", type(app.checkpointer).__name__, file=sys.stderr)
    if action == "start":
        app.invoke({"messages": [HumanMessage("where is my order?", id="h-1")]}, THREAD)
        raise SystemExit("unreachable: check blocks until killed")
    if action == "resume":
        values = app.invoke(None, THREAD)
    else:
        values = dict(app.get_state(THREAD).values)
    expected = written()
    expected["messages"] = [HumanMessage("where is my order?", id="h-1"), *expected["messages"]]
    compared = {k: v for k, v in values.items() if k != "seen"}
    print(
        json.dumps(
            {
                "types": _types(values),
                "equal": compared == expected,
                "different": sorted(k for k in expected if compared.get(k) != expected[k]),
                "seen": values.get("seen"),
            }
        )
    )


if __name__ == "__main__":
    main()
