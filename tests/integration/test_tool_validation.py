"""Tool arguments through a real compiled graph: bad ones reach the model as an error it
can correct, good ones reach the tool coerced, and the ledger records what the model sent.

A ``ScriptedModel`` drives a ``ReactAgent`` (so its ``ToolNode``) on every run path and
on the memory and SQLite stores: turn 0 calls the tool with a wrong color, turn 1 reads
the error tool message and sends a corrected call, turn 2 answers.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
from collections.abc import Callable
from typing import Annotated, Any, TypedDict, cast

from oncegraph import END, START, StateGraph, ToolNode, add_messages, tool
from oncegraph.app import CompiledGraph
from oncegraph.ledger.keys import request_hash
from oncegraph.messages import Message, ToolSpec
from oncegraph.prebuilt.agent import ReactAgent
from oncegraph.prebuilt.models import ScriptedModel
from oncegraph.runtime.portal import run_sync
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import EffectStatus

RunPath = Callable[..., dict[str, Any]]


class S(TypedDict):
    messages: Annotated[list[Message], add_messages]


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclasses.dataclass
class Parcel:
    weight_kg: float
    fragile: bool = False


BAD_ARGS = {"color": "purple", "deliver_on": "2026-12-24", "parcel": {"weight_kg": 2}}
GOOD_ARGS = {"color": "red", "deliver_on": "2026-12-24", "parcel": {"weight_kg": "2.5"}}


def _make_tool(received: list[dict[str, Any]]) -> Callable[..., str]:
    @tool(dedup="test double: changes nothing a repeat could double")
    def paint_and_ship(color: Color, deliver_on: datetime.date, parcel: Parcel) -> str:
        """Paint a parcel and ship it.

        Args:
            color: The paint.
            deliver_on: Arrival day.
            parcel: What to ship.
        """
        received.append({"color": color, "deliver_on": deliver_on, "parcel": parcel})
        return f"shipped {color.value} on {deliver_on.isoformat()}"

    return paint_and_ship


def _correct_after_error(messages: list[Message], tools: list[ToolSpec]) -> dict[str, Any]:
    last = messages[-1]
    assert last["role"] == "tool" and last["status"] == "error", last
    assert "color: Input should be 'red' or 'blue' (got 'purple')" in last["content"]
    return {"content": "", "tool_calls": [{"name": "paint_and_ship", "args": GOOD_ARGS}]}


def _agent(checkpointer: Checkpointer, received: list[dict[str, Any]]) -> CompiledGraph:
    model = ScriptedModel.turns(
        {"content": "", "tool_calls": [{"name": "paint_and_ship", "args": BAD_ARGS}]},
        _correct_after_error,
        "Your parcel is on its way.",
    )
    return ReactAgent(
        model=model, system_prompt="You ship parcels.", tools=[_make_tool(received)]
    ).compile(checkpointer=checkpointer)


def test_a_bad_argument_goes_back_to_the_model_which_corrects_it(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    received: list[dict[str, Any]] = []
    app = _agent(checkpointer, received)
    user = {"messages": [{"role": "user", "content": "Ship it red."}]}
    out = run_path(app, user, {"thread_id": "t"})

    assert out["messages"][-1]["content"] == "Your parcel is on its way."
    tool_messages = [m for m in out["messages"] if m["role"] == "tool"]
    assert [m["status"] for m in tool_messages] == ["error", "success"]
    assert "Correct the arguments and call paint_and_ship again" in tool_messages[0]["content"]
    assert tool_messages[1]["content"] == "shipped red on 2026-12-24"

    # the body ran once, with coerced values
    assert received == [
        {
            "color": Color.RED,
            "deliver_on": datetime.date(2026, 12, 24),
            "parcel": Parcel(weight_kg=2.5),
        }
    ]
    # the ledger holds one effect (nothing for the bad call), whose request is the JSON the
    # model sent, so its hash does not depend on coercion
    effects = app.effects(thread_id="t")
    tool_effects = [e for e in effects if e.effect_type == "paint_and_ship"]
    assert len(tool_effects) == 1
    assert tool_effects[0].status is EffectStatus.COMPLETED
    assert tool_effects[0].request == GOOD_ARGS
    key = run_sync(cast(Any, checkpointer).request_hash_key(), "request_hash_key")
    assert tool_effects[0].request_hash == request_hash(GOOD_ARGS, key)


def test_the_model_sees_the_pydantic_schema(checkpointer: Checkpointer) -> None:
    received: list[dict[str, Any]] = []
    model = ScriptedModel.turns("Nothing to do.")
    tool_fn = _make_tool(received)
    app = ReactAgent(model=model, tools=[tool_fn]).compile(checkpointer=checkpointer)
    app.invoke({"messages": [{"role": "user", "content": "hi"}]}, {"thread_id": "t"})
    (spec,) = model.tools_seen[0]
    assert spec["name"] == "paint_and_ship"
    assert spec["description"] == "Paint a parcel and ship it."
    params = spec["parameters"]
    assert params["$defs"]["Color"]["enum"] == ["red", "blue"]
    assert params["properties"]["deliver_on"] == {
        "description": "Arrival day.",
        "format": "date",
        "title": "Deliver On",
        "type": "string",
    }
    assert params["$defs"]["Parcel"]["required"] == ["weight_kg"]


def test_tool_node_in_a_hand_built_graph(checkpointer: Checkpointer, run_path: RunPath) -> None:
    """Missing, unknown and non-object arguments: each an error message, none a crash."""
    received: list[dict[str, Any]] = []
    calls = [
        {"id": "c1", "name": "paint_and_ship", "args": {"color": "red"}},
        {"id": "c2", "name": "paint_and_ship", "args": {**GOOD_ARGS, "insured": True}},
        {"id": "c3", "name": "paint_and_ship", "args": "red please"},
        {"id": "c4", "name": "paint_and_ship", "args": GOOD_ARGS},
    ]

    def model(state: S) -> dict[str, Any]:
        return {"messages": [{"role": "assistant", "content": "", "tool_calls": calls}]}

    g = StateGraph(S)
    g.add_node("model", model)
    g.add_node("tools", ToolNode([_make_tool(received)]))
    g.add_edge(START, "model")
    g.add_edge("model", "tools")
    g.add_edge("tools", END)
    app = g.compile(checkpointer=checkpointer)
    out = run_path(app, {"messages": [{"role": "user", "content": "go"}]}, {"thread_id": "t"})

    by_call = {m["tool_call_id"]: m for m in out["messages"] if m["role"] == "tool"}
    assert by_call["c1"]["status"] == "error"
    assert "deliver_on: Field required" in by_call["c1"]["content"]
    assert "parcel: Field required" in by_call["c1"]["content"]
    assert by_call["c2"]["status"] == "error"
    assert "insured: Extra inputs are not permitted" in by_call["c2"]["content"]
    assert by_call["c3"]["status"] == "error"
    assert "must be a JSON object" in by_call["c3"]["content"]
    assert by_call["c4"]["status"] == "success"
    assert len(received) == 1
    assert [e.command_id.split(":")[-1] for e in app.effects(thread_id="t")] == ["c4"]

