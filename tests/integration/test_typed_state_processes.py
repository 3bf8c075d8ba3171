"""Guarantee 14 across real processes: typed state is the same type after a SIGKILL.

``_typed_state_worker.py`` writes a dataclass, a pydantic model, datetimes, an Enum, a
UUID, a Decimal, bytes, a tuple, a set, a TypedDict holding typed values, dataclasses
in a log channel and LangChain messages, then blocks in the next node until the test
SIGKILLs it. A FRESH process continues the run (the node reads ``state["item"].sku``
and friends) and a third one only reads the state: both must find every value equal to
what was written and of the same type, on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

WORKER = Path(__file__).with_name("_typed_state_worker.py")
MARKER_WAIT = 120.0  # seconds; generous for a loaded machine, never reached when healthy
PG_DSN = os.environ.get("ONCEGRAPH_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")

pytestmark = pytest.mark.slow

EXPECTED_TYPES = {
    "item": "Item",
    "customer": "Customer",
    "customer.tier": "Tier",
    "at": "datetime",
    "day": "date",
    "tier": "Tier",
    "order_id": "UUID",
    "price": "Decimal",
    "blob": "bytes",
    "pair": "tuple",
    "tags": "set",
    "shipment": "dict",
    "shipment.when": "datetime",
    "shipment.items[0]": "Item",
    "events": "list",
    "events[0]": "Item",
    "messages": ["HumanMessage", "AIMessage", "ToolMessage"],
    "seen": "dict",
}
EXPECTED_SEEN = {
    "item.sku": "sku-1",
    "customer.tier": "gold",
    "at.year": "2024",
    "shipment.when.tz": "2:00:00",
    "events[1].photo": "02",
    "messages": "HumanMessage,AIMessage,ToolMessage",
    "tool call": "lookup:call_1",
}


@pytest.fixture
def fresh_pg() -> Iterator[str]:
    """A brand-new PostgreSQL database, dropped (FORCE) afterwards."""
    import psycopg
    from psycopg.conninfo import make_conninfo

    try:
        psycopg.connect(PG_DSN, connect_timeout=10, autocommit=True).close()
    except psycopg.Error as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"PostgreSQL is required under CI=true: {exc}")
        pytest.skip(f"PostgreSQL unreachable ({exc}); set ONCEGRAPH_TEST_PG_DSN")
    name = "og_typed_" + uuid.uuid4().hex[:16]
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        yield make_conninfo(PG_DSN, dbname=name)
    finally:
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    """``(backend, path or dsn)``."""
    if request.param == "sqlite":
        return "sqlite", str(tmp_path / "runs.db")
    return "postgres", str(request.getfixturevalue("fresh_pg"))


def _spawn(where: tuple[str, str], tmp: Path, action: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), *where, str(tmp), action],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "ONCEGRAPH_CRASH_AT"},
    )


def _kill_at_marker(proc: subprocess.Popen[str], marker: Path) -> None:
    deadline = time.monotonic() + MARKER_WAIT
    while not marker.exists():
        if proc.poll() is not None:
            _, err = proc.communicate()
            pytest.fail(f"the worker exited ({proc.returncode}) before the marker: {err}")
        if time.monotonic() > deadline:
            proc.kill()
            proc.communicate()
            pytest.fail(f"no marker after {MARKER_WAIT}s")
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL


def _report(where: tuple[str, str], tmp: Path, action: str) -> dict[str, Any]:
    proc = _spawn(where, tmp, action)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    store = {"sqlite": "SqliteCheckpointer", "postgres": "PgCheckpointer"}[where[0]]
    assert f"STORE {store}" in err  # the backend asked for is the one used
    report: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return report


def test_typed_state_comes_back_with_its_types_in_a_fresh_process(
    where: tuple[str, str], tmp_path: Path
) -> None:
    _kill_at_marker(_spawn(where, tmp_path, "start"), tmp_path / "check.marker")

    resumed = _report(where, tmp_path, "resume")
    assert resumed["different"] == []
    assert resumed["equal"] is True
    assert resumed["types"] == EXPECTED_TYPES
    assert resumed["seen"] == EXPECTED_SEEN  # the node read typed values after the kill

    read = _report(where, tmp_path, "read")
    assert read == resumed
