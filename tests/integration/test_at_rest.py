"""Encryption at rest covers what masks cover, binds each value to its row, refuses clear
values, and ``oncegraph db encrypt`` seals a database written without a key; the audit
log is a chain that ``oncegraph db verify`` checks (SQLite and PostgreSQL, real files,
real ``pg_dump``, the command as a real process).

The planted secrets: a card number and an e-mail address, through a tool that masks
both and whose recipient is computed from the address (its provider reference quotes
the address too), and an operator's abandon reason that holds both.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from oncegraph import Completed, tool
from oncegraph.errors import CorruptRecordError, EncryptionKeyError, PlaintextError
from oncegraph.prebuilt.agent import ReactAgent
from oncegraph.prebuilt.models.scripted import ScriptedModel
from oncegraph.runtime.portal import run_sync
from oncegraph.storage.checkpointer import SqliteCheckpointer
from oncegraph.storage.encryption import EncryptionKeys
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.requests import IdempotencyRecord

CARD = "4929123456786781"
EMAIL = "alice.secret.7731@example.org"
KEY = bytes(range(32))
SRC = Path(__file__).parents[2] / "src"


def _keys() -> EncryptionKeys:
    return EncryptionKeys({"k1": KEY}, current="k1")


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
        """Everything the database holds, as a thief would read it: the SQLite file, its
        WAL and shared memory byte for byte; PostgreSQL's ``pg_dump --data-only``."""
        if self.kind == "sqlite":
            return b"".join(
                Path(self.where + suffix).read_bytes()
                for suffix in ("", "-wal", "-shm")
                if Path(self.where + suffix).exists()
            ).decode("latin-1")
        pg_dump = shutil.which("pg_dump")
        if pg_dump is None:  # pragma: no cover - every table's rows as text instead
            return self._rows_as_text()
        out = subprocess.run(
            [pg_dump, "--data-only", self.where], capture_output=True, text=True, check=True
        )
        return out.stdout

    def _rows_as_text(self) -> str:
        import psycopg

        with psycopg.connect(self.where, autocommit=True) as conn:
            tables = conn.execute(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = current_schema() AND table_name LIKE 'oncegraph%'"
            ).fetchall()
            return "\n".join(
                r[0]
                for (table,) in tables
                for r in conn.execute(f"SELECT t::text FROM {table} t").fetchall()
            )

    def sql(self, statement: str, params: Sequence[Any] = ()) -> list[Any]:
        """One statement (``?`` placeholders) on the raw database, committed."""
        if self.kind == "sqlite":
            with sqlite3.connect(self.where) as conn:
                found = conn.execute(statement, params).fetchall()
            conn.close()
            return found
        import psycopg

        with psycopg.connect(self.where, autocommit=True) as conn:
            cur = conn.execute(statement.replace("?", "%s"), params or None)  # type: ignore[arg-type]
            return cur.fetchall() if cur.description else []


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Db]:
    if request.param == "sqlite":
        yield Db("sqlite", str(tmp_path / "enc.db"))
    else:
        yield Db("postgres", request.getfixturevalue("fresh_dsn"))


def _close(store: Checkpointer) -> None:
    run_sync(store.aclose(), "aclose")


def _agent(store: Checkpointer, *, park: bool = False) -> Any:
    @tool(
        effect="write",
        mask=["to", "card"],
        recipient=lambda a: a["to"],
        dedup="natural key: to",
    )
    def send_receipt(to: str, card: str) -> Completed:
        """Send a receipt for a card payment."""
        return Completed("sent", provider_reference=f"msg-to-{to}")

    call = {"id": "c1", "name": "send_receipt", "args": {"to": EMAIL, "card": CARD}}
    model = ScriptedModel.turns({"content": "", "tool_calls": [call]}, "Sent.")
    agent = ReactAgent(
        model=model,
        tools=[send_receipt],
        interrupt_on={"send_receipt": True} if park else None,
    )
    return agent.compile(checkpointer=store)


REASON = f"customer disputes card {CARD} at {EMAIL}"


