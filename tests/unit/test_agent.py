"""ReactAgent, in process, on the memory and SQLite stores: the turn limit, approval
before chosen tools (approve / edit / reject, with the approver kept in state),
structured output, model retries with backoff and fallback models (one ledger effect,
recorded, never asked again on resume) and token streaming through ``ctx.emit``.

Models are :class:`ScriptedModel` (or small ChatModels defined here); waits between
retries go through ``config["sleep"]``, so nothing here sleeps. Crashes are the
in-process ``FaultPlan`` signal; the SIGKILL versions are in
``tests/integration/test_agent_recovery.py``.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from typing_extensions import TypedDict  # pydantic needs it for TypedDicts before 3.12

from oncegraph import Command, FaultPlan, tool
from oncegraph.app import CompiledGraph
from oncegraph.errors import (
    ConfigError,
    ModelCallError,
    StructuredOutputError,
    TurnLimitError,
    _CrashSignal,
)
from oncegraph.messages import Message, ToolSpec
from oncegraph.prebuilt.agent import FINISH_TEXT, ReactAgent
from oncegraph.prebuilt.models import ModelResponse, ScriptedModel
from oncegraph.runtime.config import RunConfig
from oncegraph.storage.checkpointer import InMemoryCheckpointer, SqliteCheckpointer
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import EffectClass, EffectStatus, RunStatus
from oncegraph.tools import EffectRetry

RunPath = Callable[[CompiledGraph, Any, Mapping[str, Any] | None], dict[str, Any]]  # conftest
T = "t-agent"
USER = {"messages": [{"role": "user", "content": "Please refund order 1042."}]}
REFUND = {"order_id": "1042", "amount": 59.0}
NO_JITTER = EffectRetry(max_attempts=3, initial_delay=0.1, backoff=2.0, jitter=0.0)


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Checkpointer]:
    made: Checkpointer = (
        InMemoryCheckpointer()
        if request.param == "memory"
        else SqliteCheckpointer(tmp_path / "agent.db")
    )
    yield made
    asyncio.run(made.aclose())


class Shop:
    """Tools that count what really ran."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, dict[str, Any]]] = []

        @tool(effect="read")
        def lookup_order(order_id: str) -> dict[str, Any]:
            """Look up an order by id."""
            self.ran.append(("lookup_order", {"order_id": order_id}))
            return {"order_id": order_id, "total": 59.0}

        @tool(dedup="test double: changes nothing a repeat could double")
        def refund_order(order_id: str, amount: float) -> str:
            """Refund an order."""
            self.ran.append(("refund_order", {"order_id": order_id, "amount": amount}))
            return f"Refunded {amount:.2f} for order {order_id}"

        self.tools: list[Any] = [lookup_order, refund_order]

    def count(self, name: str) -> int:
        return sum(1 for tool_name, _ in self.ran if tool_name == name)


def call(name: str, args: Mapping[str, Any], call_id: str = "call_1") -> dict[str, Any]:
    return {"id": call_id, "name": name, "args": dict(args)}


def asks(*calls: dict[str, Any]) -> dict[str, Any]:
    return {"tool_calls": list(calls)}


def cfg(**extra: Any) -> dict[str, Any]:
    return {"thread_id": T, **extra}


def interrupt_values(out: Mapping[str, Any]) -> list[Any]:
    """The open questions of a paused run (dicts today, ``Interrupt`` objects later)."""
    found = out.get("__interrupt__") or []
    return [i["value"] if isinstance(i, Mapping) else i.value for i in found]


def model_records(app: CompiledGraph) -> list[Any]:
    return [e for e in app.effects(thread_id=T) if e.effect_class is EffectClass.MODEL]


# -- the turn limit --------------------------------------------------------------------------


def looping_model() -> ScriptedModel:
    """Asks for the lookup on every turn, forever."""
    return ScriptedModel(lambda messages, tools: asks(call("lookup_order", {"order_id": "1"})))


