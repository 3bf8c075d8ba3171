"""Encryption at rest (guarantee 14): with a key, a raw dump of the database holds no card.

SQLite (the file and its WAL, byte for byte, and ``iterdump``) and PostgreSQL (every row
of every oncegraph table as text). A run killed by SIGKILL resumes in a new process with
the key; a rotated key ring (new current key, old one kept) reads the old rows; a key id
missing from the ring is an error naming it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from oncegraph import Command, tool
from oncegraph.errors import ConfigError, CorruptRecordError, EncryptionKeyError
from oncegraph.prebuilt.agent import ReactAgent
from oncegraph.prebuilt.models.scripted import ScriptedModel
from oncegraph.runtime.portal import run_sync
from oncegraph.storage.checkpointer import InMemoryCheckpointer, SqliteCheckpointer
from oncegraph.storage.encryption import EncryptionKeys
from oncegraph.storage.protocols import Checkpointer
from oncegraph.testing.crash import run_in_subprocess

CARD = "4111111111111111"
K1, K2 = bytes(range(32)), bytes(range(32, 64))
WORKER = Path(__file__).with_name("_encrypted_worker.py")


@dataclass
class Db:
    kind: str
    where: str  # the SQLite path or the PostgreSQL DSN

    def store(self, keys: EncryptionKeys | None) -> Checkpointer:
        if self.kind == "sqlite":
            return SqliteCheckpointer(self.where, encryption=keys)
        from oncegraph.storage.checkpointer import PgCheckpointer

        return PgCheckpointer(self.where, encryption=keys)

    def dump(self) -> str:
        """Everything the database holds, as text, the way a thief would read it."""
        if self.kind == "sqlite":
            raw = b"".join(
                Path(self.where + suffix).read_bytes()
                for suffix in ("", "-wal", "-shm")
                if Path(self.where + suffix).exists()
            )
            with sqlite3.connect(self.where) as conn:
                lines = "\n".join(conn.iterdump())
            return raw.decode("latin-1") + lines
        import psycopg

        out = []
        with psycopg.connect(self.where, autocommit=True) as conn:
            tables = conn.execute(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = current_schema() AND table_name LIKE 'oncegraph%'"
            ).fetchall()
            assert len(tables) >= 7
            for (table,) in tables:
                rows = conn.execute(f"SELECT t::text FROM {table} t").fetchall()
                out.extend(r[0] for r in rows)
        return "\n".join(out)

    def argv(self) -> list[str]:
        return ["--db", self.where] if self.kind == "sqlite" else ["--pg", self.where]


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Db]:
    if request.param == "sqlite":
        yield Db("sqlite", str(tmp_path / "runs.db"))
    else:
        yield Db("postgres", request.getfixturevalue("fresh_dsn"))


def _close(store: Checkpointer) -> None:
    run_sync(store.aclose(), "aclose")


def _agent(store: Checkpointer) -> Any:
    @tool(effect="irreversible", mask=["card"])
    def refund(order_id: str, card: str) -> dict[str, str]:
        """Refund an order to a card."""
        return {"refund": "re_1", "card": card}

    call = {"id": "c1", "name": "refund", "args": {"order_id": "1042", "card": CARD}}
    model = ScriptedModel.turns({"content": "", "tool_calls": [call]}, f"Refunded {CARD}.")
    return ReactAgent(model=model, tools=[refund], interrupt_on={"refund": True}).compile(
        checkpointer=store
    )


@pytest.mark.parametrize("encrypted", [True, False])
def test_a_database_dump_holds_no_card(db: Db, encrypted: bool) -> None:
    keys = EncryptionKeys({"k1": K1}, current="k1") if encrypted else None
    store = db.store(keys)
    try:
        app = _agent(store)
        cfg = {"thread_id": "t-dump"}
        user = {"messages": [{"role": "user", "content": f"refund 1042 to {CARD}"}]}
        assert app.invoke(user, cfg)["__interrupt__"]  # the question is stored too
        assert (CARD in db.dump()) is not encrypted
        out = app.invoke(Command(resume={"decisions": [{"type": "approve"}]}), cfg)
        assert out["messages"][-1]["content"] == f"Refunded {CARD}."  # the program reads it
        assert app.get_state(cfg).values["messages"][-1]["content"] == "Refunded ***."
        (refund,) = [e for e in app.effects(thread_id="t-dump") if e.effect_type == "refund"]
        assert refund.request == {"order_id": "1042", "card": "***"}
        assert app.audit(thread_id="t-dump")[0].action == "answer"
    finally:
        _close(store)
    dump = db.dump()
    assert (CARD in dump) is not encrypted
    if encrypted:
        assert "enc2:k1:" in dump


def test_a_killed_run_resumes_with_the_key_and_a_rotated_ring(db: Db, tmp_path: Path) -> None:
    calls = tmp_path / "calls.jsonl"
    common = [*db.argv(), "--calls", str(calls)]
    first = ["--keys", f"k1={K1.hex()}", "--current", "k1"]
    crashed = run_in_subprocess(WORKER, ["run", *common, *first], crash_at="after_intent")
    assert crashed.killed, crashed.describe()
    assert CARD not in db.dump()
    # A new process, after a key rotation: k2 seals from now on, k1 still opens.
    rotated = ["--keys", f"k1={K1.hex()},k2={K2.hex()}", "--current", "k2"]
    resumed = run_in_subprocess(WORKER, ["resume", *common, *rotated])
    assert resumed.returncode == 0, resumed.describe()
    assert resumed.json() == {"final": "Charged.", "calls": 1}
    dump = db.dump()
    assert CARD not in dump and "enc2:k1:" in dump and "enc2:k2:" in dump

    # Without the old key the old rows are refused by name; without keys, by the fix.
    for keys, named in ((EncryptionKeys({"k2": K2}, current="k2"), "'k1'"), (None, "encryption=")):
        store = db.store(keys)
        try:
            app = _agent(store)
            with pytest.raises(EncryptionKeyError, match=named):
                list(app.get_state_history({"thread_id": "t-enc"}))
        finally:
            _close(store)


def test_a_tampered_value_is_a_corrupt_row(tmp_path: Path) -> None:
    path = str(tmp_path / "t.db")
    keys = EncryptionKeys({"k1": K1}, current="k1")
    store = SqliteCheckpointer(path, encryption=keys)
    try:
        app = _agent(store)
        app.invoke({"messages": [{"role": "user", "content": "hi"}]}, {"thread_id": "t"})
    finally:
        _close(store)
    with sqlite3.connect(path) as conn:
        (sealed,) = conn.execute("SELECT channel_values FROM oncegraph_checkpoints").fetchone()
        flipped = sealed[:-3] + ("A" if sealed[-3] != "A" else "B") + sealed[-2:]
        conn.execute("UPDATE oncegraph_checkpoints SET channel_values = ?", (flipped,))
    store = SqliteCheckpointer(path, encryption=keys)
    try:
        with pytest.raises(CorruptRecordError, match="does not authenticate"):
            _agent(store).get_state({"thread_id": "t"})
    finally:
        _close(store)


def test_the_memory_store_takes_keys_too() -> None:
    store = InMemoryCheckpointer(encryption=EncryptionKeys({"k1": K1}, current="k1"))
    app = _agent(store)
    app.invoke({"messages": [{"role": "user", "content": CARD}]}, {"thread_id": "t"})
    assert CARD not in repr(store.__dict__)
    assert app.get_state({"thread_id": "t"}).interrupts


@pytest.mark.parametrize(
    ("keys", "current", "message"),
    [
        ({}, "k1", "at least one key"),
        ({"k1": b"short"}, "k1", "16, 24 or 32 raw bytes"),
        ({"k:1": K1}, "k:1", "without ':'"),
        ({"k1": K1}, "k2", "not one of the key ids"),
    ],
)
def test_bad_key_rings_are_refused(keys: dict[str, bytes], current: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        EncryptionKeys(keys, current=current)
    assert "key_ids" in repr(EncryptionKeys({"k1": K1}, current="k1"))
    assert K1.hex() not in repr(EncryptionKeys({"k1": K1}, current="k1"))


def test_a_failed_run_keeps_its_error_sealed(db: Db) -> None:
    from typing import TypedDict

    from oncegraph import END, START, StateGraph

    class S(TypedDict, total=False):
        card: str

    def check(state: S) -> S:
        raise ValueError(f"card {state['card']} is blocked")

    g = StateGraph(S)
    g.add_node("check", check)
    g.add_edge(START, "check")
    g.add_edge("check", END)
    store = db.store(EncryptionKeys({"k1": K1}, current="k1"))
    try:
        app = g.compile(checkpointer=store)
        with pytest.raises(ValueError, match="blocked"):
            app.invoke({"card": CARD}, {"thread_id": "t-fail"})
        (run,) = app.runs(thread_id="t-fail")
        assert run.status == "failed" and run.error is not None and "blocked" in run.error
    finally:
        _close(store)
    assert CARD not in db.dump()
