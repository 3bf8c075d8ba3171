"""How a tool declares its compensation, and how a compensation's record names what it
compensates: ``@tool(compensate=...)`` with a Tool, a function or a tool's name; the
links read off command ids; ``acompensate`` on the memory store, with the compensating
tool named by a string (a tool of the same ToolNode)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from oncegraph import CompensationRequest, Tool, tool
from oncegraph.errors import ConfigError
from oncegraph.prebuilt.agent import ReactAgent
from oncegraph.prebuilt.models.scripted import ScriptedModel
from oncegraph.runs import compensating
from oncegraph.storage.checkpointer import InMemoryCheckpointer
from oncegraph.storage.records import EffectClass, EffectRecord, EffectStatus


def _undo(original: CompensationRequest) -> str:
    """Undo it."""
    return f"undid {original.effect_id}"


def test_compensate_takes_a_tool_a_function_or_a_name() -> None:
    undo = tool(effect="irreversible")(_undo)

    @tool(compensate=undo)
    def a(x: int) -> int:
        """A."""
        return x

    @tool(compensate=_undo)
    def b(x: int) -> int:
        """B."""
        return x

    @tool(compensate=" undo ")
    def c(x: int) -> int:
        """C."""
        return x

    assert a.compensate is undo
    assert isinstance(b.compensate, Tool) and b.compensate.name == "_undo"
    assert b.compensate.effect is EffectClass.WRITE  # a function made a tool: its own class
    assert c.compensate == "undo"
    for bad in ("", 3):
        with pytest.raises(ConfigError, match="compensate="):
            tool(compensate=bad, name="d", description="")(lambda x: x)  # type: ignore[arg-type]


def _record(command_id: str, effect_id: str = "e") -> EffectRecord:
    return EffectRecord(
        effect_id=effect_id,
        effect_type="t",
        effect_class=EffectClass.WRITE,
        command_id=command_id,
        run_id="r",
        thread_id="th",
        node="n",
        request_hash="h",
        status=EffectStatus.COMPLETED,
    )


def test_a_compensation_names_what_it_compensates_in_its_command_id() -> None:
    first = _record(compensating.command_for("abc", 1), "c1")
    second = _record(compensating.command_for("abc", 2), "c2")
    other = _record("3", "x")
    assert compensating.compensates(first) == "abc" and compensating.number_of(second) == 2
    assert compensating.compensates(other) is None and compensating.number_of(other) == 0
    assert compensating.compensates(_record("compensate:abc:x")) is None  # not a number
    assert compensating.links([second, other, first]) == {"abc": ("c1", "c2")}


def test_acompensate_with_a_compensating_tool_named_by_a_string() -> None:
    cancelled: list[Any] = []

    @tool(effect="write", dedup="one reservation per id")
    def cancel(original: CompensationRequest) -> str:
        """Cancel a reservation."""
        cancelled.append(original.result)
        return "cancelled"

    @tool(effect="write", dedup="one reservation per id", compensate="cancel")
    def reserve(room: str) -> str:
        """Reserve a room."""
        return f"res-{room}"

    call = {"id": "c1", "name": "reserve", "args": {"room": "12"}}
    model = ScriptedModel.turns({"content": "", "tool_calls": [call]}, "Reserved.")
    app = ReactAgent(model=model, tools=[reserve, cancel]).compile(
        checkpointer=InMemoryCheckpointer()
    )

    async def go() -> None:
        await app.ainvoke(
            {"messages": [{"role": "user", "content": "room 12"}]}, {"thread_id": "t"}
        )
        (made,) = [e for e in await app.aeffects(thread_id="t") if e.effect_type == "reserve"]
        done = await app.acompensate(made.effect_id, actor="ana", reason="guest cancelled")
        assert done.effect.effect_type == "cancel" and done.effect.result == "cancelled"
        assert [e.effect_id for e in await app.acompensations(made.effect_id)] == [
            done.effect.effect_id
        ]

    asyncio.run(go())
    assert cancelled == ["res-12"]
