"""Tool-call ids that no store can keep as they are: NUL (PostgreSQL text holds none) and
lone surrogates (no store encodes one), sent by a provider or written by a node.

Before, such an id failed every commit of the run (PostgreSQL: ``DataError``; every
store for a surrogate: ``UnicodeEncodeError``) and left the run ``running`` with its
thread blocked. Now the model response carries the id in a form every store keeps, the
ledger keys every call that way, the call runs once, and the thread stays usable. The
charge goes to the fake payment provider (a real HTTP server that deduplicates on the
idempotency key), so a second charge would show in its count.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from wire import WireServer, openai_completion

from oncegraph import END, START, FaultPlan, StateGraph, ToolNode, add_messages, current_effect
from oncegraph import tool as make_tool
from oncegraph.errors import NeedsReviewError, _CrashSignal
from oncegraph.prebuilt.agent import ReactAgent
from oncegraph.prebuilt.models import ScriptedModel, resolve_model
from oncegraph.runtime.portal import run_sync
from oncegraph.storage.checkpointer import PgCheckpointer, SqliteCheckpointer
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import RunStatus
from oncegraph.testing.provider import FakeProvider, ProviderClient

RunPath = Callable[..., dict[str, Any]]  # the conftest's run_path fixture
NUL_ID = "call\x00evil"
SURROGATE_ID = "call\ud800x"
ASK = {"messages": [{"role": "user", "content": "charge orders 1 and 2"}]}


@pytest.fixture
def provider() -> Iterator[ProviderClient]:
    with FakeProvider() as running:
        yield ProviderClient(running.url)


def _charge(client: ProviderClient) -> Any:
    @make_tool(effect="irreversible", recipient="payments")
    def charge(order_id: str) -> str:
        """Charge an order."""
        done = client.charge(10, "eur", order_id, idempotency_key=current_effect().idempotency_key)
        return f"charged {order_id}: {done['id']}"

    return charge


def _stored(text: str) -> bool:
    return "\x00" not in text and not any("\ud800" <= ch <= "\udfff" for ch in text)


def _pairs(values: dict[str, Any]) -> list[tuple[str, str]]:
    """(the assistant's call id, the tool answer's call id) of every call, in order."""
    messages = values["messages"]
    asked = [c["id"] for m in messages if m["role"] == "assistant" for c in m.get("tool_calls", ())]
    answered = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    return list(zip(asked, answered, strict=True))


def test_nul_and_surrogate_tool_call_ids_run_once_and_leave_the_thread_free(
    checkpointer: Checkpointer, run_path: RunPath, provider: ProviderClient
) -> None:
    calls = [
        {"id": NUL_ID, "name": "charge", "args": {"order_id": "1"}},
        {"id": SURROGATE_ID, "name": "charge", "args": {"order_id": "2"}},
        {"id": "call_plain", "name": "charge", "args": {"order_id": "3"}},
    ]
    model = ScriptedModel.turns({"content": "", "tool_calls": calls}, "all charged", "hello")
    app = ReactAgent(model=model, tools=[_charge(provider)]).compile(checkpointer=checkpointer)
    out = run_path(app, ASK, {"thread_id": "t"})
    assert out["messages"][-1]["content"] == "all charged"
    pairs = _pairs(out)
    assert [a == b for a, b in pairs] == [True, True, True]  # each answer names its call
    ids = [a for a, _ in pairs]
    assert all(_stored(i) for i in ids)
    assert ids[0].startswith("call\\x00evil~") and ids[1].startswith("call\\ud800x~")
    assert ids[2] == "call_plain"  # an id every store keeps is left as it was
    assert provider.stats()["performed"] == 3  # each charge once
    effects = app.effects(thread_id="t")
    assert sorted(e.status for e in effects if e.effect_type == "charge") == ["completed"] * 3
    assert all(_stored(e.command_id) for e in effects)
    # the thread is free: the next message runs at once
    more = {"messages": [{"role": "user", "content": "hi"}]}
    assert run_path(app, more, {"thread_id": "t"})["messages"][-1]["content"] == "hello"
    assert [r.status for r in app.runs(thread_id="t")] == [RunStatus.COMPLETED] * 2


class S(TypedDict, total=False):
    messages: Annotated[list[dict[str, Any]], add_messages]


def test_a_nodes_own_nul_tool_call_id_is_keyed_storably_and_survives_a_crash(
    checkpointer: Checkpointer, run_path: RunPath, provider: ProviderClient
) -> None:
    """Ids from a node of the user's (not a model adapter): kept as written in the
    state, keyed in the ledger in the storable form, the same after a crash."""

    def model(state: S) -> dict[str, Any]:
        if state["messages"][-1]["role"] == "tool":
            return {"messages": [{"role": "assistant", "content": "done"}]}
        call = {"id": NUL_ID, "name": "charge", "args": {"order_id": "9"}}
        return {"messages": [{"role": "assistant", "content": "", "tool_calls": [call]}]}

    g = StateGraph(S)
    g.add_node("model", model)
    g.add_node("tools", ToolNode([_charge(provider)]))
    g.add_edge(START, "model")
    g.add_conditional_edges(
        "model", lambda s: "tools" if s["messages"][-1].get("tool_calls") else END
    )
    g.add_edge("tools", "model")
    app = g.compile(checkpointer=checkpointer)
    with pytest.raises(_CrashSignal):  # the charge is made, then the process "dies"
        run_path(app, ASK, {"thread_id": "t", "fault_plan": FaultPlan("after_tool_return")})
    (pending,) = app.effects(thread_id="t")
    assert pending.status == "pending" and pending.command_id.endswith(
        ":call\\x00evil~" + pending.command_id.rsplit("~", 1)[1]
    )
    with pytest.raises(NeedsReviewError):
        run_path(app, None, {"thread_id": "t"})  # irreversible, outcome unknown: parked
    (parked,) = app.effects(thread_id="t")
    assert parked.effect_id == pending.effect_id  # the same key after the crash
    assert provider.stats()["performed"] == 1
    app.resolve_effect(parked.effect_id, "done", actor="ana", reason="seen at the PSP")
    (run,) = app.runs(thread_id="t")
    out = app.resume(run.run_id, actor="ana")
    assert out["messages"][-1]["content"] == "done"
    assert _pairs(out) == [(NUL_ID, NUL_ID)]  # the state keeps the id as the node wrote it
    assert provider.stats()["performed"] == 1


@pytest.fixture(params=["sqlite", "postgres"])
def sql_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Checkpointer]:
    store: Checkpointer
    if request.param == "postgres":
        store = PgCheckpointer(str(request.getfixturevalue("fresh_dsn")))
    else:
        store = SqliteCheckpointer(tmp_path / "ids.db")
    yield store
    run_sync(store.aclose(), "aclose")


def test_an_openai_reply_with_a_nul_in_its_tool_call_id(
    sql_store: Checkpointer, provider: ProviderClient
) -> None:
    """The real OpenAI SDK, a local server speaking its wire format: the id arrives as
    JSON ``\\u0000``; the next request sends the call and its answer under one id."""
    pytest.importorskip("openai", reason='needs the SDK: pip install "oncegraph[openai]"')
    server = WireServer()
    try:
        call = {
            "id": "call_\u0000Rf2",
            "type": "function",
            "function": {"name": "charge", "arguments": json.dumps({"order_id": "7"})},
        }
        server.reply(
            openai_completion({"role": "assistant", "content": None, "tool_calls": [call]},
                              "tool_calls")
        )
        server.reply(openai_completion({"role": "assistant", "content": "charged"}, "stop"))
        model = resolve_model(
            "gpt-4o-mini", "openai", base_url=server.url + "/v1", api_key="sk-test",
            max_retries=0,
        )
        app = ReactAgent(model=model, tools=[_charge(provider)]).compile(checkpointer=sql_store)
        out = app.invoke(ASK, {"thread_id": "t"})
        run_sync(model.aclose(), "aclose")
    finally:
        server.close()
    assert out["messages"][-1]["content"] == "charged"
    assert provider.stats()["performed"] == 1
    (run,) = app.runs(thread_id="t")
    assert run.status is RunStatus.COMPLETED
    wire = server.requests[1].body["messages"]
    sent_call = wire[-2]["tool_calls"][0]["id"]
    assert wire[-1]["role"] == "tool" and wire[-1]["tool_call_id"] == sent_call
    assert sent_call.startswith("call_\\x00Rf2~") and _stored(sent_call)