def test_turn_limit_error_names_the_limit_and_calls_nothing_more(
    store: Checkpointer, run_path: RunPath
) -> None:
    shop = Shop()
    model = looping_model()
    app = ReactAgent(model, tools=shop.tools, max_turns=2).compile(checkpointer=store)
    with pytest.raises(TurnLimitError) as caught:
        run_path(app, USER, cfg())
    text = str(caught.value)
    assert "max_turns=2" in text and "ReactAgent(..., max_turns=N)" in text
    assert "lookup_order" in text  # what the last turn wanted, which did not run
    assert len(model.calls) == 2, "the limit counts model turns"
    assert shop.count("lookup_order") == 1, "the second turn's tool call did not run"
    (latest,) = app.runs(thread_id=T)
    assert latest.status is RunStatus.FAILED


def test_raising_the_limit_continues_without_asking_the_model_again(store: Checkpointer) -> None:
    shop = Shop()
    first = looping_model()
    app = ReactAgent(first, tools=shop.tools, max_turns=2).compile(checkpointer=store)
    with pytest.raises(TurnLimitError):
        app.invoke(USER, cfg())
    assert len(first.calls) == 2
    # a new process with a higher limit: the recorded second turn is reused
    again = ScriptedModel(
        lambda messages, tools: (
            asks(call("lookup_order", {"order_id": "1"}))
            if sum(m["role"] == "assistant" for m in messages) < 3
            else "done"
        )
    )
    app = ReactAgent(again, tools=shop.tools, max_turns=5).compile(checkpointer=store)
    out = app.invoke(None, cfg())
    assert out["messages"][-1]["content"] == "done"
    assert len(again.calls) == 2, "turn 2 came from the ledger; turns 3 and 4 were asked"
    assert shop.count("lookup_order") == 3


def test_turn_limit_finish_ends_with_a_message(store: Checkpointer, run_path: RunPath) -> None:
    shop = Shop()
    model = looping_model()
    app = ReactAgent(model, tools=shop.tools, max_turns=1, on_max_turns="finish").compile(
        checkpointer=store
    )
    out = run_path(app, USER, cfg())
    last = out["messages"][-1]
    assert last["role"] == "assistant" and not last.get("tool_calls")
    assert last["content"] == FINISH_TEXT.format(max_turns=1)
    assert len(model.calls) == 1 and shop.ran == []
    (latest,) = app.runs(thread_id=T)
    assert latest.status is RunStatus.COMPLETED


