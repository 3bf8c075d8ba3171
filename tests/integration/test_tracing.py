"""OpenTelemetry spans of a run that crashed and was resumed, and the JSON log format.

The SDK's in-memory exporter collects what oncegraph emits (``use_tracer_provider``, so
no global provider is set for the rest of the test process). A refund is sent, the
process "dies" right after (an in-process crash at a declared point: the crashed run's
spans end with the crash recorded), and the resume reconciles it with the provider.
The card number the tool declared in ``mask=[...]`` appears in no span.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from oncegraph import FaultPlan, Reconciled, current_effect, declare_crash_point, tool
from oncegraph.errors import _CrashSignal
from oncegraph.observe import JsonFormatter, capture_content, use_tracer_provider
from oncegraph.observe.tracing import CAPTURE_ENV
from oncegraph.prebuilt.agent import ReactAgent
from oncegraph.prebuilt.models.scripted import ScriptedModel
from oncegraph.runtime.faults import crash_point
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import EffectRecord, RunStatus
from oncegraph.testing.provider import FakeProvider, ProviderClient

sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

SRC = Path(__file__).parents[2] / "src"
CARD = "4111111111111111"
SENT = declare_crash_point("trace_sent")  # the provider has the charge; nothing recorded
T = "t-trace"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    use_tracer_provider(provider)
    try:
        yield exporter
    finally:
        use_tracer_provider(None)
        provider.shutdown()


@pytest.fixture
def captured() -> Iterator[None]:
    """Tools' arguments and results recorded on their spans (opted in)."""
    capture_content(True)
    try:
        yield
    finally:
        capture_content(None)


def shop(checkpointer: Checkpointer, provider: FakeProvider) -> Any:
    client = ProviderClient(provider.url)

    def find(record: EffectRecord) -> Reconciled:
        found = client.find_by_key(record.effect_id)
        if found is None:
            return Reconciled.not_done()
        return Reconciled.done({"charge": found["id"]}, provider_reference=str(found["id"]))

    @tool(effect="irreversible", recipient="payments", mask=["card"], reconcile=find)
    def refund(order_id: str, card: str) -> dict[str, Any]:
        """Refund an order to a card."""
        key = current_effect().idempotency_key
        charged = client.charge(10, "eur", order_id, idempotency_key=key)
        crash_point(SENT)
        return {"charge": charged["id"], "card": card}

    call = {"id": "c1", "name": "refund", "args": {"order_id": "1042", "card": CARD}}
    model = ScriptedModel.turns({"content": "", "tool_calls": [call]}, "Refunded.")
    return ReactAgent(model=model, tools=[refund]).compile(checkpointer=checkpointer)


