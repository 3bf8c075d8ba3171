"""The effect ledger's laws (guarantees 2 to 7 of docs/guarantees.md), in process.

Every test runs on the memory and SQLite checkpointers and, where a run path changes
anything, on all four paths (invoke, ainvoke, stream, astream). Crashes are simulated
with ``FaultPlan(point, nth)`` (kill=False): the in-process crash signal stops the run
exactly where a killed process would stop, and ``invoke(None, config)`` continues it.
The real SIGKILL version of these scenarios is ``tests/integration/test_crash_matrix.py``.

Crash-point hit numbers in a ReactAgent run with one tool call: the agent step hits
``after_tool_return`` (model call), ``before_checkpoint``, ``after_effect_record`` (the
folded model record) and ``after_checkpoint`` once each, so the tools step is their
2nd hit; ``before_intent`` / ``after_intent`` are only hit by side-effecting tools.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable, Mapping
from typing import Any, TypedDict, cast

import pytest

from oncegraph import (
    END,
    START,
    Accepted,
    FaultPlan,
    Reconciled,
    StateGraph,
    aeffect,
    current_effect,
    effect,
    tool,
)
from oncegraph.app import CompiledGraph
from oncegraph.errors import (
    EffectFailedError,
    LedgerUnavailableError,
    LedgerWriteError,
    NeedsReviewError,
    RequestMismatchError,
    StorageError,
    ToolTimeoutError,
    _CrashSignal,
)
from oncegraph.ledger.keys import request_hash
from oncegraph.prebuilt.agent import ReactAgent
from oncegraph.prebuilt.models import ModelResponse
from oncegraph.prebuilt.models.scripted import ScriptedModel
from oncegraph.runtime.portal import run_sync
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import EffectClass, EffectRecord, EffectStatus, RunStatus
from oncegraph.tools import EffectRetry, Tool

PATHS = ("invoke", "ainvoke", "stream", "astream")
T = "t-ledger"
USER = {"messages": [{"role": "user", "content": "refund order 1042"}]}
ARGS = {"order_id": "1042", "amount": 59.0}
NO_WAIT = EffectRetry(max_attempts=3, initial_delay=0.0, jitter=0.0)


# -- fixtures: a store per backend, a runner per path -----------------------------------


@pytest.fixture
def store(checkpointer: Checkpointer) -> Checkpointer:
    """Every backend (tests/conftest.py's ``checkpointer``: memory, SQLite, PostgreSQL)."""
    return checkpointer


@pytest.fixture(params=PATHS)
def path(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def run(path: str, app: CompiledGraph, inp: Any, config: Mapping[str, Any]) -> dict[str, Any]:
    """Run on one path; streams return the last ``values`` event. Errors propagate."""
    if path == "invoke":
        return app.invoke(inp, config)
    if path == "ainvoke":
        return asyncio.run(app.ainvoke(inp, config))
    if path == "stream":
        items = list(app.stream(inp, config, stream_mode="values"))
        return dict(items[-1]) if items else {}

    async def astream() -> dict[str, Any]:
        items = [item async for item in app.astream(inp, config, stream_mode="values")]
        return dict(items[-1]) if items else {}

    if path == "astream":
        return asyncio.run(astream())
    raise ValueError(path)


def crash(path: str, app: CompiledGraph, inp: Any, point: str, nth: int = 1) -> None:
    with pytest.raises(_CrashSignal) as caught:
        run(path, app, inp, {"thread_id": T, "fault_plan": FaultPlan(point, nth)})
    assert caught.value.point == point


async def no_sleep(seconds: float) -> None:
    """The run's sleeper in these tests: retry and record backoffs are not waited out."""
    slept.append(seconds)


slept: list[float] = []


def cfg(**extra: Any) -> dict[str, Any]:
    return {"thread_id": T, "sleep": no_sleep, **extra}


# -- builders -----------------------------------------------------------------------------


def react(
    store: Checkpointer,
    *tools: Tool,
    calls: list[dict[str, Any]] | None = None,
    model: ScriptedModel | None = None,
) -> CompiledGraph:
    """A ReactAgent: turn 0 calls the tool(s) with ``calls`` (default one call with ARGS)."""
    first = tools[0].name
    calls = calls or [{"id": "call_1", "name": first, "args": ARGS}]
    model = model or ScriptedModel.turns({"tool_calls": calls}, "done")
    return ReactAgent(model=model, tools=list(tools)).compile(checkpointer=store)


class NodeState(TypedDict, total=False):
    out: Any


def plain(store: Checkpointer, node: Callable[..., Any]) -> CompiledGraph:
    g = StateGraph(NodeState)
    g.add_node("pay", node)
    g.add_edge(START, "pay")
    g.add_edge("pay", END)
    return g.compile(checkpointer=store)


def keyed(store: Checkpointer, value: Any) -> str:
    """The request hash ``store``'s ledger gives ``value`` (keyed by the store's key)."""
    key = run_sync(cast(Any, store).request_hash_key(), "request_hash_key")
    return request_hash(value, key)


def effects(app: CompiledGraph, effect_type: str) -> list[EffectRecord]:
    return [e for e in app.effects(thread_id=T) if e.effect_type == effect_type]


def latest_run(app: CompiledGraph) -> Any:
    (latest,) = app.runs(thread_id=T, limit=1)
    return latest


def tool_messages(values: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [m for m in values["messages"] if m["role"] == "tool"]


# -- guarantee 4: completed -> recorded result, no call ---------------------------------------


@pytest.mark.parametrize("style", ["sync", "async"])
def test_completed_effect_is_served_from_the_ledger(
    store: Checkpointer, path: str, style: str
) -> None:
    sent: list[str] = []

    def send(name: str) -> str:
        sent.append(name)
        return f"sent {name} #{len(sent)}"

    if style == "sync":

        def node(state: NodeState) -> NodeState:
            return {"out": [effect(send, "a"), effect(send, "b")]}

    else:

        async def node(state: NodeState) -> NodeState:  # type: ignore[misc]
            return {"out": [await aeffect(send, "a"), await aeffect(send, "b")]}

    app = plain(store, node)
    # the first effect's result is committed, then the process "dies"
    crash(path, app, {}, "after_effect_record", 1)
    assert sent == ["a"]
    out = run(path, app, None, cfg())
    assert sent == ["a", "b"], "the recorded effect must not be called again"
    assert out["out"] == ["sent a #1", "sent b #2"]
    first = effects(app, "send")[0]
    assert first.status is EffectStatus.COMPLETED and len(first.attempts) == 1


# -- guarantee 5: pending write -> again with the SAME key -------------------------------------


def test_pending_write_reruns_with_the_same_idempotency_key(store: Checkpointer, path: str) -> None:
    keys: list[str] = []

    @tool(effect="write")
    def refund(order_id: str, amount: float) -> str:
        """Refund."""
        keys.append(current_effect().idempotency_key)
        return f"refunded {order_id}"

    app = react(store, refund)
    crash(path, app, USER, "after_tool_return", 2)  # called, result not recorded
    (pending,) = effects(app, "refund")
    assert pending.status is EffectStatus.PENDING
    out = run(path, app, None, cfg())
    assert len(keys) == 2
    assert keys[0] == keys[1] == pending.effect_id
    (record,) = effects(app, "refund")
    assert record.status is EffectStatus.COMPLETED
    assert [a.outcome for a in record.attempts] == ["unknown", "completed"]
    assert tool_messages(out)[0]["content"] == "refunded 1042"


# -- guarantee 5: pending irreversible -> reconcile or park ------------------------------------


@pytest.mark.parametrize("verdict", ["done", "not_done", "unknown"])
def test_pending_irreversible_is_reconciled(store: Checkpointer, path: str, verdict: str) -> None:
    sent: list[str] = []
    seen: list[EffectRecord] = []

    def find(record: EffectRecord) -> Reconciled:
        seen.append(record)
        if verdict == "done":
            return Reconciled.done("refund rf_1 found", provider_reference="rf_1")
        if verdict == "not_done":
            return Reconciled.not_done()
        return Reconciled.unknown()

    @tool(effect="irreversible", reconcile=find, recipient="payments")
    def refund(order_id: str, amount: float) -> str:
        """Refund."""
        sent.append(current_effect().idempotency_key)
        return "refund sent"

    app = react(store, refund)
    crash(path, app, USER, "after_tool_return", 2)
    assert len(sent) == 1
    (pending,) = effects(app, "refund")

    if verdict == "unknown":
        with pytest.raises(NeedsReviewError) as parked:
            run(path, app, None, cfg())
        assert parked.value.effect_id == pending.effect_id
        assert len(sent) == 1, "a parked irreversible tool must not be called"
        run_record = latest_run(app)
        assert run_record.status is RunStatus.NEEDS_REVIEW
        assert pending.effect_id in (run_record.error or "")
        assert effects(app, "refund")[0].status is EffectStatus.PENDING
        with pytest.raises(NeedsReviewError):  # still parked: continuing does not send it
            run(path, app, None, cfg())
        assert len(sent) == 1
        return

    out = run(path, app, None, cfg())
    assert [r.effect_id for r in seen] == [pending.effect_id]
    assert seen[0].status is EffectStatus.PENDING
    (record,) = effects(app, "refund")
    assert record.status is EffectStatus.COMPLETED
    if verdict == "done":
        assert len(sent) == 1
        assert record.result == "refund rf_1 found"
        assert record.provider_reference == "rf_1"
        assert record.attempts[-1].outcome == "reconciled"
        assert tool_messages(out)[0]["content"] == "refund rf_1 found"
    else:
        assert sent == [pending.effect_id, pending.effect_id]
        assert tool_messages(out)[0]["content"] == "refund sent"


# -- guarantee 6: same command, different request -> RequestMismatchError ---------------------


@pytest.mark.parametrize("style", ["sync", "async"])
@pytest.mark.parametrize("point", ["after_intent", "after_effect_record"])
def test_request_mismatch_sends_nothing(
    store: Checkpointer, path: str, style: str, point: str
) -> None:
    amount = {"value": 10}
    sent: list[int] = []

    def charge(value: int) -> str:
        sent.append(value)
        return f"charged {value}"

    if style == "sync":

        def node(state: NodeState) -> NodeState:
            return {"out": effect(charge, amount["value"])}

    else:

        async def node(state: NodeState) -> NodeState:  # type: ignore[misc]
            return {"out": await aeffect(charge, amount["value"])}

    app = plain(store, node)
    crash(path, app, {}, point)
    before = list(sent)
    (recorded,) = effects(app, "charge")
    amount["value"] = 11  # the same command now comes with other arguments
    with pytest.raises(RequestMismatchError) as caught:
        run(path, app, None, cfg())
    assert sent == before, "nothing may be sent on a request mismatch"
    assert caught.value.effect_id == recorded.effect_id
    assert caught.value.recorded_hash == recorded.request_hash
    assert caught.value.new_hash == keyed(store, {"args": [11], "kwargs": {}})
    (after,) = effects(app, "charge")
    assert after.request_hash == recorded.request_hash
    assert after.status is recorded.status


# -- tool exceptions and retries ---------------------------------------------------------


def test_read_tool_is_retried_per_policy(store: Checkpointer, path: str) -> None:
    tries: list[int] = []

    @tool(effect="read", retry=NO_WAIT)
    def lookup(order_id: str, amount: float) -> str:
        """Look up."""
        tries.append(1)
        if len(tries) < 3:
            raise ConnectionError("flaky")
        return "found"

    out = run(path, react(store, lookup), USER, cfg())
    assert len(tries) == 3
    assert tool_messages(out)[0]["status"] == "success"
    (record,) = [e for e in store_effects(store) if e.effect_type == "lookup"]
    assert [a.outcome for a in record.attempts] == ["failed", "failed", "completed"]


def store_effects(store: Checkpointer) -> list[EffectRecord]:
    return asyncio.run(store.list_effects(thread_id=T))


def test_irreversible_tool_is_never_retried(store: Checkpointer, path: str) -> None:
    tries: list[int] = []

    @tool(effect="irreversible", retry=EffectRetry(max_attempts=5, initial_delay=0.0))
    def refund(order_id: str, amount: float) -> str:
        """Refund."""
        tries.append(1)
        raise ConnectionError("provider said no")

    app = react(store, refund)
    out = run(path, app, USER, cfg())
    assert len(tries) == 1
    (message,) = tool_messages(out)
    assert message["status"] == "error" and "provider said no" in message["content"]
    (record,) = effects(app, "refund")
    assert record.status is EffectStatus.FAILED
    assert record.error is not None and "provider said no" in record.error


@pytest.mark.parametrize(("cls", "retried"), [("write", True), ("irreversible", False)])
def test_replayed_failed_effect_by_class(
    store: Checkpointer, path: str, cls: str, retried: bool
) -> None:
    tries: list[int] = []

    def send(order_id: str) -> str:
        tries.append(1)
        if len(tries) == 1:
            raise ConnectionError("refused")
        return "sent"

    def node(state: NodeState) -> NodeState:
        return {"out": effect(send, "1042", effect_class=cls)}

    app = plain(store, node)
    with pytest.raises(ConnectionError) as info:  # the tool's own error, as in LangGraph
        run(path, app, {}, cfg())
    assert info.value.oncegraph_run_id == latest_run(app).run_id  # type: ignore[attr-defined]
    (failed,) = effects(app, "send")
    assert failed.status is EffectStatus.FAILED
    assert latest_run(app).status is RunStatus.FAILED
    if retried:
        assert run(path, app, None, cfg())["out"] == "sent"
        assert len(tries) == 2
        assert effects(app, "send")[0].status is EffectStatus.COMPLETED
    else:
        with pytest.raises(EffectFailedError):
            run(path, app, None, cfg())
        assert len(tries) == 1, "a failed irreversible effect is never re-sent automatically"
        assert effects(app, "send")[0].status is EffectStatus.FAILED


# -- guarantee 5: a timeout is an unknown outcome ----------------------------------------------


@pytest.mark.parametrize("cls", ["write", "irreversible", "irreversible+reconcile"])
def test_tool_timeout_is_unknown_not_failed(store: Checkpointer, path: str, cls: str) -> None:
    tries: list[str] = []

    def find(record: EffectRecord) -> Reconciled:
        return Reconciled.done("it went through")

    async def slow(order_id: str, amount: float) -> str:
        """Refund an order, slowly."""
        tries.append(current_effect().idempotency_key)
        await asyncio.sleep(10)
        return "late"

    effect_class = "write" if cls == "write" else "irreversible"
    reconcile = find if cls.endswith("+reconcile") else None
    slow_tool = tool(effect=effect_class, reconcile=reconcile)(slow)
    app = react(store, slow_tool)
    config = cfg(tool_timeout=0.2)
    if cls == "write":
        with pytest.raises(ToolTimeoutError):
            run(path, app, USER, config)
    elif reconcile is None:
        with pytest.raises(NeedsReviewError):
            run(path, app, USER, config)
    else:
        out = run(path, app, USER, config)
        assert tool_messages(out)[0]["content"] == "it went through"
    assert len(tries) == 1
    (record,) = effects(app, "slow")
    assert record.attempts[0].outcome == "timeout"
    if cls == "irreversible+reconcile":
        assert record.status is EffectStatus.COMPLETED
        return
    assert record.status is EffectStatus.PENDING, "a timeout must not be recorded as failed"
    expected = RunStatus.FAILED if cls == "write" else RunStatus.NEEDS_REVIEW
    assert latest_run(app).status is expected


# -- Accepted and the status probe -------------------------------------------------------


@pytest.mark.parametrize("with_probe", [True, False])
def test_accepted_effect_is_probed_on_replay(
    store: Checkpointer, path: str, with_probe: bool
) -> None:
    queued: list[str] = []
    probed: list[EffectRecord] = []

    def probe(record: EffectRecord) -> Reconciled:
        probed.append(record)
        return Reconciled.done({"state": "settled"})

    @tool(effect="irreversible", probe=probe if with_probe else None)
    def queue_refund(order_id: str, amount: float) -> Accepted:
        """Queue a refund."""
        queued.append(order_id)
        return Accepted({"state": "queued"}, provider_reference=f"ref-{order_id}")

    calls = [
        {"id": "call_1", "name": "queue_refund", "args": ARGS},
        {"id": "call_2", "name": "queue_refund", "args": {"order_id": "1043", "amount": 1.0}},
    ]
    app = react(store, queue_refund, calls=calls)
    # two calls: each result is recorded on its own; die before the step's checkpoint
    crash(path, app, USER, "before_checkpoint", 2)
    accepted = effects(app, "queue_refund")
    assert [r.status for r in accepted] == [EffectStatus.ACCEPTED] * 2
    assert sorted(r.provider_reference or "" for r in accepted) == ["ref-1042", "ref-1043"]

    out = run(path, app, None, cfg())
    assert sorted(queued) == ["1042", "1043"], "an accepted effect is not sent again"
    records = effects(app, "queue_refund")
    if with_probe:
        assert sorted(r.effect_id for r in probed) == sorted(r.effect_id for r in accepted)
        assert all(r.status is EffectStatus.ACCEPTED for r in probed)
        assert [r.status for r in records] == [EffectStatus.COMPLETED] * 2
        assert all(r.result == {"state": "settled"} for r in records)
        assert sorted(r.provider_reference or "" for r in records) == ["ref-1042", "ref-1043"]
    else:
        assert [r.status for r in records] == [EffectStatus.ACCEPTED] * 2
        assert [m["content"] for m in tool_messages(out)] == ['{"state":"queued"}'] * 2


# -- guarantee 7: ledger trouble fails closed for risky tools ----------------------------------


class BrokenLedger:
    """Delegates to a real store; ``begin``/``read``/``save`` switch ledger calls to fail."""

    def __init__(self, inner: Checkpointer) -> None:
        self.inner = inner
        self.begin = False
        self.read = False
        self.save = False
        self.save_calls = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def begin_effect(
        self, record: EffectRecord, *, fence: int | None = None
    ) -> tuple[EffectRecord, bool]:
        if self.begin:
            raise StorageError("ledger unreachable (test)")
        return await self.inner.begin_effect(record, fence=fence)

    async def get_effect(self, effect_id: str) -> EffectRecord | None:
        if self.read:
            raise StorageError("ledger unreadable (test)")
        return await self.inner.get_effect(effect_id)

    async def save_effect(self, record: EffectRecord, *, fence: int | None = None) -> None:
        self.save_calls += 1
        if self.save:
            raise StorageError("ledger write refused (test)")
        await self.inner.save_effect(record, fence=fence)


@pytest.mark.parametrize("cls", ["write", "irreversible"])
def test_ledger_unavailable_risky_tools_do_not_run(
    store: Checkpointer, path: str, cls: str
) -> None:
    sent: list[str] = []

    def refund(order_id: str, amount: float) -> str:
        """Refund."""
        sent.append(order_id)
        return "refunded"

    broken = BrokenLedger(store)
    app = react(cast(Checkpointer, broken), tool(effect=cls, dedup="test double")(refund))
    # Stop after the model turn's commit (a write call's intent rides it, planned): the
    # tools step that resumes must read the ledger, and it cannot.
    crash(path, app, USER, "after_checkpoint", nth=1)
    assert sent == []
    broken.begin = broken.read = True
    with pytest.raises(LedgerUnavailableError):
        run(path, app, None, cfg())
    assert sent == []
    assert latest_run(app).status is RunStatus.FAILED
    broken.begin = broken.read = False  # the store is back: the run is resumable
    out = run(path, app, None, cfg())
    assert sent == ["1042"]
    assert tool_messages(out)[0]["content"] == "refunded"


def test_ledger_unavailable_read_tools_run_with_a_warning(
    store: Checkpointer, path: str, caplog: pytest.LogCaptureFixture
) -> None:
    looked: list[str] = []

    @tool(effect="read")
    def lookup(order_id: str, amount: float) -> str:
        """Look up."""
        looked.append(order_id)
        return "delivered"

    broken = BrokenLedger(store)
    broken.begin = broken.read = True
    app = react(cast(Checkpointer, broken), lookup)
    with caplog.at_level(logging.WARNING, logger="oncegraph.ledger"):
        out = run(path, app, USER, cfg())
    assert looked == ["1042"]
    assert tool_messages(out)[0]["content"] == "delivered"
    warnings = [r for r in caplog.records if r.name == "oncegraph.ledger"]
    assert any(r.levelno == logging.WARNING and "lookup" in r.getMessage() for r in warnings)


def test_unrecordable_result_fails_loudly(
    store: Checkpointer, path: str, caplog: pytest.LogCaptureFixture
) -> None:
    sent: list[str] = []

    def charge(order_id: str) -> str:
        sent.append(order_id)
        return "charged"

    def node(state: NodeState) -> NodeState:
        return {"out": effect(charge, "1042")}

    broken = BrokenLedger(store)
    broken.save = True
    app = plain(cast(Checkpointer, broken), node)
    with (
        caplog.at_level(logging.ERROR, logger="oncegraph.ledger"),
        pytest.raises(LedgerWriteError),
    ):
        run(path, app, {}, cfg())
    assert sent == ["1042"]
    assert broken.save_calls >= 2, "the result write is retried before giving up"
    assert slept[-3:] == [0.05, 0.2, 0.8], "with backoff, through the run's sleeper"
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert any(r.name == "oncegraph.ledger" for r in errors)
    (record,) = effects(app, "charge")
    assert record.status is EffectStatus.PENDING  # never continue as if recorded
    assert any(record.effect_id in r.getMessage() for r in errors)


# -- what a record carries; masking ------------------------------------------------------


def test_effect_record_fields(store: Checkpointer, path: str) -> None:
    @tool(effect="irreversible", recipient=lambda args: f"customer:{args['order_id']}")
    def refund(order_id: str, amount: float) -> str:
        """Refund."""
        return "ok"

    app = react(store, refund)
    out = run(path, app, USER, cfg())
    (record,) = effects(app, "refund")
    run_id = latest_run(app).run_id
    assistant = next(m for m in out["messages"] if m["role"] == "assistant")
    command_id = f"{assistant['id']}:call_1"
    assert record.command_id == command_id
    assert record.run_id == run_id and record.thread_id == T
    assert record.effect_class is EffectClass.IRREVERSIBLE
    expected = hashlib.sha256(f"{run_id}:refund:{command_id}".encode()).hexdigest()
    assert record.effect_id == expected
    assert record.request_hash == keyed(store, ARGS)
    assert record.request == ARGS
    assert record.recipient == "customer:1042"
    (attempt,) = record.attempts
    assert attempt.number == 1 and attempt.outcome == "completed"
    assert attempt.ended_at is not None and attempt.started_at <= attempt.ended_at


def test_effects_view_masks_declared_fields(store: Checkpointer, path: str) -> None:
    @tool(effect="irreversible", mask=["card", "token"])
    def pay(order_id: str, card: str) -> dict[str, Any]:
        """Pay."""
        return {"paid": True, "card": card, "nested": {"token": "tok_secret"}}

    calls = [{"id": "call_1", "name": "pay", "args": {"order_id": "1", "card": "4242"}}]
    app = react(store, pay, calls=calls)
    run(path, app, USER, cfg())
    (shown,) = effects(app, "pay")
    assert shown.request == {"order_id": "1", "card": "***"}
    assert shown.result == {"paid": True, "card": "***", "nested": {"token": "***"}}
    (raw,) = [e for e in store_effects(store) if e.effect_type == "pay"]
    assert raw.request["card"] == "4242", "masking is a view; the ledger keeps the request"


# -- model calls are effects of class model ----------------------------------------------


def test_model_calls_are_recorded_and_reused_on_resume(store: Checkpointer, path: str) -> None:
    model = ScriptedModel.turns(
        {"tool_calls": [{"id": "call_1", "name": "refund", "args": ARGS}]}, "done"
    )

    @tool(effect="write", dedup="test double: changes nothing")
    def refund(order_id: str, amount: float) -> str:
        """Refund."""
        return "ok"

    app = react(store, refund, model=model)
    crash(path, app, USER, "after_intent")  # in the tools step, after the model answered
    assert len(model.calls) == 1
    out = run(path, app, None, cfg())
    assert len(model.calls) == 2, "the recorded model answer is reused, not asked again"
    assert out["messages"][-1]["content"] == "done"
    records = [e for e in app.effects(thread_id=T) if e.effect_class is EffectClass.MODEL]
    assert [r.effect_type for r in records] == ["model:scripted"] * 2
    assert all(r.status is EffectStatus.COMPLETED for r in records)
    first = ModelResponse.from_json(records[0].result)
    assert first.tool_calls[0]["name"] == "refund"
    assistant = next(m for m in out["messages"] if m["role"] == "assistant")
    # the id names the run (a hash of its id) and the turn's effect
    run_tag = hashlib.sha256(records[0].run_id.encode()).hexdigest()[:12]
    assert assistant["id"] == f"ai_{run_tag}_{records[0].effect_id[:20]}"