def _plant(store: Checkpointer) -> None:
    """A finished receipt, a parked run abandoned with a reason holding both secrets, and
    an idempotent request's stored answer holding both."""
    user = {"messages": [{"role": "user", "content": "send the receipt"}]}
    assert _agent(store).invoke(user, {"thread_id": "s1-a"})["messages"][-1]["content"]
    parked = _agent(store, park=True)
    assert parked.invoke(user, {"thread_id": "s1-b"})["__interrupt__"]
    parked.abandon({"thread_id": "s1-b"}, actor="cli:ana", reason=REASON)

    async def answer() -> None:
        record = IdempotencyRecord("scope-1", "key-1", "h", 1.0, 4e9)
        claimed, _ = await store.claim_request(record)  # type: ignore[attr-defined]
        await store.finish_request(  # type: ignore[attr-defined]
            claimed, status_code=200, response={"to": EMAIL, "card": CARD}
        )

    run_sync(answer(), "plant")


def _views(store: Checkpointer) -> dict[str, Any]:
    """What the stored rows read back as, unmasked, straight from the store."""

    async def read() -> dict[str, Any]:
        effects = await store.list_effects(thread_id="s1-a")
        audit = await store.list_audit(thread_id="s1-b")
        request = await store.get_request("scope-1", "key-1")  # type: ignore[attr-defined]
        head = await store.get_checkpoint("s1-b")
        assert head is not None
        writes = await store.get_task_writes("s1-b", head.checkpoint_id)
        runs = await store.list_runs(thread_id="s1-b")
        return {
            "effects": sorted(
                (e.effect_type, e.recipient, e.provider_reference, repr(e.request), repr(e.result))
                for e in effects
            ),
            "audit": [(a.actor, a.action, a.reason, dict(a.details)) for a in audit],
            "request": None if request is None else dict(request.response or {}),
            "state": repr((head.values, head.metadata)),
            "log": repr(await store.read_log("s1-a", "messages", 100)),
            "writes": repr([(w.task, w.kind, w.value) for w in writes]),
            "runs": repr([(r.run_id, r.input, r.error, r.status) for r in runs]),
        }

    return run_sync(read(), "views")


def test_a_dump_holds_neither_the_card_nor_the_address(db: Db) -> None:
    store = db.store(_keys())
    try:
        _plant(store)
        views = _views(store)
    finally:
        _close(store)
    (receipt,) = [e for e in views["effects"] if e[0] == "send_receipt"]
    assert receipt[1] == EMAIL and receipt[2] == f"msg-to-{EMAIL}"  # read back as written
    assert views["audit"][0][2] == REASON
    assert views["request"] == {"to": EMAIL, "card": CARD}
    dump = db.dump()
    assert CARD not in dump and EMAIL not in dump
    assert "enc2:k1:" in dump


def test_a_sealed_value_moved_to_another_row_or_column_is_corrupt(db: Db) -> None:
    store = db.store(_keys())
    try:
        _plant(store)
    finally:
        _close(store)
    ids = [r[0] for r in db.sql("SELECT effect_id FROM oncegraph_effects ORDER BY effect_id")]
    assert len(ids) >= 2
    (receipt,) = db.sql(
        "SELECT effect_id, result FROM oncegraph_effects WHERE effect_type = 'send_receipt'"
    )
    other = next(i for i in ids if i != receipt[0])
    # Another row: the receipt's sealed result in another effect's row.
    db.sql("UPDATE oncegraph_effects SET result = ? WHERE effect_id = ?", (receipt[1], other))
    store = db.store(_keys())
    try:
        with pytest.raises(CorruptRecordError, match="oncegraph_effects") as caught:
            run_sync(store.get_effect(other), "read")
        assert caught.value.key == other and caught.value.column == "result"
        assert "does not authenticate" in str(caught.value)
        # Another column of the same row: the recipient's sealed value as the reference.
        db.sql(
            "UPDATE oncegraph_effects SET provider_reference = recipient WHERE effect_id = ?",
            (receipt[0],),
        )
        with pytest.raises(CorruptRecordError, match="provider_reference"):
            run_sync(store.get_effect(receipt[0]), "read")
        # Another table: an audit reason moved into a run's error.
        (reason,) = db.sql("SELECT reason FROM oncegraph_audit WHERE reason IS NOT NULL")[0]
        (run_id,) = db.sql("SELECT run_id FROM oncegraph_runs WHERE thread_id = 's1-b'")[0]
        db.sql("UPDATE oncegraph_runs SET error = ? WHERE run_id = ?", (reason, run_id))
        with pytest.raises(CorruptRecordError, match="oncegraph_runs"):
            run_sync(store.get_run(run_id), "read")  # type: ignore[attr-defined]
    finally:
        _close(store)


