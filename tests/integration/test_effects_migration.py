"""Schema migration 7 drops the effects table's second unique index, (effect_type,
effect_id): a database an older oncegraph wrote keeps every effect record exactly, and
the ledger still refuses a second intent for one effect id."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from old_schema import Execute, old_store

from oncegraph.storage.records import Attempt, EffectClass, EffectRecord, EffectStatus
from oncegraph.storage.sql import rows
from oncegraph.storage.sql import statements as S
from oncegraph.storage.sql.schema import LATEST_VERSION, SCHEMA_TABLE


def _effects() -> list[EffectRecord]:
    """Effect records as an older oncegraph left them: pending, completed with attempts,
    failed, with and without optional fields."""
    base = {
        "effect_class": EffectClass.WRITE,
        "command_id": "cmd",
        "run_id": "run-old",
        "thread_id": "t-old",
        "node": "tools",
        "request_hash": "sha256:h",
        "created_at": 10.0,
        "updated_at": 11.0,
    }
    return [
        EffectRecord(
            effect_id="eff-pending",
            effect_type="refund",
            status=EffectStatus.PENDING,
            request={"amount": 10, "note": "it's \\ \u00e9"},
            row_version=1,
            **base,  # type: ignore[arg-type]
        ),
        EffectRecord(
            effect_id="eff-done",
            effect_type="send_email",
            status=EffectStatus.COMPLETED,
            checkpoint_id="cp-1",
            request={"to": "ann@example.com"},
            recipient="ann@example.com",
            attempts=(Attempt(1, 12.0, 12.5, "completed"),),
            provider_reference="msg_1",
            result={"id": "msg_1"},
            row_version=3,
            **base,  # type: ignore[arg-type]
        ),
        EffectRecord(
            effect_id="eff-failed",
            effect_type="refund",
            status=EffectStatus.FAILED,
            attempts=(Attempt(1, 13.0, 13.2, "failed", "declined"),),
            error="declined",
            row_version=2,
            **base,  # type: ignore[arg-type]
        ),
    ]


def _fill(execute: Execute) -> None:
    """``_effects()``, as an older oncegraph wrote them."""
    columns = S.EFFECT_COLUMNS
    insert = f"INSERT INTO oncegraph_effects ({', '.join(columns)}) VALUES "
    insert += f"({', '.join('?' for _ in columns)})"
    for effect in _effects():
        execute(insert, rows.PLAIN.effect_to_params(effect))


def _unique_indexes_sqlite(path: Path) -> list[str]:
    with sqlite3.connect(path) as conn:
        return [r[1] for r in conn.execute("PRAGMA index_list(oncegraph_effects)") if r[2] == 1]


def _unique_constraints_pg(dsn: str) -> list[str]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        found = conn.execute(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint "
            "WHERE conrelid = 'oncegraph_effects'::regclass AND contype IN ('u', 'p') "
            "ORDER BY 1"
        ).fetchall()
        return [r[0] for r in found]


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def test_migration_7_keeps_every_effect_and_the_key(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    where, store = old_store(kind, tmp_path, request, version=6, fill=_fill)
    if kind == "sqlite":
        path = Path(where)
        assert len(_unique_indexes_sqlite(path)) == 2  # effect_id, (effect_type, effect_id)
    else:
        import psycopg

        dsn = where
        assert _unique_constraints_pg(dsn) == [
            "PRIMARY KEY (effect_id)",
            "UNIQUE (effect_type, effect_id)",
        ]
    try:
        await store.setup()  # migrates
        for effect in _effects():
            assert await store.get_effect(effect.effect_id) == effect
        listed = await store.list_effects(run_id="run-old")  # through the run index
        assert sorted(e.effect_id for e in listed) == ["eff-done", "eff-failed", "eff-pending"]
        # the key still decides the first writer: a second intent for an id is refused
        again = _effects()[0].replace(effect_type="other", row_version=0)
        stored, created = await store.begin_effect(again)
        assert (stored, created) == (_effects()[0], False)
        assert await store.get_effect(again.effect_id) == _effects()[0]
    finally:
        await store.aclose()
    if kind == "sqlite":
        assert len(_unique_indexes_sqlite(path)) == 1
        with sqlite3.connect(path) as conn:
            version = conn.execute(f"SELECT max(version) FROM {SCHEMA_TABLE}").fetchone()
            indexes = {r[1] for r in conn.execute("PRAGMA index_list(oncegraph_effects)")}
        assert {"oncegraph_effects_run", "oncegraph_effects_thread"} <= indexes
    else:
        assert _unique_constraints_pg(dsn) == ["PRIMARY KEY (effect_id)"]
        with psycopg.connect(dsn, autocommit=True) as pg:
            version = pg.execute(f"SELECT max(version) FROM {SCHEMA_TABLE}").fetchone()
    assert version == (LATEST_VERSION,)
