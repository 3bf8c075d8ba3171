"""A damaged effect row fails closed: nothing is called, the row stays as it was.

Each case leaves a real effect row in a real store (memory, SQLite, PostgreSQL) the way a
crash leaves it, damages one column the way a disk, a bad restore or a hand edit would,
and then drives the paths that act on a record they find: the resume (every run path),
an evidence replay, and the operator's resolve, check and redelivery. Every one must
raise a ``CorruptRecordError`` naming the table, the effect, its thread, run and column,
and what to do; the recipient (a real local payment provider) receives nothing; the row
is byte for byte what it was.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from oncegraph import FaultPlan, Reconciled, current_effect, declare_crash_point, tool
from oncegraph.errors import CorruptRecordError, NeedsReviewError, _CrashSignal
from oncegraph.prebuilt.agent import ReactAgent
from oncegraph.prebuilt.models.scripted import ScriptedModel
from oncegraph.runtime.faults import crash_point
from oncegraph.runtime.portal import run_sync
from oncegraph.storage.checkpointer import InMemoryCheckpointer, PgCheckpointer, SqliteCheckpointer
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import EffectStatus
from oncegraph.storage.sql.statements import EFFECT_COLUMNS
from oncegraph.testing.provider import FakeProvider, ProviderClient

T = "t-damaged"
USER = {"messages": [{"role": "user", "content": "refund order 1042"}]}
SENT = declare_crash_point("corrupt_effects_sent")  # the provider has it; nothing recorded
RunPath = Callable[..., dict[str, Any]]  # the conftest's run_path fixture
COUNTS = ("performed", "replayed", "rejected", "conflicts", "failed", "invalid")


class World:
    """One store (kept across app instances, as a restarted process finds it) and the
    payment provider the tools call."""

    def __init__(self, backend: str, where: str, provider: FakeProvider) -> None:
        self.backend, self.where = backend, where
        self.client = ProviderClient(provider.url)
        self._memory = InMemoryCheckpointer() if backend == "memory" else None
        self._stores: list[Checkpointer] = []

    def store(self) -> Checkpointer:
        if self._memory is not None:
            return self._memory
        made: Checkpointer = (
            PgCheckpointer(self.where)
            if self.backend == "postgres"
            else SqliteCheckpointer(self.where)
        )
        self._stores.append(made)
        return made

    def close(self) -> None:
        for made in [*self._stores, *([self._memory] if self._memory else [])]:
            run_sync(made.aclose(), "aclose")

    def received(self) -> int:
        """Every request that reached the provider, deduplicated or not."""
        stats = self.client.stats()
        return sum(int(stats[k]) for k in COUNTS)

    def app(self, effect: str = "irreversible", *, reconcile: bool = True) -> Any:
        client = self.client

        def find(record: Any) -> Reconciled:
            found = client.find_by_key(record.effect_id)
            return Reconciled.not_done() if found is None else Reconciled.done(found["id"])

        @tool(effect=effect, recipient="payments", reconcile=find if reconcile else None)
        def refund(order_id: str) -> str:
            """Refund an order."""
            charged = client.charge(
                10, "eur", order_id, idempotency_key=current_effect().idempotency_key
            )
            crash_point(SENT)
            return str(charged["id"])

        call = {"id": "c1", "name": "refund", "args": {"order_id": "1042"}}
        model = ScriptedModel.turns({"content": "", "tool_calls": [call]}, "Refunded.")
        return ReactAgent(model=model, tools=[refund]).compile(checkpointer=self.store())

    # -- the row -----------------------------------------------------------------------

    def effect_id(self) -> str:
        """The refund's effect id (read while the row is whole); its run is ``run_id``."""
        (found,) = [e for e in self.app().effects(thread_id=T) if e.effect_type == "refund"]
        self.run_id = found.run_id
        return found.effect_id

    def row(self, effect_id: str) -> tuple[Any, ...]:
        if self._memory is not None:
            return tuple(self._memory._effects[effect_id])
        cols = ", ".join(EFFECT_COLUMNS)
        (found,) = self._sql(f"SELECT {cols} FROM oncegraph_effects WHERE effect_id = ?", effect_id)
        return tuple(found)

    def snapshot(self, effect_id: str) -> str:
        """The row as text, for comparing (a NaN is not equal to itself)."""
        return repr(self.row(effect_id))

    def damage(self, effect_id: str, column: str, value: Any) -> None:
        """Write ``value`` into ``column`` of the row, behind the store's back."""
        if self._memory is not None:
            row = list(self._memory._effects[effect_id])
            row[EFFECT_COLUMNS.index(column)] = value
            self._memory._effects[effect_id] = tuple(row)
            return
        update = f"UPDATE oncegraph_effects SET {column} = ? WHERE effect_id = ?"
        self._sql(update, value, effect_id)

    def _sql(self, statement: str, *params: Any) -> list[tuple[Any, ...]]:
        if self.backend == "postgres":
            with psycopg.connect(self.where, autocommit=True) as conn:
                cur = conn.execute(statement.replace("?", "%s"), params)
                return cur.fetchall() if cur.description else []
        conn = sqlite3.connect(self.where, isolation_level=None)
        try:
            return conn.execute(statement, params).fetchall()
        finally:
            conn.close()


