"""Two commits per step (oncegraph.ledger.planned): a model turn's checkpoint carries the
intents of its ``write`` tool calls, so the tools step calls without a commit of its own;
an irreversible tool keeps its own intent commit; a crash anywhere still sends a write
call again only with its key, and never touches an irreversible one twice."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from oncegraph import FaultPlan, current_effect, tool
from oncegraph.errors import _CrashSignal
from oncegraph.prebuilt.agent import ReactAgent
from oncegraph.prebuilt.models import ScriptedModel
from oncegraph.storage.checkpointer import SqliteCheckpointer
from oncegraph.storage.records import Attempt, EffectStatus, StepCommit

T = {"thread_id": "t-plan"}
USER = {"messages": [{"role": "user", "content": "refund 1042 and 1043"}]}


class Counting(SqliteCheckpointer):
    """A real SQLite store that counts its write transactions."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.commits = 0
        self.begins: list[str] = []
        self.saves = 0
        self.intents: list[str] = []

    async def commit(self, commit: StepCommit) -> int:
        self.commits += 1
        self.intents += [e.effect_type for e in commit.intents]
        return await super().commit(commit)

    async def begin_effect(self, record: Any, *, fence: int | None = None) -> Any:
        self.begins.append(record.effect_type)
        return await super().begin_effect(record, fence=fence)

    async def save_effect(self, record: Any, **kw: Any) -> Any:
        self.saves += 1
        return await super().save_effect(record, **kw)


class Shop:
    def __init__(self) -> None:
        self.keys: list[str] = []
        self.sent: list[str] = []

        @tool(effect="write")
        def refund(order_id: str) -> str:
            """Refund an order."""
            self.keys.append(current_effect().idempotency_key)
            return f"refunded {order_id}"

        @tool(effect="irreversible")
        def wire(order_id: str) -> str:
            """Wire money for an order."""
            self.sent.append(order_id)
            return f"wired {order_id}"

        self.tools = [refund, wire]


def one_call(name: str, order: str = "1042") -> dict[str, Any]:
    return {"tool_calls": [{"id": "c1", "name": name, "args": {"order_id": order}}]}


def test_a_write_tool_loop_commits_twice_per_turn(tmp_path: Path) -> None:
    shop = Shop()
    store = Counting(tmp_path / "p.db")
    model = ScriptedModel([one_call("refund"), one_call("refund", "1043"), "done"])
    app = ReactAgent(model, tools=shop.tools).compile(store)
    app.invoke(USER, T)
    assert len(shop.keys) == 2
    # input, then (agent, tools) x 2, then the final agent turn: one commit each
    assert store.commits == 1 + 2 * 2 + 1
    assert store.begins == [] and store.saves == 0, "no intent commit before the call"
    assert store.intents == ["refund", "refund"], "the intents rode the model turns' commits"
    refunds = [e for e in app.effects(thread_id="t-plan") if e.effect_type == "refund"]
    assert [e.status for e in refunds] == [EffectStatus.COMPLETED] * 2
    assert [len(e.attempts) for e in refunds] == [1, 1]
    assert [e.effect_id for e in refunds] == shop.keys, "the key is the planned effect id"
    app.close()


def test_an_irreversible_tool_keeps_its_own_intent_commit(tmp_path: Path) -> None:
    shop = Shop()
    store = Counting(tmp_path / "p.db")
    app = ReactAgent(ScriptedModel([one_call("wire"), "done"]), tools=shop.tools).compile(store)
    app.invoke(USER, T)
    assert store.intents == [] and store.begins == ["wire"]
    assert shop.sent == ["1042"]
    app.close()


@pytest.mark.parametrize("point", ["before_intent", "after_intent", "after_tool_return"])
def test_a_crash_in_the_tools_step_sends_a_planned_call_only_with_its_key(
    tmp_path: Path, point: str
) -> None:
    shop = Shop()
    store = Counting(tmp_path / "p.db")
    app = ReactAgent(ScriptedModel([one_call("refund"), "done"]), tools=shop.tools).compile(store)
    with pytest.raises(_CrashSignal):
        # the model turn is an effect too: its return is after_tool_return #1
        nth = 2 if point == "after_tool_return" else 1
        app.invoke(USER, {**T, "fault_plan": FaultPlan(point, nth=nth)})
    out = app.invoke(None, T)
    assert out["messages"][-1]["content"] == "done"
    expected = 2 if point == "after_tool_return" else 1
    assert len(shop.keys) == expected and len(set(shop.keys)) == 1, "again only with its key"
    (record,) = [e for e in app.effects(thread_id="t-plan") if e.effect_type == "refund"]
    assert record.status is EffectStatus.COMPLETED
    outcomes = [a.outcome for a in record.attempts]
    assert outcomes == ["unknown", "completed"], "the call that may have started is kept"
    app.close()


