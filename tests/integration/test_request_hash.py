"""Request hashes that do not leak (issue 15, item 3), and still catch a changed request.

The hash is HMAC-SHA256 under a key derived from the per-database secret: what
``app.effects()`` shows (masked request, request hash, errors) does not let a brute force
over a card's unknown digits find it, where the old unsalted ``sha256:`` would. Rows
written with the old form still verify (runs from before an upgrade resume), and a changed
request is still a ``RequestMismatchError`` (guarantee 6), whichever form the row has.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypedDict, cast

import pytest

from oncegraph import END, START, Command, StateGraph, effect, interrupt, tool
from oncegraph.errors import RequestMismatchError
from oncegraph.ledger.keys import KEYED_PREFIX, LEGACY_PREFIX, request_hash
from oncegraph.prebuilt.agent import ReactAgent
from oncegraph.prebuilt.models.scripted import ScriptedModel
from oncegraph.runtime.portal import run_sync
from oncegraph.storage.checkpointer import SqliteCheckpointer
from oncegraph.storage.protocols import Checkpointer

FIRST6, MIDDLE, LAST4 = "411111", "739", "1234"  # a 13-digit card: 3 digits unknown
CARD = FIRST6 + MIDDLE + LAST4


def _brute_force(shown: str, hashes: list[str], order_id: str) -> list[str]:
    """Every card FIRST6 + ddd + LAST4 that what was shown gives away: an unsalted hash of
    the request with that card, or the card itself in the text."""
    found = []
    for n in range(1000):
        guess = f"{FIRST6}{n:03d}{LAST4}"
        if guess in shown or request_hash({"order_id": order_id, "card": guess}) in hashes:
            found.append(guess)
    return found


def test_effects_output_does_not_give_the_card_away(checkpointer: Checkpointer) -> None:
    @tool(effect="irreversible", mask=["card"])
    def refund(order_id: str, card: str) -> str:
        """Refund an order to a card."""
        raise ValueError(f"issuer refused card {card} for order {order_id}")

    call = {"id": "c1", "name": "refund", "args": {"order_id": "1042", "card": CARD}}
    model = ScriptedModel.turns({"content": "", "tool_calls": [call]}, "Sorry.")
    app = ReactAgent(model=model, tools=[refund]).compile(checkpointer=checkpointer)
    app.invoke({"messages": [{"role": "user", "content": "refund 1042"}]}, {"thread_id": "t"})

    shown = app.effects(thread_id="t")
    (record,) = [e for e in shown if e.effect_type == "refund"]
    assert record.request == {"order_id": "1042", "card": "***"}
    assert record.error is not None and "issuer refused card ***" in record.error
    assert record.request_hash.startswith(KEYED_PREFIX)
    hashes = [e.request_hash for e in shown]
    assert _brute_force(repr(shown), hashes, "1042") == []

    # The old unsalted hash of the same request would have given it away at once.
    old = request_hash({"order_id": "1042", "card": CARD})
    assert old.startswith(LEGACY_PREFIX)
    assert _brute_force(repr(shown), [old], "1042") == [CARD]


def test_processes_on_one_database_share_the_key(tmp_path: Path, request: Any) -> None:
    """Guarantee 6 across processes: two stores on one database derive one key; another
    database has another key."""

    def key(store: Any) -> bytes:
        try:
            return cast(bytes, run_sync(store.request_hash_key(), "request_hash_key"))
        finally:
            run_sync(store.aclose(), "aclose")

    a = key(SqliteCheckpointer(tmp_path / "a.db"))
    assert a == key(SqliteCheckpointer(tmp_path / "a.db"))
    assert len(a) == 32 and a != key(SqliteCheckpointer(tmp_path / "b.db"))

    from oncegraph.storage.checkpointer import PgCheckpointer

    dsn = request.getfixturevalue("fresh_dsn")
    p = key(PgCheckpointer(dsn))
    assert p == key(PgCheckpointer(dsn)) and p != a


# -- rows written before keyed hashes ------------------------------------------------------


class State(TypedDict, total=False):
    amount: int
    out: str
    ok: Any


@pytest.fixture(params=["sqlite", "postgres"])
def durable(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Any, Any]]:
    """A durable store and a function that runs one SQL UPDATE on its database."""
    if request.param == "sqlite":
        path = tmp_path / "old.db"

        def update_sqlite(sql: str, params: tuple[Any, ...]) -> None:
            with sqlite3.connect(path) as conn:
                conn.execute(sql, params)

        store: Any = SqliteCheckpointer(path)
        yield store, update_sqlite
    else:
        import psycopg

        from oncegraph.storage.checkpointer import PgCheckpointer

        dsn = request.getfixturevalue("fresh_dsn")

        def update_pg(sql: str, params: tuple[Any, ...]) -> None:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(sql.replace("?", "%s"), params)

        store = PgCheckpointer(dsn)
        yield store, update_pg
    run_sync(store.aclose(), "aclose")


def _app(store: Any, sent: list[int], amount: dict[str, int]) -> Any:
    def charge(value: int) -> str:
        sent.append(value)
        return f"charged {value}"

    def pay(state: State) -> State:
        out = effect(charge, amount["value"])
        return {"out": out, "ok": interrupt("confirm?")}

    g = StateGraph(State)
    g.add_node("pay", pay)
    g.add_edge(START, "pay")
    g.add_edge("pay", END)
    return g.compile(checkpointer=store)


@pytest.mark.parametrize("changed", [False, True])
def test_a_row_with_the_old_hash_still_verifies(durable: tuple[Any, Any], changed: bool) -> None:
    store, update = durable
    sent: list[int] = []
    amount = {"value": 10}
    app = _app(store, sent, amount)
    cfg = {"thread_id": "t-old"}
    app.invoke({"amount": 10}, cfg)  # charged, then paused at the question
    (record,) = app.effects(thread_id="t-old")
    assert record.request_hash.startswith(KEYED_PREFIX) and sent == [10]
    # The row as an oncegraph from before keyed hashes wrote it.
    old = request_hash({"args": [10], "kwargs": {}})
    update("UPDATE oncegraph_effects SET request_hash = ? WHERE effect_id = ?",
           (old, record.effect_id))
    if changed:  # the same command now carries another request: guarantee 6, old row or not
        amount["value"] = 11
        with pytest.raises(RequestMismatchError):
            app.invoke(Command(resume=True), cfg)
        assert sent == [10]
        return
    out = app.invoke(Command(resume=True), cfg)  # the node runs again from the top
    assert out["out"] == "charged 10" and out["ok"] is True
    assert sent == [10]  # served from the old row, not sent again
    (after,) = app.effects(thread_id="t-old")
    assert after.request_hash == old  # a row's hash is never rewritten


def test_every_recorded_hash_is_keyed(checkpointer: Checkpointer) -> None:
    """Planned intents (a write tool's, written with the model turn's checkpoint), begun
    intents and model calls: every new record carries the keyed form."""

    @tool(mask=["card"], dedup="test double: changes nothing")
    def charge(order_id: str, card: str) -> str:
        """Charge a card."""
        return "ch_1"

    call = {"id": "c1", "name": "charge", "args": {"order_id": "1", "card": CARD}}
    model = ScriptedModel.turns({"content": "", "tool_calls": [call]}, "Done.")
    app = ReactAgent(model=model, tools=[charge]).compile(checkpointer=checkpointer)
    app.invoke({"messages": [{"role": "user", "content": "go"}]}, {"thread_id": "t-keyed"})
    shown = app.effects(thread_id="t-keyed")
    assert {e.effect_type for e in shown} >= {"charge"}
    assert all(e.request_hash.startswith(KEYED_PREFIX) for e in shown), shown