def test_turn_limit_is_per_run(store: Checkpointer) -> None:
    shop = Shop()
    model = ScriptedModel(
        lambda messages, tools: (
            "ok"
            if messages[-1]["role"] == "tool"
            else asks(call("lookup_order", {"order_id": "1"}))
        )
    )
    app = ReactAgent(model, tools=shop.tools, max_turns=2).compile(checkpointer=store)
    for n in range(3):  # each run uses two turns of its own budget of two
        app.invoke({"messages": [{"role": "user", "content": f"question {n}"}]}, cfg())
    assert len(model.calls) == 6 and shop.count("lookup_order") == 3


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"max_turns": 0}, "max_turns must be a positive integer"),
        ({"on_max_turns": "stop"}, "on_max_turns must be 'error' or 'finish'"),
        ({"response_retries": -1}, "response_retries must be an integer >= 0"),
    ],
)
def test_bad_limits_are_config_errors(options: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        ReactAgent(ScriptedModel(["x"]), **options)


# -- approval before chosen tools ------------------------------------------------------------


def approval_app(
    store: Checkpointer, shop: Shop, final: str = "All done.", **options: Any
) -> tuple[CompiledGraph, ScriptedModel]:
    model = ScriptedModel.turns(
        asks(call("lookup_order", {"order_id": "1042"}, "c1"), call("refund_order", REFUND, "c2")),
        final,
    )
    app = ReactAgent(
        model,
        tools=shop.tools,
        interrupt_on=options.pop("interrupt_on", {"refund_order": True, "lookup_order": False}),
        **options,
    ).compile(checkpointer=store)
    return app, model


def test_approve_asks_before_any_call_runs_and_records_the_approver(
    store: Checkpointer, run_path: RunPath
) -> None:
    shop = Shop()
    app, model = approval_app(store, shop)
    out = run_path(app, USER, cfg())
    (question,) = interrupt_values(out)
    assert shop.ran == [], "nothing of the turn runs before the decision"
    (action,) = question["action_requests"]
    assert action["name"] == "refund_order" and action["args"] == REFUND
    assert action["tool_call_id"] == "c2"
    assert action["description"].startswith("Tool execution requires approval")
    (review,) = question["review_configs"]
    assert review["action_name"] == "refund_order"
    assert review["allowed_decisions"] == ["approve", "edit", "reject"]
    assert review["args_schema"]["required"] == ["order_id", "amount"]

    answer = {"decisions": [{"type": "approve"}], "approver": "alice@shop"}
    out = run_path(app, Command(resume=answer), cfg())
    assert out["messages"][-1]["content"] == "All done."
    assert sorted(name for name, _ in shop.ran) == ["lookup_order", "refund_order"]
    assert ("refund_order", REFUND) in shop.ran  # the two calls run in parallel
    (record,) = out["approvals"]
    assistant = out["messages"][1]
    assert record == {
        "run_id": app.runs(thread_id=T)[0].run_id,
        "message_id": assistant["id"],
        "tool_call_id": "c2",
        "tool": "refund_order",
        "decision": "approve",
        "approver": "alice@shop",
        "args": REFUND,
    }
    assert len(model.calls) == 2
    # the decision is kept in the committed history, where an auditor reads it
    history = list(app.get_state_history(cfg()))
    assert any(s.values.get("approvals") == [record] for s in history)


def test_edit_runs_the_validated_edited_arguments_once_they_are_approved(
    store: Checkpointer,
) -> None:
    shop = Shop()
    app, _ = approval_app(store, shop)
    (first,) = interrupt_values(app.invoke(USER, cfg()))
    edited = {"order_id": "1042", "amount": "40"}  # coerced to 40.0 for the tool
    answer = {
        "decisions": [
            {
                "type": "edit",
                "edited_action": {"name": "refund_order", "args": edited},
                "approver": "bob",
            }
        ],
        "request_hash": first["request_hash"],
    }
    out = app.invoke(Command(resume=answer), cfg())
    (second,) = interrupt_values(out)  # the edit is a new request, asked on its own
    assert shop.ran == [], "nothing runs before the edited call is approved"
    (action,) = second["action_requests"]
    assert action["args"] == edited and action["effect_id"] == first["action_requests"][0][
        "effect_id"
    ], "the same call (the same effect id), with other arguments"
    assert second["request_hash"] != first["request_hash"]
    stale = {"decisions": [{"type": "approve"}], "request_hash": first["request_hash"]}
    out = app.invoke(Command(resume=stale), cfg())
    (again,) = interrupt_values(out)
    assert "nothing ran" in again["error"] and shop.ran == []  # the old request's approval
    fresh = {"decisions": [{"type": "approve"}], "approver": "bob"}
    out = app.invoke(Command(resume={**fresh, "request_hash": again["request_hash"]}), cfg())
    assert ("refund_order", {"order_id": "1042", "amount": 40.0}) in shop.ran
    assistant = out["messages"][1]
    assert assistant["tool_calls"][1]["args"] == edited, "the conversation shows what ran"
    refund = next(e for e in app.effects(thread_id=T) if e.effect_type == "refund_order")
    assert refund.request == edited and refund.status is EffectStatus.COMPLETED
    (record,) = out["approvals"]
    assert refund.command_id == f"{record['message_id']}:{record['tool_call_id']}"
    assert (record["decision"], record["approver"]) == ("edit", "bob")
    assert (record["args"], record["edited_args"]) == (REFUND, edited)


def test_an_edit_that_does_not_validate_is_asked_again(store: Checkpointer) -> None:
    shop = Shop()
    app, _ = approval_app(store, shop)
    app.invoke(USER, cfg())
    bad = {"type": "edit", "edited_action": {"name": "refund_order", "args": {"amount": "x"}}}
    out = app.invoke(Command(resume={"decisions": [bad], "approver": "bob"}), cfg())
    (question,) = interrupt_values(out)
    assert "order_id" in question["error"] and "amount" in question["error"]
    assert shop.ran == []
    good = {"type": "edit", "edited_action": {"name": "refund_order", "args": {**REFUND}}}
    out = app.invoke(Command(resume={"decisions": [good], "approver": "bob"}), cfg())
    assert shop.count("refund_order") == 0  # the edited call is asked about first
    out = app.invoke(Command(resume={"decisions": [{"type": "approve"}], "approver": "ann"}), cfg())
    assert shop.count("refund_order") == 1
    assert [r["decision"] for r in out["approvals"]] == ["edit"]


def test_reject_never_runs_the_call_and_the_model_reads_why(store: Checkpointer) -> None:
    shop = Shop()
    app, model = approval_app(store, shop, final="Understood, no refund.")
    app.invoke(USER, cfg())
    answer = {
        "decisions": [{"type": "reject", "message": "Refunds over 50 need a manager."}],
        "approver": "carol",
    }
    out = app.invoke(Command(resume=answer), cfg())
    assert shop.count("refund_order") == 0 and shop.count("lookup_order") == 1
    assert out["messages"][-1]["content"] == "Understood, no refund."
    seen = model.calls[-1]  # what the model read on its second turn
    reply = next(m for m in seen if m.get("tool_call_id") == "c2")
    assert reply["status"] == "error"
    assert "Refunds over 50 need a manager." in reply["content"]
    assert not [e for e in app.effects(thread_id=T) if e.effect_type == "refund_order"]
    (record,) = out["approvals"]
    assert record["decision"] == "reject" and record["approver"] == "carol"
    assert record["message"] == "Refunds over 50 need a manager."


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        ({"decisions": []}, "1 call(s) await a decision but the answer has 0"),
        ({"decisions": [{"type": "edit"}]}, "'edit' is not allowed for this tool"),
        ({"decisions": [{"type": "maybe"}]}, "unknown type 'maybe'"),
        ("yes", "answer with {'decisions'"),
        ({"decisions": [{"type": "approve"}], "who": "x"}, "unknown answer key(s) ['who']"),
    ],
)
def test_an_answer_that_does_not_fit_is_asked_again(
    store: Checkpointer, answer: Any, error: str
) -> None:
    shop = Shop()
    interrupt_on = {"refund_order": {"allowed_decisions": ["approve", "reject"]}}
    app, _ = approval_app(store, shop, interrupt_on=interrupt_on)
    app.invoke(USER, cfg())
    out = app.invoke(Command(resume=answer), cfg())
    (question,) = interrupt_values(out)
    assert error in question["error"]
    assert question["review_configs"][0]["allowed_decisions"] == ["approve", "reject"]
    assert "args_schema" not in question["review_configs"][0], "no edits, no schema"
    assert shop.ran == []
    out = app.invoke(Command(resume={"decisions": [{"type": "approve"}]}), cfg())
    assert shop.count("refund_order") == 1
    assert out["approvals"][0]["approver"] is None


