"""Guarantee 14: a tool's ``mask=[...]`` fields are masked everywhere a person looks.

A card number given to a ``mask=["card"]`` tool must not appear in the repr of
``get_state``, ``get_state_history``, ``effects()``, ``audit()``, ``runs()`` or
``get_run()``: not in tool-call arguments, the model effect's recorded response, an
error or an attempt's error, an approval question, the user's own message, nor the run's
input. The stored data stays complete (resume needs it). Every backend.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypedDict

import pytest

from oncegraph import END, START, Command, StateGraph, effect, tool
from oncegraph.ledger.retry import EffectRetry
from oncegraph.prebuilt.agent import ReactAgent
from oncegraph.prebuilt.models.scripted import ScriptedModel
from oncegraph.runs.masking import MASK
from oncegraph.runtime.portal import run_sync
from oncegraph.storage.protocols import Checkpointer

CARD = "4111111111111111"
T = "t-mask"


def _plain(value: Any) -> Any:
    """``value`` as plain data: records' fields as they are (their own reprs mask)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _text(value: Any) -> str:
    return repr(_plain(value))


def _views(app: Any, thread_id: str) -> dict[str, str]:
    runs = app.runs(thread_id=thread_id)
    return {
        "get_state": _text(app.get_state({"thread_id": thread_id})),
        "get_state_history": _text(list(app.get_state_history({"thread_id": thread_id}))),
        "effects": _text(app.effects(thread_id=thread_id)),
        "audit": _text(app.audit(thread_id=thread_id)),
        "runs": _text(runs),
        "get_run": _text([app.get_run(r.run_id) for r in runs]),
    }


def _leaks(app: Any, thread_id: str) -> list[str]:
    return [name for name, text in _views(app, thread_id).items() if CARD in text]


def _stored(store: Checkpointer, thread_id: str) -> str:
    return _text(run_sync(store.list_effects(thread_id=thread_id), "list_effects"))


def test_agent_views_never_show_the_masked_card(checkpointer: Checkpointer) -> None:
    @tool(effect="irreversible", recipient="payments", mask=["card"])
    def refund(order_id: str, card: str) -> str:
        """Refund an order to a card."""
        return "ch_1"

    @tool(mask=["card"], retry=EffectRetry(max_attempts=2, initial_delay=0), dedup="fails")
    def verify(card: str) -> str:
        """Check a card."""
        raise ValueError(f"card {card} was declined by the issuer")

    model = ScriptedModel.turns(
        {"content": "", "tool_calls": [{"id": "c0", "name": "verify", "args": {"card": CARD}}]},
        {
            "content": "",
            "tool_calls": [
                {"id": "c1", "name": "refund", "args": {"order_id": "1042", "card": CARD}}
            ],
        },
        "Refunded.",
    )
    app = ReactAgent(
        model=model, tools=[refund, verify], interrupt_on={"refund": True}
    ).compile(checkpointer=checkpointer)
    cfg = {"thread_id": T}
    user = {"messages": [{"role": "user", "content": f"refund order 1042 to card {CARD}"}]}
    paused = app.invoke(user, cfg)
    assert paused["__interrupt__"]  # the approval question, shown to the program as is
    assert CARD in repr(paused["__interrupt__"])
    assert _leaks(app, T) == []
    question = app.get_state(cfg).interrupts[0].value
    assert question["action_requests"][0]["args"] == {"order_id": "1042", "card": MASK}

    out = app.invoke(Command(resume={"decisions": [{"type": "approve"}], "approver": "ana"}), cfg)
    assert out["messages"][-1]["content"] == "Refunded."
    assert _leaks(app, T) == []

    effects = app.effects(thread_id=T)
    failed = next(e for e in effects if e.effect_type == "verify")
    assert failed.error is not None and MASK in failed.error and "declined" in failed.error
    assert all(a.error and MASK in a.error for a in failed.attempts)
    model_effects = [e for e in effects if e.effect_type.startswith("model:")]
    calls = [c for e in model_effects for c in (e.result or {}).get("tool_calls") or ()]
    assert calls and all(c["args"]["card"] == MASK for c in calls)
    last = app.get_state(cfg).values["messages"]
    ai = [m for m in last if m.get("tool_calls")]
    assert ai and all(c["args"]["card"] == MASK for m in ai for c in m.tool_calls)
    assert app.get_state(cfg).values["messages"][0].content == f"refund order 1042 to card {MASK}"
    assert f"refund order 1042 to card {MASK}" in _views(app, T)["get_state_history"]

    # A view: the store keeps everything, and the program's own result is unmasked.
    assert CARD in _stored(checkpointer, T)
    assert CARD in repr(out["messages"])


class Pay(TypedDict, total=False):
    card: str
    receipt: dict[str, Any]