def test_crashed_and_resumed_run_shows_its_spans_with_masked_fields(
    checkpointer: Checkpointer,
    spans: InMemorySpanExporter,
    caplog: pytest.LogCaptureFixture,
    captured: None,
) -> None:
    with FakeProvider() as provider:
        app = shop(checkpointer, provider)
        user = {"messages": [{"role": "user", "content": "refund order 1042"}]}
        with pytest.raises(_CrashSignal):
            app.invoke(user, {"thread_id": T, "fault_plan": FaultPlan(SENT)})
        crashed = {s.name for s in spans.get_finished_spans()}
        expected = {"oncegraph.run", "oncegraph.step", "oncegraph.effect", "chat scripted"}
        assert expected | {"execute_tool refund"} <= crashed
        with caplog.at_level(logging.INFO, logger="oncegraph.ledger"):
            out = app.invoke(None, {"thread_id": T})
        assert out["messages"][-1]["content"] == "Refunded."
        assert provider.stats()["performed"] == 1
    finished = spans.get_finished_spans()
    run_id = app.runs(thread_id=T)[0].run_id
    assert app.get_run(run_id).status is RunStatus.COMPLETED

    runs = [s for s in finished if s.name == "oncegraph.run"]
    assert [s.attributes["oncegraph.run.id"] for s in runs] == [run_id, run_id]
    assert runs[0].status.status_code.name == "ERROR"  # the crash is on the first run span
    assert runs[0].attributes["oncegraph.run.status_before"] == "running"

    refunds = [
        s
        for s in finished
        if s.name == "execute_tool refund" and s.attributes["oncegraph.effect.type"] == "refund"
    ]
    assert len(refunds) == 2  # the crashed call and the resumed one
    first, second = refunds
    effect_id = first.attributes["oncegraph.effect.id"]
    assert second.attributes["oncegraph.effect.id"] == effect_id
    assert first.attributes["oncegraph.effect.key"] == effect_id
    assert first.attributes["oncegraph.effect.class"] == "irreversible"
    assert json.loads(first.attributes["oncegraph.effect.request"]) == {
        "order_id": "1042",
        "card": "***",
    }
    assert first.attributes["gen_ai.tool.call.arguments"] == (
        first.attributes["oncegraph.effect.request"]
    )
    assert "charge" in json.loads(second.attributes["gen_ai.tool.call.result"])  # reconciled
    assert [e.name for e in first.events] == ["intent", "exception"]  # then the crash
    assert first.attributes["oncegraph.effect.status"] == "pending"
    names = [e.name for e in second.events]
    assert "attempt" in names and "reconciled" in names
    assert second.attributes["oncegraph.effect.status"] == "completed"
    attempts = [e for e in second.events if e.name == "attempt"]
    assert attempts[0].attributes["oncegraph.attempt.number"] == 1
    reconciled = next(e for e in second.events if e.name == "reconciled")
    assert reconciled.attributes["oncegraph.verdict"] == "done"

    # each step span sits under its run span; model calls under their effect spans
    by_id = {s.context.span_id: s for s in finished}
    for step in (s for s in finished if s.name == "oncegraph.step"):
        assert by_id[step.parent.span_id].name == "oncegraph.run"
    models = [s for s in finished if s.name.startswith("chat ")]
    assert models
    for model in models:
        assert by_id[model.parent.span_id].name == "oncegraph.effect"
        assert by_id[model.parent.span_id].attributes["oncegraph.effect.class"] == "model"
        assert model.attributes["gen_ai.request.model"] == "scripted"
        assert model.attributes["gen_ai.operation.name"] == "chat"

    # the card number is nowhere: not in attributes, not in events
    dumped = json.dumps(
        [
            {
                "attributes": dict(s.attributes or {}),
                "events": [dict(e.attributes or {}) for e in s.events],
            }
            for s in finished
        ],
        default=str,
    )
    assert CARD not in dumped

    # a reconcile is logged, in any process (a worker's log says so)
    logged = [r for r in caplog.records if "reconciled" in r.getMessage()]
    assert logged and effect_id in logged[0].getMessage()


def test_spans_follow_the_genai_conventions_and_keep_content_out_by_default(
    checkpointer: Checkpointer, spans: InMemorySpanExporter
) -> None:
    """``execute_tool``/``chat`` spans with their ``gen_ai.*`` attributes; without the
    opt-in no tool argument or result is on any span; a resumed turn makes no new chat."""
    with FakeProvider() as provider:
        client = ProviderClient(provider.url)

        @tool(effect="write", mask=["card"])
        def pay(order_id: str, card: str) -> str:
            """Pay an order with a card."""
            return str(client.charge(5, "eur", order_id, current_effect().idempotency_key)["id"])

        call = {"id": "call_7", "name": "pay", "args": {"order_id": "77", "card": CARD}}
        model = ScriptedModel.turns(
            {"content": "", "tool_calls": [call], "usage": {"input_tokens": 12, "output_tokens": 3},
             "raw_finish_reason": "tool_calls", "provider_message_id": "resp_1"},
            {"content": "Paid.", "usage": {"input_tokens": 20, "output_tokens": 2}},
        )
        app = ReactAgent(model=model, tools=[pay]).compile(checkpointer=checkpointer)
        app.invoke({"messages": [{"role": "user", "content": "pay 77"}]}, {"thread_id": "g1"})
    finished = spans.get_finished_spans()
    (tool_span,) = [s for s in finished if s.name == "execute_tool pay"]
    assert tool_span.attributes["gen_ai.operation.name"] == "execute_tool"
    assert tool_span.attributes["gen_ai.tool.name"] == "pay"
    assert tool_span.attributes["gen_ai.tool.call.id"] == "call_7"
    assert tool_span.kind.name == "INTERNAL"
    chats = [s for s in finished if s.name == "chat scripted"]
    assert len(chats) == 2 and all(c.kind.name == "CLIENT" for c in chats)
    first = chats[0].attributes
    assert first["gen_ai.operation.name"] == "chat" and first["gen_ai.request.model"] == "scripted"
    assert (first["gen_ai.usage.input_tokens"], first["gen_ai.usage.output_tokens"]) == (12, 3)
    assert list(first["gen_ai.response.finish_reasons"]) == ["tool_calls"]
    assert first["gen_ai.response.id"] == "resp_1"
    for span in finished:  # content is opt-in: no arguments, no results, anywhere
        keys = set(span.attributes or {})
        assert not keys & {"gen_ai.tool.call.arguments", "gen_ai.tool.call.result",
                           "oncegraph.effect.request", "oncegraph.effect.result"}, span.name
    assert CARD not in json.dumps([dict(s.attributes or {}) for s in finished], default=str)