def test_require_approver_refuses_an_anonymous_answer(store: Checkpointer) -> None:
    shop = Shop()
    app, _ = approval_app(store, shop, require_approver=True)
    app.invoke(USER, cfg())
    out = app.invoke(Command(resume={"decisions": [{"type": "approve"}]}), cfg())
    (question,) = interrupt_values(out)
    assert "name who decided" in question["error"]
    out = app.invoke(Command(resume={"decisions": [{"type": "approve", "approver": "dan"}]}), cfg())
    assert out["approvals"][0]["approver"] == "dan" and shop.count("refund_order") == 1


def test_a_crash_after_the_answer_neither_asks_again_nor_repeats_the_call(
    store: Checkpointer,
) -> None:
    shop = Shop()
    app, _ = approval_app(store, shop)
    app.invoke(USER, cfg())
    answer = {"decisions": [{"type": "approve"}], "approver": "alice"}
    with pytest.raises(_CrashSignal):  # refund intent committed, not yet called
        app.invoke(Command(resume=answer), cfg(fault_plan=FaultPlan("after_intent")))
    assert shop.count("refund_order") == 0
    out = app.invoke(None, cfg())
    assert "__interrupt__" not in out, "the kept answer is used, not asked for again"
    assert shop.count("refund_order") == 1
    assert [r["approver"] for r in out["approvals"]] == ["alice"]