def _paying_app(checkpointer: Checkpointer) -> Any:
    """One node that charges the state's card through ``effect(..., mask=["card"])``."""

    def charge(card: str, amount: int) -> dict[str, Any]:
        if amount < 0:
            raise ValueError(f"refusing {card}")
        return {"card": card, "ok": True}

    def pay(state: Pay) -> dict[str, Any]:
        return {"receipt": effect(charge, state["card"], amount=5, mask=["card"])}

    graph = StateGraph(Pay)
    graph.add_node("pay", pay)
    graph.add_edge(START, "pay")
    graph.add_edge("pay", END)
    return graph.compile(checkpointer=checkpointer)


def test_effect_with_mask_is_masked_too(checkpointer: Checkpointer) -> None:
    app = _paying_app(checkpointer)
    out = app.invoke({"card": CARD}, {"thread_id": "t-effect"})
    assert out["receipt"] == {"card": CARD, "ok": True}
    assert _leaks(app, "t-effect") == []
    (record,) = app.effects(thread_id="t-effect")
    assert record.request["args"] == [MASK] and record.request["kwargs"] == {"amount": 5}
    assert record.result == {"card": MASK, "ok": True}
    assert app.get_state({"thread_id": "t-effect"}).values["card"] == MASK
    # a caller allowed to see the state as stored (the server's admins) asks for it
    assert app.get_state({"thread_id": "t-effect"}, masked=False).values["card"] == CARD
    assert CARD in _stored(checkpointer, "t-effect")


def test_masking_is_off_without_masks(checkpointer: Checkpointer) -> None:
    @tool(dedup="test double: changes nothing")
    def note(text: str) -> str:
        """Keep a note."""
        return text

    call = {"id": "c1", "name": "note", "args": {"text": CARD}}
    model = ScriptedModel.turns({"content": "", "tool_calls": [call]}, "ok")
    app = ReactAgent(model=model, tools=[note]).compile(checkpointer=checkpointer)
    app.invoke({"messages": [{"role": "user", "content": "hi"}]}, {"thread_id": "t-plain"})
    views = _views(app, "t-plain")
    assert CARD in views["get_state"] and CARD in views["effects"]


@pytest.mark.parametrize("value", ["ab", 12])
def test_short_values_are_masked_in_their_field_only(value: Any) -> None:
    from oncegraph.runs.masking import Masker

    masker = Masker({"t": ("pin",)})
    calls = {"role": "assistant", "tool_calls": [{"id": "1", "name": "t", "args": {"pin": value}}]}
    masker.learn(calls)
    masked = masker.value([calls, "about 12 abacus"])
    assert masked[0]["tool_calls"][0]["args"]["pin"] == MASK
    assert masked[1] == "about 12 abacus"


def test_langchain_messages_are_masked_and_keep_their_class() -> None:
    from langchain_core.messages import AIMessage, HumanMessage

    from oncegraph.runs.masking import Masker

    ai = AIMessage(
        content="",
        tool_calls=[{"id": "c1", "name": "refund", "args": {"card": CARD, "order_id": "1"}}],
        additional_kwargs={
            "tool_calls": [{"function": {"name": "refund", "arguments": f'{{"card": "{CARD}"}}'}}]
        },
    )
    state = {"messages": [HumanMessage(content=f"card {CARD}"), ai]}
    masker = Masker({"refund": ("card",)}).learn(state)
    masked = masker.value(state)
    assert CARD not in repr(masked)
    assert isinstance(masked["messages"][1], AIMessage)
    assert masked["messages"][1].tool_calls[0]["args"] == {"card": MASK, "order_id": "1"}
    assert CARD in repr(state)  # the original is untouched


async def test_history_masks_a_secret_written_while_it_is_read(
    checkpointer: Checkpointer,
) -> None:
    """A step committed after ``get_state_history`` began but before it read its first
    page (another run on the thread, with a new masked value) is shown masked: the
    history learns the thread's effects after reading the checkpoints it shows."""
    second = "5500000000000004"
    app = _paying_app(checkpointer)
    cfg = {"thread_id": "t-race"}
    await app.ainvoke({"card": CARD}, cfg)

    page = checkpointer.list_checkpoints
    raced: list[bool] = []

    async def list_checkpoints(*args: Any, **kwargs: Any) -> Any:
        if not raced:  # the history's first page: another run commits just before it
            raced.append(True)
            await app.ainvoke({"card": second}, cfg)
        return await page(*args, **kwargs)

    checkpointer.list_checkpoints = list_checkpoints  # type: ignore[method-assign]
    shown = [s async for s in app.aget_state_history(cfg)]
    assert raced and len(shown) >= 4  # both runs' checkpoints are in the history
    assert second not in repr(shown) and CARD not in repr(shown)
    assert any(s.values.get("card") == MASK for s in shown)
