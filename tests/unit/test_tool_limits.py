"""Limits on what a model can fan out (``ToolLimits``): a turn over the per-turn or
per-run cap runs nothing and the model reads why; concurrency bounds calls in flight;
approval is never asked for a turn that could not run anyway."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from oncegraph import tool
from oncegraph.errors import ConfigError
from oncegraph.prebuilt.agent import ReactAgent
from oncegraph.prebuilt.models import ScriptedModel
from oncegraph.storage.checkpointer import SqliteCheckpointer
from oncegraph.tools import ToolLimits

T = {"thread_id": "t-limits"}


class Refunds:
    def __init__(self) -> None:
        self.ran = 0
        self.in_flight = 0
        self.most = 0
        self.lock = threading.Lock()

        @tool(effect="irreversible")
        async def refund(order_id: str) -> str:
            """Refund an order."""
            with self.lock:
                self.ran += 1
                self.in_flight += 1
                self.most = max(self.most, self.in_flight)
            await asyncio.sleep(0.01)
            with self.lock:
                self.in_flight -= 1
            return f"refunded {order_id}"

        self.tool = refund


def fan_out(n: int) -> dict[str, Any]:
    return {
        "tool_calls": [
            {"id": f"c{i}", "name": "refund", "args": {"order_id": str(i)}} for i in range(n)
        ]
    }


def user(text: str = "refund everything") -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


def tool_errors(out: dict[str, Any]) -> list[str]:
    return [
        m["content"]
        for m in out["messages"]
        if m.get("role") == "tool" and m.get("status") == "error"
    ]


def test_a_2000_call_turn_is_refused_by_the_default_cap_and_the_model_is_told(
    tmp_path: Path,
) -> None:
    refunds = Refunds()
    model = ScriptedModel([fan_out(2000), "I could not do that many at once."])
    app = ReactAgent(model, tools=[refunds.tool]).compile(SqliteCheckpointer(tmp_path / "l.db"))
    out = app.invoke(user(), T)
    assert refunds.ran == 0, "nothing of an over-cap turn runs"
    errors = tool_errors(out)
    assert len(errors) == 2000, "every call is answered, so the transcript stays valid"
    assert "2000 tool calls" in errors[0] and "at most 64" in errors[0]
    second_turn = model.calls[1]
    assert any("at most 64" in str(m.get("content")) for m in second_turn), "the model read why"
    assert app.effects(thread_id=T["thread_id"]) and all(
        e.effect_type.startswith("model:") for e in app.effects(thread_id=T["thread_id"])
    ), "no tool effect was even recorded"
    app.close()


def test_per_run_cap_counts_the_turns_since_the_user_message(tmp_path: Path) -> None:
    refunds = Refunds()
    model = ScriptedModel([fan_out(3), fan_out(3), "done", fan_out(3), "done again"])
    limits = ToolLimits(per_turn=10, per_run=5)
    app = ReactAgent(model, tools=[refunds.tool], tool_limits=limits).compile(
        SqliteCheckpointer(tmp_path / "l.db")
    )
    out = app.invoke(user(), T)
    assert refunds.ran == 3, "the second turn would make 6 calls in the run: refused"
    assert any("asked for 6 tool calls" in e for e in tool_errors(out))
    out = app.invoke(user("and now this one"), T)  # a new run: its own budget
    assert refunds.ran == 6
    app.close()


def test_concurrency_bounds_calls_in_flight_and_every_call_still_runs(tmp_path: Path) -> None:
    refunds = Refunds()
    model = ScriptedModel([fan_out(12), "done"])
    limits = ToolLimits(concurrency=3)
    app = ReactAgent(model, tools=[refunds.tool], tool_limits=limits).compile(
        SqliteCheckpointer(tmp_path / "l.db")
    )
    out = app.invoke(user(), T)
    assert refunds.ran == 12 and not tool_errors(out)
    assert 1 < refunds.most <= 3
    app.close()


def test_an_over_cap_turn_asks_no_reviewer(tmp_path: Path) -> None:
    refunds = Refunds()
    model = ScriptedModel([fan_out(5), "ok"])
    app = ReactAgent(
        model,
        tools=[refunds.tool],
        interrupt_on={"refund": True},
        tool_limits=ToolLimits(per_turn=4),
    ).compile(SqliteCheckpointer(tmp_path / "l.db"))
    out = app.invoke(user(), T)
    assert "__interrupt__" not in out, "a turn that cannot run is not put to a reviewer"
    assert refunds.ran == 0 and len(tool_errors(out)) == 5
    app.close()


@pytest.mark.parametrize(
    "options", [{"per_turn": 0}, {"per_run": -1}, {"concurrency": 1.5}, {"per_turn": True}]
)
def test_bad_limits_name_the_setting(options: dict[str, Any]) -> None:
    name = next(iter(options))
    with pytest.raises(ConfigError, match=f"ToolLimits\\({name}="):
        ToolLimits(**options)


def test_limits_must_be_a_tool_limits() -> None:
    from oncegraph.tools import ToolNode

    with pytest.raises(ConfigError, match="ToolLimits"):
        ToolNode([], limits={"per_turn": 3})  # type: ignore[arg-type]