def test_description_and_config_errors() -> None:
    shop = Shop()
    described = ReactAgent(
        ScriptedModel(["x"]),
        tools=shop.tools,
        interrupt_on={
            "refund_order": {
                "allowed_decisions": ["approve"],
                "description": lambda c: f"refund {c['args']['amount']}?",
            }
        },
    )
    request = described.approvals.request([call("refund_order", REFUND)])  # type: ignore[list-item]
    assert request["action_requests"][0]["description"] == "refund 59.0?"
    with pytest.raises(ConfigError, match="not one of the agent's tools"):
        ReactAgent(ScriptedModel(["x"]), tools=shop.tools, interrupt_on={"refnud": True})
    with pytest.raises(ConfigError, match="allowed_decisions"):
        ReactAgent(
            ScriptedModel(["x"]),
            tools=shop.tools,
            interrupt_on={"refund_order": {"allowed_decisions": ["ok"]}},  # type: ignore[dict-item]
        )


# -- structured output -----------------------------------------------------------------------


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Verdict(BaseModel):
    """The outcome of the request."""

    order_id: str
    refunded: float
    color: Color = Color.RED


def test_structured_answer_through_the_answer_tool(store: Checkpointer, run_path: RunPath) -> None:
    model = ScriptedModel.turns(
        asks(call("Verdict", {"order_id": "1042", "refunded": "59", "color": "blue"}))
    )
    app = ReactAgent(model, response_format=Verdict).compile(checkpointer=store)
    out = run_path(app, USER, cfg())
    assert out["structured_response"] == Verdict(order_id="1042", refunded=59.0, color=Color.BLUE)
    (spec,) = model.tools_seen[0]
    assert spec["name"] == "Verdict" and spec["description"] == "The outcome of the request."
    assert spec["parameters"]["required"] == ["order_id", "refunded"]
    last = out["messages"][-1]
    assert last["role"] == "tool" and last["tool_call_id"] == "call_1"


def test_structured_answer_as_json_text(store: Checkpointer) -> None:
    text = '```json\n{"order_id": "1042", "refunded": 10}\n```'
    app = ReactAgent(ScriptedModel.turns(text), response_format=Verdict).compile(checkpointer=store)
    out = app.invoke(USER, cfg())
    assert out["structured_response"] == Verdict(order_id="1042", refunded=10.0)


def test_an_invalid_answer_goes_back_to_the_model(store: Checkpointer) -> None:
    model = ScriptedModel.turns(
        asks(call("Verdict", {"order_id": "1042"})),  # refunded missing
        "I refunded it.",  # plain text
        asks(call("Verdict", {"order_id": "1042", "refunded": 59})),
    )
    app = ReactAgent(model, response_format=Verdict, response_retries=2).compile(checkpointer=store)
    out = app.invoke(USER, cfg())
    assert out["structured_response"].refunded == 59.0
    second, third = model.calls[1], model.calls[2]
    assert second[-1]["role"] == "tool" and second[-1]["status"] == "error"
    assert "refunded" in second[-1]["content"] and "Field required" in second[-1]["content"]
    assert third[-1]["role"] == "user" and "calling the tool Verdict" in third[-1]["content"]


def test_retries_are_bounded(store: Checkpointer) -> None:
    model = ScriptedModel(lambda messages, tools: asks(call("Verdict", {"refunded": "lots"})))
    app = ReactAgent(model, response_format=Verdict, response_retries=1).compile(checkpointer=store)
    with pytest.raises(StructuredOutputError, match=r"in 2 tries \(response_retries=1\)"):
        app.invoke(USER, cfg())
    assert len(model.calls) == 2


def test_the_answer_tool_must_be_called_alone(store: Checkpointer) -> None:
    shop = Shop()
    model = ScriptedModel.turns(
        asks(call("lookup_order", {"order_id": "1"}, "a"), call("Verdict", {}, "b")),
        asks(call("Verdict", {"order_id": "1", "refunded": 0}, "c")),
    )
    app = ReactAgent(model, tools=shop.tools, response_format=Verdict).compile(checkpointer=store)
    out = app.invoke(USER, cfg())
    assert shop.ran == [], "a turn that mixes the answer with tools runs none of them"
    replies = [m for m in model.calls[1] if m["role"] == "tool"]
    assert [r["tool_call_id"] for r in replies] == ["a", "b"]
    assert all("alone" in r["content"] for r in replies)
    assert out["structured_response"].order_id == "1"


