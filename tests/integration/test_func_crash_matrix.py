"""The crash matrix for the functional API: SIGKILL a real process inside a ``@task``
effect, resume the run in a FRESH process, count the effects at a provider that outlived
both.

The worker (``_func_crash_worker.py``) runs an ``@entrypoint`` that calls a plain task
(``lookup``, recorded like a read) and then a task that charges the fake provider
(``refund``, class ``write`` or ``irreversible`` with a reconcile hook). A task's result
is committed as soon as it returns (a task is never folded into the entrypoint's
checkpoint), so the points inside the charge are:

=====================  ==================  ========================================
point                  provider at crash   ledger record of ``refund`` at crash
=====================  ==================  ========================================
after_intent           nothing             pending (intent committed, nothing sent)
in_tool                charged             pending (sent, answer not yet recorded)
after_tool_return      charged             pending
after_effect_record    charged             completed
=====================  ==================  ========================================

On resume the run completes with exactly ONE charge at the provider on every point and
class: a ``write`` task that may have been sent is sent again with the SAME idempotency
key (the provider answers from its key store); an ``irreversible`` one is reconciled
(``find_by_key``) and never sent twice; a recorded one is served. The plain ``lookup``
task finished before every crash point, so its body runs once in all.

Bounded: these four points x two classes on ``invoke`` over SQLite and PostgreSQL, and
two points on ``stream``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from oncegraph.storage.checkpointer import PgCheckpointer, SqliteCheckpointer
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import EffectRecord, EffectStatus
from oncegraph.testing.crash import run_in_subprocess
from oncegraph.testing.provider import ProviderClient, ProviderProcess, serve_forever_in_subprocess

pytestmark = pytest.mark.slow

WORKER = Path(__file__).with_name("_func_crash_worker.py")
# The n-th hit of each point that falls in ``refund``: ``lookup`` (a read) passed
# after_tool_return and after_effect_record once before it.
HIT = {"after_intent": 1, "in_tool": 1, "after_tool_return": 2, "after_effect_record": 2}
POINTS = tuple(HIT)
SENT = {"in_tool", "after_tool_return", "after_effect_record"}
CLASSES = ("write", "irreversible")


@dataclass
class World:
    tmp: Path
    provider: ProviderProcess
    pg_dsn: str | None

    def store(self) -> Checkpointer:
        if self.pg_dsn is not None:
            return PgCheckpointer(postgres_dsn=self.pg_dsn)
        return SqliteCheckpointer(self.tmp / "runs.db")

    def run(self, mode: str, tool: str, path: str, crash: str | None = None) -> Any:
        store = ["--pg", self.pg_dsn] if self.pg_dsn else ["--db", str(self.tmp / "runs.db")]
        args = [*store, "--provider", self.provider.url, "--calls-log", str(self.log)]
        args += ["--mode", mode, "--tool", tool, "--path", path]
        return run_in_subprocess(
            WORKER, args, timeout=300, crash_at=(crash, HIT[crash]) if crash else None
        )

    @property
    def log(self) -> Path:
        return self.tmp / "calls.jsonl"

    def calls(self, name: str) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        lines = [json.loads(x) for x in self.log.read_text().splitlines()]
        return [c for c in lines if c["task"] == name]

    def records(self, effect_type: str) -> list[EffectRecord]:
        async def read() -> list[EffectRecord]:
            store = self.store()
            await store.setup()
            try:
                return await store.list_effects(thread_id="func-crash")
            finally:
                await store.aclose()

        return [r for r in asyncio.run(read()) if r.effect_type == effect_type]


@pytest.fixture
def world(request: pytest.FixtureRequest, backend: str, tmp_path: Path) -> Iterator[World]:
    dsn = request.getfixturevalue("fresh_dsn") if backend == "postgres" else None
    with serve_forever_in_subprocess(tmp_path / "provider.port") as provider:
        yield World(tmp_path, provider, dsn)


def _cases(paths: tuple[str, ...], points: tuple[str, ...]) -> list[Any]:
    out = []
    for backend in ("sqlite", "postgres"):
        marks = [pytest.mark.postgres] if backend == "postgres" else []
        for path in paths:
            for point in points:
                for cls in CLASSES:
                    out.append(pytest.param(backend, path, point, cls, marks=marks))
    return out


@pytest.mark.parametrize(
    ("backend", "path", "point", "cls"),
    _cases(("invoke",), POINTS) + _cases(("stream",), ("after_intent", "in_tool")),
)
def test_sigkill_inside_a_task_effect(world: World, path: str, point: str, cls: str) -> None:
    crashed = world.run("run", cls, path, crash=point)
    assert crashed.killed and crashed.returncode == -9, crashed.describe()
    client = ProviderClient(world.provider.url)
    charged = client.effects()
    assert len(charged) == (1 if point in SENT else 0), charged
    (record,) = world.records("refund")
    expected = EffectStatus.COMPLETED if point == "after_effect_record" else EffectStatus.PENDING
    assert record.status is expected
    assert len(world.records("lookup")) == 1

    resumed = world.run("resume", cls, path)
    assert resumed.returncode == 0, resumed.describe()
    report = resumed.json()
    assert report["outcome"] == "completed", report
    assert report["run_status"] == "completed", report
    effects = client.effects()
    assert len(effects) == 1, effects  # one charge at the recipient, whatever the point
    assert report["result"] == {"receipt": {"charge_id": effects[0]["id"], "order_id": "1042"}}, (
        report
    )
    assert len(world.calls("lookup")) == 1  # a finished task is served, never run again
    bodies = world.calls("refund")
    assert len({c["key"] for c in bodies}) == 1  # one idempotency key on every attempt
    if point == "after_effect_record" or cls == "irreversible":
        # recorded: served; irreversible: reconciled at the recipient, never re-sent
        assert len(bodies) == 1, bodies
    (record,) = world.records("refund")
    assert record.status is EffectStatus.COMPLETED
    assert record.effect_id == bodies[0]["key"]


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_blind_irreversible_task_parks_instead_of_resending(world: World) -> None:
    """An irreversible task with no reconcile hook, killed after the provider charged:
    its outcome is unknown, so the resume parks the run for review and sends nothing."""
    crashed = world.run("run", "irreversible-noreconcile", "invoke", crash="in_tool")
    assert crashed.returncode == -9, crashed.describe()
    resumed = world.run("resume", "irreversible-noreconcile", "invoke")
    report = resumed.json()
    assert report["outcome"] == "needs_review", report
    assert report["run_status"] == "needs_review", report
    assert len(ProviderClient(world.provider.url).effects()) == 1
    assert len(world.calls("refund")) == 1