def test_a_clear_value_is_refused_naming_the_command(db: Db) -> None:
    store = db.store(_keys())
    try:
        _plant(store)
    finally:
        _close(store)
    (effect_id,) = db.sql(
        "SELECT effect_id FROM oncegraph_effects WHERE effect_type = 'send_receipt'"
    )[0]
    db.sql(
        "UPDATE oncegraph_effects SET recipient = ? WHERE effect_id = ?",
        ("plaintext written by someone without the key", effect_id),
    )
    store = db.store(_keys())
    try:
        with pytest.raises(PlaintextError, match="oncegraph db encrypt") as caught:
            run_sync(store.get_effect(effect_id), "read")
        assert "oncegraph_effects.recipient" in str(caught.value)
        assert isinstance(caught.value, EncryptionKeyError)
    finally:
        _close(store)


def og(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "ONCEGRAPH_DATABASE"}
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), *sys.path])
    return subprocess.run(
        [sys.executable, "-m", "oncegraph", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def _keys_file(tmp_path: Path) -> Path:
    path = tmp_path / "keys"
    path.write_text(f"# the store's keys\nk1={KEY.hex()}\n")
    path.chmod(0o600)
    return path


def test_db_encrypt_seals_a_database_written_without_a_key(db: Db, tmp_path: Path) -> None:
    store = db.store(None)
    try:
        _plant(store)
        before = _views(store)
    finally:
        _close(store)
    assert CARD in db.dump()
    # With the keys configured, the clear rows are refused until they are sealed.
    store = db.store(_keys())
    try:
        with pytest.raises(PlaintextError, match="oncegraph db encrypt"):
            _views(store)
    finally:
        _close(store)
    # One value in the older format (sealed with no place): read, and re-sealed.
    (audit_id, details) = db.sql("SELECT audit_id, details FROM oncegraph_audit")[0]
    db.sql(
        "UPDATE oncegraph_audit SET details = ? WHERE audit_id = ?",
        (_keys().seal(details), audit_id),
    )
    keys = _keys_file(tmp_path)
    out = og("db", "encrypt", "--database", db.where, "--keys-file", str(keys), "--batch", "3")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "re-sealed 1 values of the older format" in out.stdout, out.stdout
    dump = db.dump()
    assert CARD not in dump and EMAIL not in dump
    assert "enc1:" not in dump
    store = db.store(_keys())
    try:
        assert _views(store) == before  # everything reads back the same
    finally:
        _close(store)
    again = og("db", "encrypt", "-d", db.where, "--keys-file", str(keys), "--json")
    assert again.returncode == 0, again.stdout + again.stderr
    report = json.loads(again.stdout)
    assert report["sealed"] == report["resealed"] == 0 and report["kept"] > 0  # idempotent


def test_db_encrypt_needs_the_keys(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    out = og("db", "migrate", "-d", str(path))
    assert out.returncode == 0, out.stderr
    out = og("db", "encrypt", "-d", str(path))
    assert out.returncode == 2 and "--keys-file" in out.stderr
    bad = tmp_path / "bad"
    bad.write_text(f"k1:{KEY.hex()}\n")
    out = og("db", "encrypt", "-d", str(path), "--keys-file", str(bad))
    assert out.returncode == 2 and "line 1" in out.stderr and KEY.hex() not in out.stderr


# -- the audit chain --------------------------------------------------------------------


def _audited(db: Db, keys: EncryptionKeys | None) -> list[str]:
    """Three abandoned runs: three audit records (ids in the order they were written)."""
    store = db.store(keys)
    try:
        user = {"messages": [{"role": "user", "content": "send the receipt"}]}
        for n in range(3):
            app = _agent(store, park=True)
            assert app.invoke(user, {"thread_id": f"t{n}"})["__interrupt__"]
            app.abandon({"thread_id": f"t{n}"}, actor="cli:ana", reason=f"duplicate {n}")
    finally:
        _close(store)
    found = db.sql("SELECT audit_id, chain_seq FROM oncegraph_audit ORDER BY chain_seq")
    assert [seq for _, seq in found] == list(range(1, len(found) + 1))
    return [audit_id for audit_id, _ in found]


@pytest.mark.parametrize("encrypted", [False, True])
def test_db_verify_names_an_edited_audit_record(db: Db, tmp_path: Path, encrypted: bool) -> None:
    ids = _audited(db, _keys() if encrypted else None)
    keys = ["--keys-file", str(_keys_file(tmp_path))] if encrypted else []
    out = og("db", "verify", "-d", db.where, *keys)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"audit log ok, {len(ids)} records" in out.stdout
    db.sql(
        "UPDATE oncegraph_audit SET actor = 'bob', reason = 'approved by the customer' "
        "WHERE audit_id = ?",
        (ids[1],),
    )
    out = og("db", "verify", "-d", db.where, *keys)
    assert out.returncode == 1, out.stdout + out.stderr
    assert f"BROKEN at record {ids[1]}" in out.stdout


def test_db_verify_names_a_deleted_or_reordered_record(db: Db) -> None:
    ids = _audited(db, None)
    db.sql("DELETE FROM oncegraph_audit WHERE audit_id = ?", (ids[1],))
    out = og("db", "verify", "-d", db.where, "--json")
    assert out.returncode == 1, out.stdout + out.stderr
    report = json.loads(out.stdout)["audit"]
    assert report["broken"] == ids[2] and "missing (deleted)" in report["problem"]
    # Swap the two remaining records' numbers: the order is under the MAC.
    db.sql("UPDATE oncegraph_audit SET chain_seq = -chain_seq")
    db.sql("UPDATE oncegraph_audit SET chain_seq = 2 WHERE audit_id = ?", (ids[0],))
    db.sql("UPDATE oncegraph_audit SET chain_seq = 1 WHERE audit_id = ?", (ids[2],))
    out = og("db", "verify", "-d", db.where)
    assert out.returncode == 1 and f"BROKEN at record {ids[2]}" in out.stdout, out.stdout


def test_an_encrypted_chain_needs_the_keys_to_verify(db: Db) -> None:
    _audited(db, _keys())
    out = og("db", "verify", "-d", db.where)
    assert out.returncode == 1 and "--keys-file" in out.stdout, out.stdout + out.stderr
    assert "NOT CHECKED" in out.stdout


def test_records_from_before_the_chain_are_unchained_not_broken(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """A database at the schema before the chain, with two audit records, migrated."""
    from old_schema import old_store

    from oncegraph.storage.records import AuditRecord
    from oncegraph.storage.sql import rows
    from oncegraph.storage.sql import statements as S

    def fill(execute: Any) -> None:
        for n in range(2):
            record = AuditRecord(f"aud-old-{n}", "ops", "abandon", "run", f"r{n}", at=10.0 + n)
            execute(S.AUDIT_INSERT, rows.PLAIN.audit_to_params(record))

    where, store = old_store("sqlite", tmp_path, request, version=13, fill=fill)

    async def go() -> Any:
        try:
            await store.setup()  # migrates
            await store.append_audit(AuditRecord("aud-new", "ops", "abandon", "run", "r9"))
            return await store.verify_audit()  # type: ignore[attr-defined]
        finally:
            await store.aclose()

    report = asyncio.run(go())
    assert report.ok and report.records == 3 and report.unchained == 2
    out = og("db", "verify", "-d", where)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "audit log ok, 3 records (2 written before the log was chained" in out.stdout
    assert "before record aud-new" in out.stdout


def test_db_verify_names_a_record_taken_out_of_the_chain_or_added_beside_it(db: Db) -> None:
    ids = _audited(db, None)
    db.sql(
        "UPDATE oncegraph_audit SET chain_seq = NULL, chain_mac = NULL WHERE audit_id = ?",
        (ids[-1],),
    )
    out = og("db", "verify", "-d", db.where)
    assert out.returncode == 1 and f"BROKEN at record {ids[-1]}" in out.stdout, out.stdout
    assert "no chain link" in out.stdout
    db.sql("DELETE FROM oncegraph_audit WHERE audit_id = ?", (ids[-1],))
    assert og("db", "verify", "-d", db.where).returncode == 0  # the end of the log: not seen
    db.sql(
        "INSERT INTO oncegraph_audit (audit_id, at, actor, action, target_kind, target_id, "
        "details) VALUES ('aud-forged', 9e9, 'bob', 'abandon', 'run', 'r', '{}')"
    )
    out = og("db", "verify", "-d", db.where)
    assert out.returncode == 1 and "BROKEN at record aud-forged" in out.stdout, out.stdout