class Ticket(TypedDict):
    title: str
    priority: int


@pytest.mark.parametrize(
    "fmt",
    [
        Ticket,
        {
            "title": "Ticket",
            "type": "object",
            "properties": {"title": {"type": "string"}, "priority": {"type": "integer"}},
            "required": ["title", "priority"],
        },
    ],
    ids=["typeddict", "json-schema"],
)
def test_typeddict_and_json_schema_formats(store: Checkpointer, fmt: Any) -> None:
    model = ScriptedModel.turns(
        asks(call("Ticket", {"title": "refund", "priority": "high"})),
        asks(call("Ticket", {"title": "refund", "priority": 2})),
    )
    app = ReactAgent(model, response_format=fmt).compile(checkpointer=store)
    out = app.invoke(USER, cfg())
    assert out["structured_response"] == {"title": "refund", "priority": 2}
    assert "priority" in model.calls[1][-1]["content"]


def test_structured_response_keeps_its_type_in_a_fresh_store(tmp_path: Path) -> None:
    path = tmp_path / "typed.db"
    model = ScriptedModel.turns(asks(call("Verdict", {"order_id": "1", "refunded": 1})))
    first = SqliteCheckpointer(path)
    ReactAgent(model, response_format=Verdict).compile(checkpointer=first).invoke(USER, cfg())
    asyncio.run(first.aclose())
    second = SqliteCheckpointer(path)
    app = ReactAgent(model, response_format=Verdict).compile(checkpointer=second)
    value = app.get_state(cfg()).values["structured_response"]
    assert isinstance(value, Verdict) and value.color is Color.RED
    asyncio.run(second.aclose())


def test_response_format_errors() -> None:
    with pytest.raises(ConfigError, match="has the name of a tool"):
        ReactAgent(ScriptedModel(["x"]), tools=Shop().tools, response_format=_lookup_named())
    with pytest.raises(ConfigError, match="must describe a JSON object"):
        ReactAgent(ScriptedModel(["x"]), response_format=int)
    with pytest.raises(ConfigError, match='must have "type": "object"'):
        ReactAgent(ScriptedModel(["x"]), response_format={"type": "string"})


def _lookup_named() -> type:
    return type("lookup_order", (BaseModel,), {"__annotations__": {"x": int}})


# -- model retries and fallbacks ---------------------------------------------------------------