def test_no_spans_and_no_cost_without_a_provider(checkpointer: Checkpointer) -> None:
    from oncegraph.observe import run_span, tracer

    assert tracer() is None  # the API's proxy provider: nothing configured
    assert run_span(object()) is run_span(object())  # one shared no-op context manager


def test_json_log_lines_carry_the_extra_fields() -> None:
    record = logging.LogRecord(
        "oncegraph.worker", logging.WARNING, __file__, 1, "run %s", ("r1",), None
    )
    record.run_id = "r1"
    record.taken_from = "w1"
    line = json.loads(JsonFormatter().format(record))
    assert line["message"] == "run r1"
    assert line["level"] == "WARNING" and line["logger"] == "oncegraph.worker"
    assert line["run_id"] == "r1" and line["taken_from"] == "w1"
    assert "ts" in line and "pid" in line


GLOBAL_PROVIDER = """
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from oncegraph import tool
from oncegraph.observe import tracer
from oncegraph.prebuilt.agent import ReactAgent
from oncegraph.prebuilt.models.scripted import ScriptedModel
from oncegraph.storage.checkpointer import InMemoryCheckpointer

assert tracer() is None  # looked up before any provider exists: nothing is traced
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)  # the usual, global way


@tool(effect="write", mask=["token"])
def notify(user: str, token: str) -> str:
    '''Notify a user.'''
    return "sent"


call = {"id": "c1", "name": "notify", "args": {"user": "ana", "token": "s3cret"}}
agent = ReactAgent(
    model=ScriptedModel.turns({"content": "", "tool_calls": [call]}, "done"), tools=[notify]
).compile(checkpointer=InMemoryCheckpointer())
agent.invoke({"messages": [{"role": "user", "content": "hi"}]}, {"thread_id": "t"})
spans = exporter.get_finished_spans()
print(sorted({s.name for s in spans}))
effect = next(s for s in spans if s.attributes.get("oncegraph.effect.type") == "notify")
print(effect.attributes["oncegraph.effect.request"])
print(effect.attributes["oncegraph.effect.status"])
"""


def test_a_global_tracer_provider_set_later_is_used(tmp_path: Path) -> None:
    script = tmp_path / "traced.py"
    script.write_text(GLOBAL_PROVIDER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), *sys.path])}
    env[CAPTURE_ENV] = "true"  # the conventions' opt-in for arguments and results
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300
    )
    assert out.returncode == 0, out.stderr
    names, request, status = out.stdout.splitlines()[-3:]
    assert names == str(
        ["chat scripted", "execute_tool notify", "oncegraph.effect", "oncegraph.run",
         "oncegraph.step"]
    )
    assert json.loads(request) == {"user": "ana", "token": "***"}
    assert status == "completed"
