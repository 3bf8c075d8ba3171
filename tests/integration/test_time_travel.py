"""LangGraph's time travel, kept safe: every fork is a new live run with lineage.

* ``invoke(None, {"checkpoint_id": old})`` on every run path: the nodes after the
  checkpoint run again, the fork becomes the thread's head, the history shows both
  branches, and the fork is a NEW run (``parent_run_id``, ``parent_checkpoint_id``,
  ``launch_reason="time_travel"``, mode ``live``) with its own audit record;
* message lists (log channels) keep each branch's own entries on the same thread;
* an irreversible tool is blocked in the fork (nothing reaches the provider) unless the
  config lists it in ``allow_irreversible``; then it is sent once, under a new key;
* a thread whose latest run is unfinished refuses time travel, naming ``app.branch``,
  and nothing is written;
* ``update_state`` on a past checkpoint (``source="update"``; ``__copy__``: ``"fork"``)
  makes a paused run that ``invoke(None, config)`` goes on with; ``Command(resume=...)``
  with the fork's config answers the fork's question; an edit nobody ran gives way to the
  next one (abandoned, audited);
* ``invoke(None, config)`` on a finished thread returns its state and runs nothing.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from typing import Annotated, Any, TypedDict

import pytest

from oncegraph import (
    END,
    START,
    Command,
    MessagesState,
    StateGraph,
    current_effect,
    interrupt,
    tool,
)
from oncegraph.errors import NeedsReviewError, UnfinishedRunError
from oncegraph.prebuilt.agent import ReactAgent
from oncegraph.prebuilt.models.scripted import ScriptedModel
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import RunStatus
from oncegraph.testing.provider import FakeProvider, ProviderClient

T = "t-travel"


class State(TypedDict):
    value: Annotated[list[str], operator.add]


def _abc(checkpointer: Checkpointer, called: list[str], *, ask: bool = False) -> Any:
    def node_a(state: State) -> State:
        called.append("node_a")
        return {"value": ["a"]}

    def node_ask(state: State) -> State:
        called.append("ask")
        return {"value": [f"human:{interrupt('your input?')}"]}

    def node_b(state: State) -> State:
        called.append("node_b")
        return {"value": ["b"]}

    g = StateGraph(State)
    g.add_node("node_a", node_a)
    g.add_node("node_b", node_b)
    g.add_edge(START, "node_a")
    if ask:
        g.add_node("ask", node_ask)
        g.add_edge("node_a", "ask")
        g.add_edge("ask", "node_b")
    else:
        g.add_edge("node_a", "node_b")
    g.add_edge("node_b", END)
    return g.compile(checkpointer=checkpointer)


def _summary(app: Any) -> list[tuple[Any, ...]]:
    return [
        (s.metadata.get("source"), s.next, s.values.get("value"))
        for s in app.get_state_history({"thread_id": T})
    ]


def test_invoke_from_a_past_checkpoint_is_a_new_live_run_on_the_thread(
    checkpointer: Checkpointer, run_path: Any
) -> None:
    called: list[str] = []
    app = _abc(checkpointer, called)
    app.invoke({"value": []}, {"thread_id": T})
    original = app.runs(thread_id=T)[0]
    before_b = next(s for s in app.get_state_history({"thread_id": T}) if s.next == ("node_b",))
    kept = _summary(app)
    called.clear()

    out = run_path(app, None, before_b.config)

    assert out["value"] == ["a", "b"]
    assert called == ["node_b"]  # only what comes after the checkpoint runs again
    fork, first = app.runs(thread_id=T)
    assert first.run_id == original.run_id and first.status is RunStatus.COMPLETED
    assert fork.run_id != original.run_id and fork.status is RunStatus.COMPLETED
    assert (fork.parent_run_id, fork.parent_checkpoint_id) == (
        original.run_id,
        before_b.config["configurable"]["checkpoint_id"],
    )
    assert (fork.launch_reason, fork.mode) == ("time_travel", "live")
    # the fork is the thread's head; the history shows it above the untouched original
    history = _summary(app)
    assert history[-len(kept) :] == kept
    assert history[: -len(kept)] == [("loop", (), ["a", "b"]), ("fork", ("node_b",), ["a"])]
    head = app.get_state({"thread_id": T})
    assert head.metadata["source"] == "loop" and head.values == {"value": ["a", "b"]}
    forked = next(
        s for s in app.get_state_history({"thread_id": T}) if s.metadata["source"] == "fork"
    )
    assert forked.parent_config is not None
    assert (
        forked.parent_config["configurable"]["checkpoint_id"]
        == (before_b.config["configurable"]["checkpoint_id"])
    )
    (audit,) = app.audit(run_id=fork.run_id)
    assert audit.action == "time_travel" and audit.details["parent_run_id"] == original.run_id
    assert app.audit(run_id=original.run_id) == []  # nothing written on the original


def test_each_branch_of_a_thread_keeps_its_own_messages(checkpointer: Checkpointer) -> None:
    def talk(state: MessagesState) -> dict[str, Any]:
        last = state["messages"][-1]
        return {"messages": [{"role": "assistant", "content": f"re: {last['content']}"}]}

    g = StateGraph(MessagesState)
    g.add_node("talk", talk)
    g.add_edge(START, "talk")
    g.add_edge("talk", END)
    app = g.compile(checkpointer=checkpointer)
    cfg = {"thread_id": T}
    app.invoke({"messages": [{"role": "user", "content": "one"}]}, cfg)
    app.invoke({"messages": [{"role": "user", "content": "two"}]}, cfg)
    first_done = [s for s in app.get_state_history(cfg) if s.next == ()][-1]
    assert [m["content"] for m in first_done.values["messages"]] == ["one", "re: one"]

    out = app.invoke({"messages": [{"role": "user", "content": "2b"}]}, first_done.config)

    assert [m["content"] for m in out["messages"]] == ["one", "re: one", "2b", "re: 2b"]
    app.invoke({"messages": [{"role": "user", "content": "three"}]}, cfg)
    contents = [m["content"] for m in app.get_state(cfg).values["messages"]]
    assert contents == ["one", "re: one", "2b", "re: 2b", "three", "re: three"]
    # the other branch is still there, entry for entry
    finals = [
        [m["content"] for m in s.values["messages"]]
        for s in app.get_state_history(cfg)
        if s.next == () and s.metadata.get("source") == "loop"
    ]
    assert ["one", "re: one", "two", "re: two"] in finals
    assert ["one", "re: one"] in finals


class Payments:
    def __init__(self, checkpointer: Checkpointer, provider: FakeProvider) -> None:
        self.client = client = ProviderClient(provider.url)

        @tool(effect="irreversible", recipient="payments")
        def refund(order_id: str, amount: float) -> str:
            """Refund an order."""
            key = current_effect().idempotency_key
            charged = client.charge(amount, "eur", order_id, idempotency_key=key)
            return str(charged["id"])

        def answer(messages: list[dict[str, Any]], tools: Any) -> dict[str, Any]:
            if messages[-1]["role"] == "tool":
                return {"content": f"Done: {messages[-1]['content']}"}
            call = {"id": "c1", "name": "refund", "args": {"order_id": "1042", "amount": 59.0}}
            return {"content": "", "tool_calls": [call]}

        agent = ReactAgent(model=ScriptedModel(answer), tools=[refund])
        self.app = agent.compile(checkpointer=checkpointer)

    def sent(self) -> list[dict[str, Any]]:
        return list(self.client.effects())


@pytest.fixture
def payments(checkpointer: Checkpointer) -> Iterator[Payments]:
    with FakeProvider() as provider:
        yield Payments(checkpointer, provider)


def test_an_irreversible_tool_is_blocked_in_time_travel_unless_allowed(payments: Payments) -> None:
    app = payments.app
    app.invoke({"messages": [{"role": "user", "content": "refund 1042"}]}, {"thread_id": T})
    assert len(payments.sent()) == 1
    before_pay = next(s for s in app.get_state_history({"thread_id": T}) if s.next == ("tools",))

    with pytest.raises(NeedsReviewError, match="allow_irreversible"):
        app.invoke(None, before_pay.config)
    assert len(payments.sent()) == 1  # blocked: nothing reached the provider
    parked = app.runs(thread_id=T)[0]
    assert parked.launch_reason == "time_travel" and parked.status is RunStatus.NEEDS_REVIEW
    # the parked fork is unfinished: another fork waits until an operator decides
    with pytest.raises(UnfinishedRunError, match=r"app\.branch"):
        app.invoke(None, before_pay.config)
    app.abandon({"thread_id": T}, reason="sent the right way below", actor="ana")

    allowed = {
        "configurable": {**before_pay.config["configurable"], "allow_irreversible": ["refund"]}
    }
    out = app.invoke(None, allowed)

    sent = payments.sent()
    assert len(sent) == 2  # exactly one more
    assert sent[0]["idempotency_key"] != sent[1]["idempotency_key"]  # its own effect id
    assert out["messages"][-1]["content"] == f"Done: {sent[1]['id']}"


def test_time_travel_on_a_thread_with_an_unfinished_run_is_refused(
    checkpointer: Checkpointer,
) -> None:
    called: list[str] = []
    app = _abc(checkpointer, called, ask=True)
    app.invoke({"value": []}, {"thread_id": T})  # waits for an answer
    waiting = app.runs(thread_id=T)[0]
    assert waiting.status is RunStatus.INTERRUPTED
    first = list(app.get_state_history({"thread_id": T}))[-1]
    kept = _summary(app)

    for go_back in (
        lambda: app.invoke(None, first.config),
        lambda: app.invoke({"value": ["x"]}, first.config),
        lambda: app.update_state(first.config, {"value": ["x"]}),
        lambda: app.update_state({"thread_id": T}, {"value": ["x"]}),
    ):
        with pytest.raises(UnfinishedRunError, match=r"app\.branch") as refused:
            go_back()
        assert "app.abandon(config)" in str(refused.value)

    assert _summary(app) == kept  # nothing was written
    assert [r.run_id for r in app.runs(thread_id=T)] == [waiting.run_id]
    assert app.runs(thread_id=T)[0].status is RunStatus.INTERRUPTED  # not woken
    # the answer still goes to the run that asked
    assert app.invoke(Command(resume="yes"), {"thread_id": T})["value"] == ["a", "human:yes", "b"]


def test_interrupts_ask_again_in_a_fork_and_its_answer_goes_to_the_fork(
    checkpointer: Checkpointer,
) -> None:
    called: list[str] = []
    app = _abc(checkpointer, called, ask=True)
    cfg = {"thread_id": T}
    app.invoke({"value": []}, cfg)
    app.invoke(Command(resume="old"), cfg)
    before_ask = next(s for s in app.get_state_history(cfg) if s.next == ("ask",))
    called.clear()

    asked = app.invoke(None, before_ask.config)

    assert asked["__interrupt__"][0].value == "your input?"  # asked again, not answered
    assert called == ["ask"]
    assert _summary(app)[0] == ("fork", ("ask",), ["a"])
    done = app.invoke(Command(resume="new"), cfg)
    assert done["value"] == ["a", "human:new", "b"]
    finals = [s.values["value"] for s in app.get_state_history(cfg) if s.next == ()]
    assert finals == [["a", "human:new", "b"], ["a", "human:old", "b"]]


def test_update_state_on_a_past_checkpoint_forks_a_paused_run(
    checkpointer: Checkpointer, run_path: Any
) -> None:
    called: list[str] = []
    app = _abc(checkpointer, called, ask=True)
    cfg = {"thread_id": T}
    app.invoke({"value": []}, cfg)
    app.invoke(Command(resume="old"), cfg)
    original = app.runs(thread_id=T)[0]
    before_ask = next(s for s in app.get_state_history(cfg) if s.next == ("ask",))

    fork_cfg = app.update_state(before_ask.config, {"value": ["x"]})

    assert fork_cfg["configurable"]["thread_id"] == T
    edited = app.get_state(fork_cfg)
    assert edited.metadata["source"] == "update" and edited.values == {"value": ["a", "x"]}
    assert edited.next == ("ask",)  # as if node_a had written it
    fork = app.runs(thread_id=T)[0]
    assert fork.status is RunStatus.PAUSED and fork.parent_run_id == original.run_id
    assert fork.launch_reason == "time_travel"
    (audit,) = app.audit(run_id=fork.run_id)
    assert audit.action == "update_state" and audit.details["changed"] == ["value"]
    called.clear()
    asked = run_path(app, None, fork_cfg)
    assert asked["__interrupt__"][0].value == "your input?" and called == ["ask"]
    # the fork's config names a checkpoint of the fork: the answer goes to the fork
    done = app.invoke(Command(resume="new"), fork_cfg)
    assert done["value"] == ["a", "x", "human:new", "b"]
    assert [r.run_id for r in app.runs(thread_id=T)] == [fork.run_id, original.run_id]


def test_copies_and_edits_nobody_ran_give_way_to_the_next(checkpointer: Checkpointer) -> None:
    called: list[str] = []
    app = _abc(checkpointer, called)
    cfg = {"thread_id": T}
    app.invoke({"value": []}, cfg)
    before_b = next(s for s in app.get_state_history(cfg) if s.next == ("node_b",))

    copy_cfg = app.update_state(before_b.config, None, as_node="__copy__")
    copied = app.get_state(copy_cfg)
    assert copied.metadata["source"] == "fork" and copied.values == before_b.values
    assert copied.parent_config == before_b.parent_config  # a sibling, as LangGraph's
    copy_run = app.runs(thread_id=T)[0]

    edit_cfg = app.update_state(before_b.config, {"value": ["x"]})
    again = app.update_state(edit_cfg, {"value": ["y"]})  # on its own head: the same run

    assert app.get_run(copy_run.run_id).status is RunStatus.ABANDONED
    assert [a.action for a in app.audit(run_id=copy_run.run_id)] == ["supersede", "update_state"]
    edit_run = app.runs(thread_id=T)[0]
    assert edit_run.run_id != copy_run.run_id
    assert app.get_state(again).values == {"value": ["a", "x", "y"]}
    parent = app.get_state(again).parent_config
    assert parent is not None
    assert parent["configurable"]["checkpoint_id"] == edit_cfg["configurable"]["checkpoint_id"]
    called.clear()
    assert app.invoke(None, cfg)["value"] == ["a", "x", "y", "b"]
    assert called == ["node_b"]
    assert app.get_run(edit_run.run_id).status is RunStatus.COMPLETED


def test_none_on_a_finished_thread_returns_its_state_and_runs_nothing(
    checkpointer: Checkpointer, run_path: Any
) -> None:
    called: list[str] = []
    app = _abc(checkpointer, called)
    app.invoke({"value": []}, {"thread_id": T})
    head = app.get_state({"thread_id": T})
    called.clear()

    assert run_path(app, None, head.config)["value"] == ["a", "b"]
    assert app.invoke(None, {"thread_id": T}) == {"value": ["a", "b"]}

    assert called == []
    assert len(app.runs(thread_id=T)) == 1  # no new run


def test_update_state_passes_the_allowed_irreversible_tools_to_its_run(
    payments: Payments,
) -> None:
    app = payments.app
    app.invoke({"messages": [{"role": "user", "content": "refund 1042"}]}, {"thread_id": T})
    before = next(s for s in app.get_state_history({"thread_id": T}) if s.next == ("tools",))
    allowed = {"configurable": {**before.config["configurable"], "allow_irreversible": ["refund"]}}

    edited = app.update_state(allowed, None, as_node="__copy__")
    out = app.invoke(None, edited)

    sent = payments.sent()
    assert len(sent) == 2 and sent[0]["idempotency_key"] != sent[1]["idempotency_key"]
    assert out["messages"][-1]["content"] == f"Done: {sent[1]['id']}"