BACKENDS = ["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(params=BACKENDS)
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    backend = str(request.param)
    where = (
        str(request.getfixturevalue("fresh_dsn"))
        if backend == "postgres"
        else str(tmp_path / "effects.db")
    )
    with FakeProvider() as provider:
        made = World(backend, where, provider)
        try:
            yield made
        finally:
            made.close()


def _named(error: BaseException, world: World, effect_id: str, column: str) -> None:
    """The error names the table, effect, thread, run and column, and what to do."""
    text = str(error)
    ids = [i for c, i in (("thread_id", T), ("run_id", world.run_id)) if c != column]
    for part in ("oncegraph_effects", effect_id, *ids, f"column {column}"):
        assert part in text, f"{part!r} not in: {text}"
    assert "left untouched" in text and "no tool was called" in text
    assert "Restore the row from a backup" in text
    assert isinstance(error, CorruptRecordError) and error.column == column


def _sent_once_then_crashed(world: World) -> str:
    """A write refund sent twice with its key, each time cut off before its outcome was
    recorded: its row is ``pending`` with two attempts (row version 2)."""
    with pytest.raises(_CrashSignal):
        world.app("write").invoke(USER, {"thread_id": T, "fault_plan": FaultPlan(SENT)})
    with pytest.raises(_CrashSignal):
        world.app("write").invoke(None, {"thread_id": T, "fault_plan": FaultPlan(SENT)})
    effect_id = world.effect_id()
    (found,) = [e for e in world.app().effects(thread_id=T) if e.effect_type == "refund"]
    assert found.status is EffectStatus.PENDING and len(found.attempts) == 2
    return effect_id


# -- the finding: truncated attempts of a pending effect -------------------------------


def test_truncated_attempts_of_a_pending_effect_fail_closed(
    world: World, run_path: RunPath
) -> None:
    effect_id = _sent_once_then_crashed(world)
    world.damage(effect_id, "attempts", "[]")  # the attempts are gone
    before, received = world.snapshot(effect_id), world.received()
    with pytest.raises(CorruptRecordError) as caught:
        run_path(world.app("write"), None, {"thread_id": T})
    _named(caught.value, world, effect_id, "attempts")
    assert "its attempts were lost" in str(caught.value)
    assert world.received() == received, "the tool was not called again"
    assert world.snapshot(effect_id) == before, "the damaged row was not overwritten"


# -- every column, on the resume path --------------------------------------------------

_CUT = '[{"number": 1, "started_at": 17'
# (column, damaged value) per backend: what each store can hold in that column.
_EVERYWHERE: list[tuple[str, Any]] = [
    ("attempts", ""),
    ("attempts", _CUT),
    ("attempts", "[]"),
    ("attempts", "{}"),
    ("attempts", '[{"number": 2, "started_at": 1.0}]'),
    ("attempts", '[{"number": 1, "started_at": "yesterday"}]'),
    ("status", "pendin"),
    ("effect_class", "irreversibl"),
    ("request", '{"order_id": "10'),
    ("request", '{"order_id": "9999"}'),  # whole JSON, not what was hashed
    ("result", '{"id": "ch_'),
    ("row_version", -1),
    ("effect_type", ""),
    ("command_id", ""),
    ("run_id", ""),
    ("thread_id", ""),
    ("node", ""),
]
_SQLITE_ONLY: list[tuple[str, Any]] = [  # SQLite keeps any type in any column
    ("error", b"\xff\xfe"),
    ("recipient", b"\x00"),
    ("provider_reference", b"ref"),
    ("checkpoint_id", b"cp"),
    ("created_at", "yesterday"),
    ("updated_at", "now"),
    ("row_version", "two"),
    ("row_version", 1.5),
]
_PG_ONLY: list[tuple[str, Any]] = [
    ("created_at", float("nan")),
    ("updated_at", float("inf")),
]
_MEMORY_ONLY: list[tuple[str, Any]] = [
    ("error", 7),
    ("row_version", None),
    ("created_at", None),
]


def _cases() -> list[Any]:
    """(backend, column, damaged value): the values each store can hold there."""
    pg = pytest.mark.postgres
    out: list[Any] = []
    for backend, marks in (("memory", ()), ("sqlite", ()), ("postgres", (pg,))):
        own = {"memory": _MEMORY_ONLY, "sqlite": _SQLITE_ONLY, "postgres": _PG_ONLY}[backend]
        for column, value in [*_EVERYWHERE, *own]:
            name = f"{backend}-{column}-{value!r}"[:48]
            out.append(pytest.param(backend, column, value, marks=marks, id=name))
    return out


def _parked_intent(world: World) -> str:
    """An irreversible refund whose intent is committed and whose call never started (a
    crash right after the intent): ``pending`` with one open attempt. Whole, its resume
    would ask the provider (nothing there) and send it: one call."""
    with pytest.raises(_CrashSignal):
        world.app().invoke(USER, {"thread_id": T, "fault_plan": FaultPlan("after_intent")})
    return world.effect_id()


@pytest.mark.parametrize(("world", "column", "value"), _cases(), indirect=["world"])
def test_a_damaged_column_is_named_and_nothing_is_called(
    world: World, column: str, value: Any
) -> None:
    effect_id = _parked_intent(world)
    world.damage(effect_id, column, value)
    before, received = world.snapshot(effect_id), world.received()
    with pytest.raises(CorruptRecordError) as caught:
        world.app().invoke(None, {"thread_id": T})
    _named(caught.value, world, effect_id, column)
    assert world.received() == received == 0
    assert world.snapshot(effect_id) == before


def test_the_same_intent_whole_is_sent_once(world: World) -> None:
    """The control of the case above: undamaged, the resume asks, finds nothing, sends."""
    _parked_intent(world)
    out = world.app().invoke(None, {"thread_id": T})
    assert out["messages"][-1]["content"] == "Refunded."
    assert world.received() == 1


def test_a_damaged_hash_is_not_reported_as_another_request(world: World) -> None:
    effect_id = _parked_intent(world)
    hashed = world.row(effect_id)[EFFECT_COLUMNS.index("request_hash")]
    world.damage(effect_id, "request_hash", hashed[:30])  # cut short
    before = world.snapshot(effect_id)
    with pytest.raises(CorruptRecordError) as caught:
        world.app().invoke(None, {"thread_id": T})
    _named(caught.value, world, effect_id, "request_hash")
    assert world.received() == 0 and world.snapshot(effect_id) == before


def test_a_row_of_another_tool_under_this_effect_id_is_damage(world: World) -> None:
    effect_id = _parked_intent(world)
    world.damage(effect_id, "effect_type", "wire_money")
    with pytest.raises(CorruptRecordError) as caught:
        world.app().invoke(None, {"thread_id": T})
    assert "column effect_type" in str(caught.value) and "'wire_money'" in str(caught.value)
    assert world.received() == 0


# -- the other paths that act on a found record ----------------------------------------


def test_an_evidence_replay_serves_no_damaged_result(world: World) -> None:
    world.app().invoke(USER, {"thread_id": T})
    effect_id = world.effect_id()
    world.damage(effect_id, "request", '{"order_id": "9999"}')
    before, received = world.snapshot(effect_id), world.received()
    with pytest.raises(CorruptRecordError) as caught:
        world.app().replay(world.run_id, mode="evidence", reason="audit", actor="ops")
    _named(caught.value, world, effect_id, "request")
    assert world.received() == received == 1
    assert world.snapshot(effect_id) == before


def test_redeliver_and_check_refuse_a_damaged_row(world: World) -> None:
    world.app().invoke(USER, {"thread_id": T})
    effect_id = world.effect_id()
    world.damage(effect_id, "request", '{"order_id": "9999"}')  # would be sent as is
    before, received = world.snapshot(effect_id), world.received()
    app = world.app()
    with pytest.raises(CorruptRecordError) as caught:
        app.redeliver(effect_id, actor="ops", reason="customer asked")
    _named(caught.value, world, effect_id, "request")
    assert "cannot resolve" in str(caught.value)
    with pytest.raises(CorruptRecordError):
        app.resolve_effect(effect_id, "done", actor="ops", reason="checked")
    assert world.received() == received and world.snapshot(effect_id) == before
    assert app.audit(target_id=effect_id) == []


def test_an_operator_resolves_an_effect_whose_outcome_is_damaged(world: World) -> None:
    """Only the outcome columns are damaged: the operator checks at the recipient and
    records it; the run then goes on with that result and calls nothing."""
    effect_id = _sent_once_then_crashed(world)
    world.damage(effect_id, "attempts", "[]")
    (charge,) = world.client.effects()
    app = world.app("write")
    with pytest.raises(CorruptRecordError) as caught:
        app.invoke(None, {"thread_id": T})
    assert caught.value.salvage is not None and "resolve_effect" in str(caught.value)
    received = world.received()
    resolved = app.resolve_effect(
        effect_id, "done", actor="ops", reason="found it at the provider", result=charge["id"]
    )
    assert resolved.status is EffectStatus.COMPLETED
    assert [a.outcome for a in resolved.attempts] == ["resolved_done"]
    (audit,) = app.audit(target_id=effect_id)
    assert audit.details["replaced_damaged"] == "attempts"
    assert audit.details["before"] == "unreadable"
    out = world.app("write").invoke(None, {"thread_id": T})
    assert out["messages"][-1]["content"] == "Refunded."
    assert world.received() == received, "the recorded result was used"


def test_resolve_cannot_hide_a_damaged_identity(world: World) -> None:
    effect_id = _parked_intent(world)
    world.damage(effect_id, "status", "pendin")
    world.damage(effect_id, "node", "")  # ... and a column no resolution replaces
    before = world.snapshot(effect_id)
    with pytest.raises(CorruptRecordError):
        world.app().resolve_effect(effect_id, "not_done", actor="ops", reason="checked")
    assert world.snapshot(effect_id) == before


def test_a_parked_effect_is_unaffected(world: World) -> None:
    """A whole row that parks still parks (no false alarm on a real pending state)."""
    with pytest.raises(_CrashSignal):
        world.app(reconcile=False).invoke(USER, {"thread_id": T, "fault_plan": FaultPlan(SENT)})
    with pytest.raises(NeedsReviewError):
        world.app(reconcile=False).invoke(None, {"thread_id": T})
    assert world.received() == 1