def test_no_intent_is_planned_for_a_turn_over_the_limit_or_bad_arguments(tmp_path: Path) -> None:
    from oncegraph.tools import ToolLimits

    shop = Shop()
    store = Counting(tmp_path / "p.db")
    bad = {"tool_calls": [{"id": "c1", "name": "refund", "args": {"order": 1}}]}
    many = {
        "tool_calls": [
            {"id": f"c{i}", "name": "refund", "args": {"order_id": str(i)}} for i in range(3)
        ]
    }
    model = ScriptedModel([bad, many, "done"])
    agent = ReactAgent(model, tools=shop.tools, tool_limits=ToolLimits(per_turn=2))
    app = agent.compile(store)
    app.invoke(USER, T)
    assert store.intents == [] and shop.keys == []
    assert [e for e in app.effects(thread_id="t-plan") if e.effect_type == "refund"] == []
    app.close()


class Reading(Counting):
    """Counts the effect reads; ``existing`` puts a completed record of each planned
    intent on file just before the commit that plans it (a row already there)."""

    def __init__(self, path: Path, *, existing: bool = False) -> None:
        super().__init__(path)
        self.reads: list[str] = []
        self.existing = existing

    async def get_effect(self, effect_id: str) -> Any:
        self.reads.append(effect_id)
        return await super().get_effect(effect_id)

    async def commit(self, commit: StepCommit) -> Any:
        if self.existing:
            for intent in commit.intents:
                done = intent.replace(
                    status=EffectStatus.COMPLETED,
                    result="refunded earlier",
                    attempts=(Attempt(1, 1_000.0, 1_001.0, "completed"),),
                    row_version=1,
                )
                await super().begin_effect(done)
        return await super().commit(commit)


def test_a_planned_intent_the_commit_inserted_is_not_read_back(tmp_path: Path) -> None:
    shop = Shop()
    store = Reading(tmp_path / "p.db")
    app = ReactAgent(ScriptedModel([one_call("refund"), "done"]), tools=shop.tools).compile(store)
    app.invoke(USER, T)
    (record,) = [e for e in app.effects(thread_id="t-plan") if e.effect_type == "refund"]
    assert len(shop.keys) == 1
    assert record.effect_id not in store.reads, "the commit said it inserted the intent"
    app.close()


def test_a_planned_intent_already_on_record_is_read_and_decided_not_sent(tmp_path: Path) -> None:
    shop = Shop()
    store = Reading(tmp_path / "p.db", existing=True)
    app = ReactAgent(ScriptedModel([one_call("refund"), "done"]), tools=shop.tools).compile(store)
    out = app.invoke(USER, T)
    (record,) = [e for e in app.effects(thread_id="t-plan") if e.effect_type == "refund"]
    assert shop.keys == [], "the recorded result is used: the tool is not called"
    assert record.effect_id in store.reads
    assert any(m.get("content") == "refunded earlier" for m in out["messages"])
    app.close()


def test_a_store_that_cannot_tell_what_it_inserted_gets_its_intents_read(tmp_path: Path) -> None:
    class Silent(Reading):
        async def commit(self, commit: StepCommit) -> Any:
            await super().commit(commit)
            return None  # a store written before commit reported its inserts

    shop = Shop()
    store = Silent(tmp_path / "p.db")
    app = ReactAgent(ScriptedModel([one_call("refund"), "done"]), tools=shop.tools).compile(store)
    app.invoke(USER, T)
    (record,) = [e for e in app.effects(thread_id="t-plan") if e.effect_type == "refund"]
    assert len(shop.keys) == 1 and record.effect_id in store.reads
    app.close()
