"""Replay and Branch (guarantee 9): new runs, with lineage, that never touch the original.

On memory, SQLite and PostgreSQL, against the fake payment provider:

* evidence replay of a completed refund run: zero model calls, zero provider calls, the
  same final state, a new run and thread with lineage, the original untouched;
* live replay parks on the irreversible refund unless it is allowed, then sends once;
* simulation replay calls only the tool's ``simulate``;
* branch with a patched amount: a diff first, nothing run; the branch's refund has a new
  effect id and the patched amount; the original's state and effects unchanged;
* LangGraph's ``update_state`` forks the same thread as a new live run, which blocks the
  irreversible refund (time travel: tests/integration/test_time_travel.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from oncegraph import NeedsReviewError, current_effect, interrupt, tool
from oncegraph.errors import ConfigError, MissingRecordError
from oncegraph.prebuilt.agent import ReactAgent
from oncegraph.prebuilt.models.scripted import ScriptedModel
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import EffectStatus, RunStatus
from oncegraph.testing.provider import FakeProvider, ProviderClient

T = "t-replay"
USER = {"messages": [{"role": "user", "content": "refund order 1042"}]}


class Shop:
    def __init__(self, checkpointer: Checkpointer, provider: FakeProvider) -> None:
        self.client = ProviderClient(provider.url)
        self.simulated: list[dict[str, Any]] = []
        client, simulated = self.client, self.simulated

        def pretend(order_id: str, amount: float) -> str:
            simulated.append({"order_id": order_id, "amount": amount})
            return f"simulated refund of {amount:.2f}"

        @tool(effect="irreversible", recipient="payments", simulate=pretend)
        def refund(order_id: str, amount: float) -> str:
            """Refund an order."""
            key = current_effect().idempotency_key
            charged = client.charge(amount, "eur", order_id, idempotency_key=key)
            return f"refunded {amount:.2f} as {charged['id']}"

        def answer(messages: list[dict[str, Any]], tools: Any) -> dict[str, Any]:
            last = messages[-1]
            if last["role"] == "tool":
                return {"content": f"Done: {last['content']}"}
            amount = 59.0 if "1042" in str(last["content"]) else 1.0
            call = {"id": "c1", "name": "refund", "args": {"order_id": "1042", "amount": amount}}
            return {"content": "", "tool_calls": [call]}

        self.model = ScriptedModel(answer)
        self.app = ReactAgent(model=self.model, tools=[refund]).compile(checkpointer=checkpointer)

    def refunds(self) -> int:
        return int(self.client.stats()["performed"])


@pytest.fixture
def shop(checkpointer: Checkpointer) -> Iterator[Shop]:
    with FakeProvider() as provider:
        yield Shop(checkpointer, provider)


def _done(shop: Shop) -> tuple[str, dict[str, Any]]:
    out = shop.app.invoke(USER, {"thread_id": T})
    assert shop.refunds() == 1
    return shop.app.runs(thread_id=T)[0].run_id, out


def _original(shop: Shop) -> tuple[Any, ...]:
    """What a replay or branch must never change."""
    state = shop.app.get_state({"thread_id": T})
    return (
        state.config,
        state.values,
        [(e.effect_id, e.status, e.row_version) for e in shop.app.effects(thread_id=T)],
        [(r.run_id, r.status, r.fencing_token) for r in shop.app.runs(thread_id=T)],
    )


def test_evidence_replay_calls_nothing_and_reaches_the_same_state(shop: Shop) -> None:
    run_id, out = _done(shop)
    calls, before = len(shop.model.calls), _original(shop)
    replayed = shop.app.replay(run_id, mode="evidence", reason="why 59?", actor="ana")
    # the handle of the new run: its id, its status, its result
    assert replayed.result["messages"] == out["messages"]  # the same state, message ids too
    assert replayed.status == "completed" and replayed.parent_run_id == run_id
    assert len(shop.model.calls) == calls and shop.refunds() == 1  # nothing called
    assert _original(shop) == before  # the original run, thread and ledger untouched
    (replay,) = [r for r in shop.app.runs() if r.mode == "evidence"]
    assert replay.run_id == replayed.run_id
    assert (replay.parent_run_id, replay.launch_reason) == (run_id, "why 59?")  # its own reason
    assert replay.thread_id != T and replay.status is RunStatus.COMPLETED
    assert replay.parent_checkpoint_id is not None
    assert shop.app.effects(thread_id=replay.thread_id) == []  # it recorded no effect
    (audit,) = shop.app.audit(run_id=run_id)
    assert (audit.action, audit.actor, audit.reason) == ("replay", "ana", "why 59?")
    assert audit.details["new_run_id"] == replay.run_id
    (own,) = shop.app.audit(run_id=replay.run_id)  # the new run has its own record
    assert (own.action, own.actor, own.reason) == ("replay", "ana", "why 59?")
    assert own.details["parent_run_id"] == run_id and own.details["mode"] == "evidence"
    with pytest.warns(DeprecationWarning, match=r"handle\.result"):
        assert replayed["messages"] == out["messages"]  # the old shape, for now


def test_evidence_replay_never_calls_live_for_a_missing_record(shop: Shop) -> None:
    shop.client.set_faults(fail_next=1, status=500)  # the refund fails; the run records it
    shop.app.invoke(USER, {"thread_id": T})
    run_id = shop.app.runs(thread_id=T)[0].run_id
    (refund,) = [e for e in shop.app.effects(thread_id=T) if e.effect_type == "refund"]
    assert refund.status is EffectStatus.FAILED
    with pytest.raises(MissingRecordError, match="never calls live"):
        shop.app.replay(run_id, mode="evidence", reason="debug", actor="ana")
    assert shop.refunds() == 0


def test_live_replay_parks_on_an_irreversible_tool_unless_allowed(shop: Shop) -> None:
    run_id, _ = _done(shop)
    with pytest.raises(NeedsReviewError, match="allow_irreversible"):
        shop.app.replay(run_id, mode="live", reason="try again", actor="ana")
    assert shop.refunds() == 1  # blocked: nothing sent
    out = shop.app.replay(
        run_id, mode="live", reason="send it", actor="ana", allow_irreversible=["refund"]
    )
    assert shop.refunds() == 2  # exactly one more
    assert out.result["messages"][-1]["content"].startswith("Done: refunded 59.00")
    live = [r for r in shop.app.runs() if r.mode == "live" and r.status is RunStatus.COMPLETED]
    assert len(live) == 1
    effects = shop.app.effects(thread_id=live[0].thread_id)
    (effect,) = [e for e in effects if e.effect_type == "refund"]
    originals = {e.effect_id for e in shop.app.effects(thread_id=T)}
    assert effect.effect_id not in originals  # its own key


def test_simulation_replay_calls_only_simulate(shop: Shop) -> None:
    run_id, _ = _done(shop)
    calls = len(shop.model.calls)
    out = shop.app.replay(run_id, mode="simulation", reason="what if", actor="ana")
    assert shop.simulated == [{"order_id": "1042", "amount": 59.0}]
    assert shop.refunds() == 1 and len(shop.model.calls) == calls  # model from evidence
    assert out.result["messages"][-2]["content"] == "simulated refund of 59.00"
    with pytest.raises(ConfigError, match="mode must be one of"):
        shop.app.replay(run_id, mode="dry", reason="x", actor="ana")


def test_branch_shows_the_diff_runs_nothing_then_sends_the_patched_amount(shop: Shop) -> None:
    run_id, _ = _done(shop)
    history = list(shop.app.get_state_history({"thread_id": T}))
    tools_step = next(s for s in history if s.next == ("tools",))  # the refund is next
    before = _original(shop)
    patched = dict(tools_step.values["messages"][-1])
    patched["tool_calls"] = [
        {"id": "c1", "name": "refund", "args": {"order_id": "1042", "amount": 20.0}}
    ]
    branch = shop.app.branch(
        run_id,
        tools_step.config["checkpoint_id"],
        patch={"messages": [patched]},
        reason="partial refund agreed",
        actor="bo",
    )
    assert [c.channel for c in branch.diff] == ["messages"]
    assert branch.run.status is RunStatus.PAUSED and branch.run.parent_run_id == run_id
    assert shop.refunds() == 1 and _original(shop) == before  # nothing ran, nothing changed
    out = shop.app.resume(branch.run.run_id, actor="bo")
    assert out["messages"][-1]["content"].startswith("Done: refunded 20.00")
    assert shop.refunds() == 2
    # the run's replays and branches, newest first: what the operator's run page lists
    replayed = shop.app.replay(run_id, mode="evidence", reason="check", actor="bo")
    assert replayed.result["messages"][-1]["content"].startswith("Done: refunded 59")
    made = shop.app.runs(parent_run_id=run_id)
    assert [r.launch_reason for r in made] == ["check", "partial refund agreed"], made
    assert [r.mode for r in made] == ["evidence", "live"]
    assert made[1].run_id == branch.run.run_id
    assert shop.app.runs(parent_run_id=branch.run.run_id) == []
    effects = shop.client.effects()
    assert [e["body"]["amount"] for e in effects] == [59.0, 20.0]
    assert effects[0]["idempotency_key"] != effects[1]["idempotency_key"]  # new effect id
    assert _original(shop) == before
    with pytest.raises(ConfigError, match="reason is required"):
        shop.app.branch(run_id, patch={}, reason=" ", actor="bo")
    made_before = shop.app.runs(parent_run_id=run_id)
    with pytest.raises(ConfigError, match=r"\['mesages'\], which the state has no field"):
        shop.app.branch(run_id, patch={"mesages": []}, reason="typo", actor="bo")
    assert shop.app.runs(parent_run_id=run_id) == made_before  # nothing branched


def test_update_state_forks_the_thread_and_its_live_run_blocks_the_refund(shop: Shop) -> None:
    _done(shop)
    effects = [(e.effect_id, e.status) for e in shop.app.effects(thread_id=T)]
    history = list(shop.app.get_state_history({"thread_id": T}))
    tools_step = next(s for s in history if s.next == ("tools",))
    edited = dict(tools_step.values["messages"][-1])
    edited["tool_calls"] = [
        {"id": "c1", "name": "refund", "args": {"order_id": "1042", "amount": 1.0}}
    ]
    config = shop.app.update_state(tools_step.config, {"messages": [edited]})
    assert config["configurable"]["thread_id"] == T  # LangGraph's time travel: same thread
    with pytest.raises(NeedsReviewError, match="allow_irreversible"):
        shop.app.invoke(None, config)  # a live run: the irreversible refund is not sent
    assert shop.refunds() == 1
    fork = shop.app.runs(thread_id=T)[0]
    assert (fork.launch_reason, fork.mode) == ("time_travel", "live")
    assert [(e.effect_id, e.status) for e in shop.app.effects(run_id=fork.parent_run_id or "")] == (
        effects
    )  # the original's ledger untouched


def test_evidence_replay_gives_recorded_answers_to_interrupts(checkpointer: Checkpointer) -> None:
    from typing import TypedDict

    from oncegraph import END, START, Command, StateGraph

    class S(TypedDict, total=False):
        approved: str

    asked: list[str] = []

    def ask(state: S) -> S:
        asked.append("asked")
        return {"approved": interrupt("approve the refund?")}

    g = StateGraph(S)
    g.add_node("ask", ask)
    g.add_edge(START, "ask")
    g.add_edge("ask", END)
    app = g.compile(checkpointer=checkpointer)
    app.invoke({}, {"thread_id": T})
    app.invoke(Command(resume="yes, by ana"), {"thread_id": T, "actor": "ana"})
    run = app.runs(thread_id=T)[0]
    (answer,) = [a for a in app.audit(run_id=run.run_id) if a.action == "answer"]
    assert answer.details["question"] == "approve the refund?"
    assert answer.details["answer"] == "yes, by ana"
    out = app.replay(run.run_id, mode="evidence", reason="audit", actor="cy")
    assert out.result == {"approved": "yes, by ana"}  # answered from the record, not asked again