class Sleeps:
    """A fake ``config["sleep"]`` that records the waits."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


class Flaky:
    """A ChatModel that raises for its first ``failures`` calls, then answers ``answer``."""

    def __init__(self, name: str, failures: int, answer: str = "fine") -> None:
        self.name = name
        self.failures = failures
        self.answer = answer
        self.calls = 0

    async def generate(
        self, messages: Sequence[Message], *, tools: Sequence[ToolSpec]
    ) -> ModelResponse:
        self.calls += 1
        if self.calls <= self.failures:
            raise ConnectionError(f"{self.name} unavailable ({self.calls})")
        return ModelResponse(content=self.answer, provider_message_id=f"{self.name}-1")


def test_retries_wait_the_policy_backoff_and_are_recorded(store: Checkpointer) -> None:
    model = Flaky("flaky", failures=2)
    sleeps = Sleeps()
    app = ReactAgent(model, model_retry=NO_JITTER).compile(checkpointer=store)
    out = app.invoke(USER, cfg(sleep=sleeps))
    assert out["messages"][-1]["content"] == "fine"
    assert model.calls == 3 and sleeps.waits == [0.1, 0.2]
    (record,) = model_records(app)
    assert record.status is EffectStatus.COMPLETED
    assert [a.outcome for a in record.attempts] == ["failed", "failed", "completed"]
    assert "flaky unavailable (1)" in (record.attempts[0].error or "")


def test_fallback_model_answers_after_the_primary_fails(store: Checkpointer) -> None:
    primary = Flaky("primary", failures=99)
    backup = Flaky("backup", failures=0, answer="from the backup")
    sleeps = Sleeps()
    app = ReactAgent(
        primary,
        model_retry=EffectRetry(max_attempts=2, initial_delay=0.5, jitter=0.0),
        fallback_models=[backup],
    ).compile(checkpointer=store)
    out = app.invoke(USER, cfg(sleep=sleeps))
    assert out["messages"][-1]["content"] == "from the backup"
    assert (primary.calls, backup.calls) == (2, 1)
    assert sleeps.waits == [0.5, 0.0], "backoff within a model; the next model does not wait"
    (record,) = model_records(app)
    assert record.effect_type == "model:primary", "the effect is the turn's, whoever answered"
    assert record.request["fallbacks"] == ["backup"]
    assert ModelResponse.from_json(record.result).model == "backup"
    assert [a.outcome for a in record.attempts] == ["failed", "failed", "completed"]


def test_every_model_failing_is_a_model_call_error_naming_each(store: Checkpointer) -> None:
    primary, backup = Flaky("primary", failures=99), Flaky("backup", failures=99)
    app = ReactAgent(
        primary, model_retry=EffectRetry(max_attempts=1), fallback_models=[backup]
    ).compile(checkpointer=store)
    with pytest.raises(ModelCallError) as caught:
        app.invoke(USER, cfg(sleep=Sleeps()))
    text = str(caught.value)
    assert "primary: ConnectionError: primary unavailable (1)" in text
    assert "backup: ConnectionError: backup unavailable (1)" in text
    assert isinstance(caught.value.__cause__, ConnectionError)
    (latest,) = app.runs(thread_id=T)
    assert latest.status is RunStatus.FAILED
    (record,) = model_records(app)
    assert record.status is EffectStatus.FAILED and len(record.attempts) == 2
    backup.failures = 0  # the provider is back: continuing the run asks again
    out = app.invoke(None, cfg(sleep=Sleeps()))
    assert out["messages"][-1]["content"] == "fine"


@pytest.mark.parametrize(("failures", "asked_again"), [(1, False), (0, True)])
def test_a_retried_turn_is_committed_at_once(
    store: Checkpointer, failures: int, asked_again: bool
) -> None:
    # A crash between the model's answer and its step's commit: a first-try answer rides
    # the step's commit (and is asked again), a retried one was committed when it came.
    model = Flaky("flaky", failures=failures)
    app = ReactAgent(model, model_retry=NO_JITTER).compile(checkpointer=store)
    with pytest.raises(_CrashSignal):
        app.invoke(USER, cfg(sleep=Sleeps(), fault_plan=FaultPlan("before_checkpoint")))
    calls = model.calls
    out = app.invoke(None, cfg(sleep=Sleeps()))
    assert out["messages"][-1]["content"] == "fine"
    assert model.calls == calls + (1 if asked_again else 0)


def test_fallback_strings_are_resolved_with_their_provider() -> None:
    with pytest.raises(ConfigError, match="cannot tell the provider"):
        ReactAgent(ScriptedModel(["x"]), fallback_models=["gpt-4o"])


# -- token streaming through ctx.emit -------------------------------------------------------------


class Collect:
    """An ``emit`` that streams ``modes`` and keeps what it receives."""

    def __init__(self, *modes: str) -> None:
        self.modes = frozenset(modes)
        self.events: list[tuple[str, Any]] = []

    def __call__(self, mode: str, payload: Any) -> None:
        self.events.append((mode, payload))

    def tokens(self, node: str = "agent") -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """The ``messages`` chunks of ``node`` (the tools node's answers stream too)."""
        return [
            payload
            for mode, payload in self.events
            if mode == "messages" and payload[1].get("langgraph_node") == node
        ]


class CountingScripted(ScriptedModel):
    """Counts which entry point the agent used."""

    def __init__(self, *responses: Any) -> None:
        super().__init__(list(responses))
        self.streamed = 0

    async def generate_stream(self, messages: Any, *, tools: Any, on_text: Any) -> ModelResponse:
        self.streamed += 1
        return await super().generate_stream(messages, tools=tools, on_text=on_text)


def run_with(app: CompiledGraph, inp: Any, emit: Collect, **config: Any) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        result = await app.service.run(inp, RunConfig.parse(cfg(**config)), emit)
        return result.output()

    return asyncio.run(go())


def test_tokens_are_emitted_with_the_final_message_id(store: Checkpointer) -> None:
    shop = Shop()
    model = CountingScripted(
        {"content": "Let me look.", "tool_calls": [call("lookup_order", {"order_id": "1"})]},
        "Order 1 costs 59.00 in total.",
    )
    app = ReactAgent(model, tools=shop.tools).compile(checkpointer=store)
    emit = Collect("messages")
    out = run_with(app, USER, emit)
    tokens = emit.tokens()
    assistants = [m for m in out["messages"] if m["role"] == "assistant"]
    (run,) = app.runs(thread_id=T)
    for message in assistants:
        mine = [(c, meta) for c, meta in tokens if c["id"] == message["id"]]
        assert "".join(c["content"] for c, _ in mine) == message["content"]
        assert len(mine) > 1, "streamed in pieces, not as one message"
        for chunk, meta in mine:
            assert chunk["role"] == "assistant"
            assert meta["langgraph_node"] == "agent" and meta["run_id"] == run.run_id
    steps = {meta["langgraph_step"] for _, meta in tokens}
    assert len(steps) == 2, "each turn is its own step"
    assert model.streamed == 2
    # the ledger keeps whole messages only
    assert [ModelResponse.from_json(r.result).content for r in model_records(app)] == [
        m["content"] for m in assistants
    ]


def test_without_the_messages_mode_the_model_is_not_streamed(store: Checkpointer) -> None:
    model = CountingScripted("hello there", "hello again")
    app = ReactAgent(model).compile(checkpointer=store)
    emit = Collect("values", "updates")
    run_with(app, USER, emit)
    assert model.streamed == 0 and emit.tokens() == []
    app.invoke({"messages": [{"role": "user", "content": "again"}]}, cfg())
    assert model.streamed == 0


def test_a_streamed_turn_is_not_asked_again_after_a_crash(store: Checkpointer) -> None:
    shop = Shop()
    model = CountingScripted(
        {"content": "Checking.", "tool_calls": [call("lookup_order", {"order_id": "1"})]},
        "Done.",
    )
    app = ReactAgent(model, tools=shop.tools).compile(checkpointer=store)
    emit = Collect("messages")
    with pytest.raises(_CrashSignal):  # in the tools step, after the streamed turn committed
        run_with(app, USER, emit, fault_plan=FaultPlan("before_checkpoint", 2))
    assert len(model.calls) == 1
    resumed = Collect("messages")
    out = run_with(app, None, resumed)
    assert len(model.calls) == 2, "the streamed turn came from the ledger"
    assert out["messages"][-1]["content"] == "Done."
    assert "".join(c["content"] for c, _ in resumed.tokens()) == "Done."


@pytest.mark.parametrize("mode", ["evidence", "simulation"])
def test_a_rejected_call_keeps_its_message_id_in_a_recorded_replay(
    store: Checkpointer, mode: str
) -> None:
    shop = Shop()
    app, _ = approval_app(store, shop, final="Understood, no refund.")
    app.invoke(USER, cfg())
    answer = {"decisions": [{"type": "reject", "message": "No."}], "approver": "carol"}
    out = app.invoke(Command(resume=answer), cfg())
    run = app.runs(thread_id=T)[0]
    doubles = {"lookup_order": lambda order_id: {"order_id": order_id, "total": 59.0}}
    replayed = app.replay(
        run.run_id,
        mode=mode,
        reason="audit",
        actor="cy",
        doubles=doubles if mode == "simulation" else None,
    )

    def replies(messages: list[Any]) -> dict[str, str]:
        return {m["tool_call_id"]: m["id"] for m in messages if m.get("role") == "tool"}

    assert replies(replayed.result["messages"]) == replies(out["messages"])
    assert set(replies(out["messages"])) == {"c1", "c2"}
    assert shop.count("refund_order") == 0
