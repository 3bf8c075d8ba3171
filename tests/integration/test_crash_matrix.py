"""The crash matrix: kill a real worker process at every commit boundary, resume it in a
FRESH process, and count the effects at a provider that outlived both.

Each test starts the fake payment provider as its own OS process, runs
``crash_worker.py`` with ``ONCEGRAPH_CRASH_AT=<point>:<nth>`` so that it SIGKILLs itself
inside the ``tools`` step (returncode -9 asserted), then runs a new worker process that
continues the run (``invoke(None)`` or ``stream(None)``), and checks three witnesses:
the provider's effects, the worker's call log (one line per execution of a tool body,
written before the provider is called) and the SQLite ledger itself.

What each crash point leaves behind, for a single tool call (folded into the step's
checkpoint, guarantee 3):

================  =====================  =========================================
point             provider after crash   ledger record of the tool call after crash
================  =====================  =========================================
before_intent     nothing                none (write: pending, planned with the
                                         model turn's checkpoint; nothing sent)
after_intent      nothing                pending (intent committed, nothing sent)
in_tool           charged                pending (sent, answer not yet recorded)
after_tool_return charged                pending
before_checkpoint charged                pending (result staged, commit not reached)
after_effect_rec. charged                completed (rode the step's commit)
after_checkpoint  charged                completed
================  =====================  =========================================

And what the resume does, by tool class:

* ``write``: always completes with ONE provider effect. A pending record is re-sent with
  the SAME idempotency key, so for the "charged + pending" points the tool body runs
  twice with one key and the provider answers the second time from its key store.
* ``irreversible`` with ``reconcile``: always completes with ONE provider effect and the
  tool body never runs twice: a pending record is reconciled (``find_by_key``): not
  found (after_intent) -> sent once; found (in_tool, after_tool_return,
  before_checkpoint) -> recorded as done without calling the tool.
* ``irreversible`` without ``reconcile``: before_intent -> completes (there was no
  intent, so nothing could have been sent), one effect; after_intent -> needs_review with
  ZERO provider effects (the intent was committed, the call never made, but nothing can
  tell that); in_tool / after_tool_return / before_checkpoint -> needs_review with ONE
  effect; after_effect_record / after_checkpoint -> completes with one effect.

Backends. Every case runs on SQLite (a file per test) and on PostgreSQL (a fresh
database ``og_crash_<random>`` per test, created from ONCEGRAPH_TEST_PG_DSN, default
``postgresql://postgres@127.0.0.1:5432/test``, and dropped afterwards; unreachable ->
skipped with the reason, except under CI=true where it fails). The assertions are the
same, exact ones on both. Every crash point runs on every store and every run path, but
not the full cross product (each case is three processes):

* ``test_crash_matrix``: the FULL point x class grid on ``invoke`` on both stores (21
  cases each); on ``stream`` every point once per store, the class rotating along the
  points and shifted by one between the stores (7 cases each), so on ``stream`` each point
  meets two of the three classes and each class meets every store;
* ``test_resume_under_the_other_path``: on SQLite the points after_intent, in_tool and
  before_checkpoint x all three classes, each (point, class) once, the direction
  (crashed under ``stream`` and resumed under ``invoke``, or the other way) alternating
  so that each direction meets every point and every class (9 cases); on PostgreSQL
  in_tool x all three classes, crashed under ``stream`` and resumed under ``invoke``
  (3 cases);
* ``test_parallel_finished_sibling_is_not_rerun`` and ``test_read_tool_may_run_again``
  on ``invoke`` only;
* PostgreSQL only, ``test_sigkill_with_open_transaction_does_not_block_the_resume``:
  the tool body leaves a transaction open on its own connection holding ``FOR UPDATE``
  locks on the thread row and the effect row (witnessed locked with ``NOWAIT`` from a
  third connection), the process dies by SIGKILL at before_checkpoint, and a fresh
  process, whose connections carry ``lock_timeout`` so a lock still held fails it
  instead of hanging, resumes to completion: the server ended the dead client's
  transaction.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from oncegraph.storage.checkpointer import PgCheckpointer, SqliteCheckpointer
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import EffectRecord, EffectStatus
from oncegraph.testing.crash import CompletedRun, run_in_subprocess
from oncegraph.testing.provider import (
    ProviderClient,
    ProviderProcess,
    serve_forever_in_subprocess,
)

pytestmark = pytest.mark.slow

WORKER = Path(__file__).with_name("crash_worker.py")
THREAD = "crash-thread"
FINAL = "All refunds are done."

# The n-th hit of each point that falls in the ``tools`` step: the agent step before it
# already passed after_tool_return (the model call), before_checkpoint,
# after_effect_record (the folded model record) and after_checkpoint once.
TOOL_STEP_HIT = {
    "before_intent": 1,
    "after_intent": 1,
    "in_tool": 1,
    "after_tool_return": 2,
    "after_effect_record": 2,
    "before_checkpoint": 2,
    "after_checkpoint": 2,
}
POINTS = tuple(TOOL_STEP_HIT)
NOT_SENT = {"before_intent", "after_intent"}
SENT_UNRECORDED = {"in_tool", "after_tool_return", "before_checkpoint"}
RECORDED = {"after_effect_record", "after_checkpoint"}
RISKY_CLASSES = ("write", "irreversible", "irreversible-noreconcile")
TOOL_NAMES = {
    "write": "refund_write",
    "irreversible": "refund_irreversible",
    "irreversible-noreconcile": "refund_blind",
    "read": "order_status",
}


def rotating(points: Sequence[str], shift: int) -> list[tuple[str, str]]:
    """Each point once, with the risky classes in turn (starting ``shift`` along)."""
    return [(p, RISKY_CLASSES[(i + shift) % len(RISKY_CLASSES)]) for i, p in enumerate(points)]


def pg(*values: object) -> Any:
    """One PostgreSQL case: ``("postgres", *values)`` marked ``postgres``."""
    return pytest.param("postgres", *values, marks=pytest.mark.postgres)


def both(*values: object) -> list[Any]:
    """The same case on SQLite and on PostgreSQL."""
    return [("sqlite", *values), pg(*values)]


# -- the per-test world: a provider process, a database, a call log ---------------------


@dataclass
class World:
    tmp: Path
    provider: ProviderProcess
    backend: str  # "sqlite" or "postgres"
    pg_dsn: str | None = None

    @property
    def db(self) -> Path:
        return self.tmp / "runs.db"

    def store_args(self) -> list[str]:
        if self.pg_dsn is not None:
            return ["--pg", self.pg_dsn]
        return ["--db", str(self.db)]

    def store(self) -> Checkpointer:
        if self.pg_dsn is not None:
            return PgCheckpointer(postgres_dsn=self.pg_dsn)
        return SqliteCheckpointer(self.db)

    @property
    def calls_log(self) -> Path:
        return self.tmp / "calls.jsonl"

    @property
    def client(self) -> ProviderClient:
        return ProviderClient(self.provider.url)

    def worker(
        self,
        mode: str,
        *,
        tool: str,
        path: str,
        parallel: bool = False,
        crash: str | None = None,
        extra: Sequence[str] = (),
    ) -> CompletedRun:
        args = [
            *self.store_args(),
            "--provider",
            self.provider.url,
            "--calls-log",
            str(self.calls_log),
            "--thread",
            THREAD,
            "--mode",
            mode,
            "--path",
            path,
            "--tool",
            tool,
        ]
        if parallel:
            args.append("--parallel")
        args.extend(extra)
        crash_at = (crash, TOOL_STEP_HIT[crash]) if crash is not None else None
        return run_in_subprocess(WORKER, args, timeout=300, crash_at=crash_at)

    def crash(self, point: str, *, tool: str, path: str, parallel: bool = False) -> None:
        """Run the worker with a crash plan and assert it died by SIGKILL."""
        run = self.worker("run", tool=tool, path=path, parallel=parallel, crash=point)
        assert run.killed, f"the worker was to SIGKILL itself at {point}\n{run.describe()}"
        assert run.returncode == -9

    def resume(self, *, tool: str, path: str, parallel: bool = False) -> dict[str, Any]:
        run = self.worker("resume", tool=tool, path=path, parallel=parallel)
        assert run.returncode == 0, run.describe()
        report: dict[str, Any] = run.json()
        return report

    def calls(self) -> list[dict[str, Any]]:
        if not self.calls_log.exists():
            return []
        return [json.loads(line) for line in self.calls_log.read_text().splitlines()]

    def provider_effects(self) -> list[dict[str, Any]]:
        return self.client.effects()

    def ledger_all(self) -> list[EffectRecord]:
        """Every effect record of the thread (model turns included)."""

        async def read() -> list[EffectRecord]:
            store = self.store()
            await store.setup()
            try:
                return await store.list_effects(thread_id=THREAD)
            finally:
                await store.aclose()

        return asyncio.run(read())

    def ledger(self, effect_type: str) -> list[EffectRecord]:
        """The tool's effect records, read from the store by this process."""
        return [r for r in self.ledger_all() if r.effect_type == effect_type]


@pytest.fixture
def world(request: pytest.FixtureRequest, backend: str, tmp_path: Path) -> Iterator[World]:
    """The provider process and an empty store of ``backend`` (the test's parameter)."""
    dsn: str | None = None
    if backend == "postgres":
        dsn = request.getfixturevalue("fresh_dsn")
    elif backend != "sqlite":
        raise ValueError(f"unknown backend {backend!r}")
    with serve_forever_in_subprocess(tmp_path / "provider.port") as provider:
        yield World(tmp_path, provider, backend, dsn)


# -- expectations -------------------------------------------------------------------------


def _expected_ledger_after_crash(point: str, tool: str) -> EffectStatus | None:
    if point == "before_intent":
        # a write call's intent rides the model turn's commit (oncegraph.ledger.planned)
        return EffectStatus.PENDING if tool == "write" else None
    if point in RECORDED:
        return EffectStatus.COMPLETED
    return EffectStatus.PENDING


def _check_completed(world: World, report: dict[str, Any], *, tool: str) -> None:
    assert report["outcome"] == "completed", report
    assert report["run_status"] == "completed", report
    assert report["final"] == FINAL
    effects = world.provider_effects()
    assert len(effects) == 1, effects
    (message,) = report["tool_messages"]
    assert message["status"] == "success", message
    assert json.loads(message["content"])["charge_id"] == effects[0]["id"]
    (record,) = world.ledger(TOOL_NAMES[tool])
    assert record.status is EffectStatus.COMPLETED
    assert effects[0]["idempotency_key"] == record.effect_id


def _check_needs_review(world: World, report: dict[str, Any], *, provider_count: int) -> None:
    assert report["outcome"] == "needs_review", report
    assert report["run_status"] == "needs_review", report
    (record,) = world.ledger(TOOL_NAMES["irreversible-noreconcile"])
    assert record.status is EffectStatus.PENDING
    assert report["effect_id"] == record.effect_id
    assert record.effect_id in report["run_error"]
    assert len(world.provider_effects()) == provider_count
    found = world.client.find_by_key(record.effect_id)
    assert (found is not None) == (provider_count == 1), found


def _run_case(world: World, point: str, tool: str, crash_path: str, resume_path: str) -> None:
    world.crash(point, tool=tool, path=crash_path)

    # What the crash left: at the provider and in the ledger.
    sent = point not in NOT_SENT
    assert len(world.provider_effects()) == (1 if sent else 0)
    records = world.ledger(TOOL_NAMES[tool])
    expected = _expected_ledger_after_crash(point, tool)
    assert [r.status for r in records] == ([] if expected is None else [expected])
    calls_before = len(world.calls())
    assert calls_before == (1 if sent else 0)

    report = world.resume(tool=tool, path=resume_path)
    calls = world.calls()
    stats = world.client.stats()

    if tool == "irreversible-noreconcile" and (point == "after_intent" or point in SENT_UNRECORDED):
        _check_needs_review(world, report, provider_count=1 if sent else 0)
        assert len(calls) == calls_before, "a parked irreversible tool must not be called"
        return

    _check_completed(world, report, tool=tool)
    assert stats["performed"] == 1
    (record,) = world.ledger(TOOL_NAMES[tool])
    if tool == "write" and point in SENT_UNRECORDED | {"after_intent"}:
        # re-sent with the SAME idempotency key (the provider answered from its store)
        assert len(calls) == (2 if sent else 1)
        assert {c["key"] for c in calls} == {record.effect_id}
        assert stats["replayed"] == (1 if sent else 0)
    else:
        assert len(calls) == 1, calls  # the tool body ran once in all
        assert calls[0]["key"] == record.effect_id
        assert stats["replayed"] == 0
    if tool == "irreversible" and point in SENT_UNRECORDED:
        assert record.attempts[-1].outcome == "reconciled", record.attempts


# -- the matrix ----------------------------------------------------------------------------


MATRIX = [
    *[("sqlite", point, tool, "invoke") for tool in RISKY_CLASSES for point in POINTS],
    *[("sqlite", point, tool, "stream") for point, tool in rotating(POINTS, 0)],
    *[pg(point, tool, "invoke") for tool in RISKY_CLASSES for point in POINTS],
    *[pg(point, tool, "stream") for point, tool in rotating(POINTS, 1)],
]


@pytest.mark.parametrize(("backend", "point", "tool", "path"), MATRIX)
def test_crash_matrix(world: World, point: str, tool: str, path: str) -> None:
    _run_case(world, point, tool, crash_path=path, resume_path=path)


DIRECTIONS = (("stream", "invoke"), ("invoke", "stream"))
OTHER_PATH = [
    *[
        ("sqlite", point, tool, *DIRECTIONS[(i + j) % 2])
        for j, tool in enumerate(RISKY_CLASSES)
        for i, point in enumerate(("after_intent", "in_tool", "before_checkpoint"))
    ],
    *[pg("in_tool", tool, "stream", "invoke") for tool in RISKY_CLASSES],
]


@pytest.mark.parametrize(("backend", "point", "tool", "crash_path", "resume_path"), OTHER_PATH)
def test_resume_under_the_other_path(
    world: World, point: str, tool: str, crash_path: str, resume_path: str
) -> None:
    _run_case(world, point, tool, crash_path=crash_path, resume_path=resume_path)


EXIT_CASES = [
    c for p, t in (("in_tool", "irreversible"), ("after_checkpoint", "write")) for c in both(p, t)
]


@pytest.mark.parametrize(("backend", "point", "tool"), EXIT_CASES)
def test_durability_exit_crash_then_resume_sends_once(world: World, point: str, tool: str) -> None:
    # Under durability="exit" every step is still committed before the next: a SIGKILL
    # mid-run leaves them all, the resume (which names no durability: the run's own is
    # kept) sends nothing recorded again, and its exit folds the crashed call's steps too.
    run = world.worker("run", tool=tool, path="invoke", crash=point, extra=["--durability", "exit"])
    assert run.killed and run.returncode == -9, run.describe()
    assert len(world.calls()) == 1
    report = world.resume(tool=tool, path="invoke")
    _check_completed(world, report, tool=tool)
    assert len(world.calls()) == 1  # the tool body ran once in all
    assert world.client.stats()["performed"] == 1
    assert len(report["history"]) == 1  # the exit checkpoint only, as LangGraph lists it


PARALLEL = [
    *[
        ("sqlite", tool, path)
        for path in ("invoke", "stream")
        for tool in ("write", "irreversible")
    ],
    *[pg(tool, "invoke") for tool in ("write", "irreversible")],
]


@pytest.mark.parametrize(("backend", "tool", "path"), PARALLEL)
def test_parallel_finished_sibling_is_not_rerun(world: World, tool: str, path: str) -> None:
    # Two calls in one assistant message are recorded one by one; the worker dies right
    # after the first sibling's result is recorded (after_effect_record, 2nd hit).
    world.crash("after_effect_record", tool=tool, path=path, parallel=True)
    records = world.ledger(TOOL_NAMES[tool])
    finished = {r.effect_id for r in records if r.status is EffectStatus.COMPLETED}
    assert 1 <= len(finished) <= 2, records

    report = world.resume(tool=tool, path=path, parallel=True)
    assert report["outcome"] == "completed", report
    assert report["run_status"] == "completed"
    assert [m["status"] for m in report["tool_messages"]] == ["success", "success"]
    records = world.ledger(TOOL_NAMES[tool])
    assert len(records) == 2
    assert all(r.status is EffectStatus.COMPLETED for r in records)
    effects = world.provider_effects()
    per_key = Counter(e["idempotency_key"] for e in effects)
    assert per_key == Counter({r.effect_id: 1 for r in records}), effects
    assert sorted(e["body"]["order_id"] for e in effects) == ["1042", "1043"]
    calls = Counter(c["key"] for c in world.calls())
    for key in finished:
        assert calls[key] == 1, f"the finished sibling {key} ran again: {calls}"
        (record,) = [r for r in records if r.effect_id == key]
        assert len(record.attempts) == 1


# The two-call case of guarantee 13: one call parks, its sibling is slow. Crashes hit the FIRST
# call (the blind one: it starts first and never sleeps); the resume must finish and
# record the slow sibling before the park reaches the caller.
PARKING = ("before_intent", "after_intent", "in_tool", "after_tool_return", "after_effect_record")


@pytest.mark.parametrize(("backend", "point"), [c for p in PARKING for c in both(p)])
def test_parked_parallel_step_finishes_and_records_its_slow_sibling(
    world: World, point: str
) -> None:
    world.crash(point, tool="blind+slow", path="invoke")
    report = world.resume(tool="blind+slow", path="invoke")
    records = {r.effect_type: r for r in world.ledger_all()}
    blind, slow = records.get("refund_blind"), records["refund_slow"]
    # the slow sibling always ends recorded, whether or not its sibling parked the run
    assert slow.status is EffectStatus.COMPLETED, slow
    effects = world.provider_effects()
    per_key = Counter(e["idempotency_key"] for e in effects)
    assert per_key[slow.effect_id] == 1, effects
    blind_runs = [c for c in world.calls() if c["tool"] == "refund_blind"]
    assert len(blind_runs) <= 1, "the irreversible call never runs twice"
    if point in ("after_intent", "in_tool", "after_tool_return"):
        assert report["outcome"] == "needs_review", report
        assert blind is not None and blind.status is EffectStatus.PENDING
        assert report["effect_id"] == blind.effect_id
        assert per_key[blind.effect_id] == (0 if point == "after_intent" else 1)
    else:
        assert report["outcome"] == "completed", report
        assert blind is not None and blind.status is EffectStatus.COMPLETED
        assert per_key[blind.effect_id] == 1


READ = [
    *[
        ("sqlite", point, runs, path)
        for path in ("invoke", "stream")
        for point, runs in (("in_tool", 2), ("after_checkpoint", 1))
    ],
    *[pg(point, runs, "invoke") for point, runs in (("in_tool", 2), ("after_checkpoint", 1))],
]


@pytest.mark.parametrize(("backend", "point", "runs", "path"), READ)
def test_read_tool_may_run_again(world: World, point: str, runs: int, path: str) -> None:
    # A read has no intent record; unrecorded, it simply runs again (and that's allowed).
    world.crash(point, tool="read", path=path)
    assert len(world.calls()) == 1
    report = world.resume(tool="read", path=path)
    assert report["outcome"] == "completed", report
    assert report["final"] == FINAL
    assert len(world.calls()) == runs
    (record,) = world.ledger("order_status")
    assert record.status is EffectStatus.COMPLETED
    assert world.provider_effects() == []


# -- PostgreSQL only: a SIGKILL while a transaction is open --------------------------------


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"])
@pytest.mark.parametrize("tool", ["write", "irreversible"])
def test_sigkill_with_open_transaction_does_not_block_the_resume(world: World, tool: str) -> None:
    # The dying worker holds FOR UPDATE locks on the thread row and the effect row in a
    # transaction it never ends; the resume needs both rows (the effect result and the
    # thread's head move). The server must end the transaction when the client's
    # connection drops. The resume's connections carry lock_timeout, so a lock that
    # was still held makes the resume fail with an error instead of hanging.
    from psycopg.conninfo import make_conninfo

    assert world.pg_dsn is not None
    witness = world.tmp / "lock.json"
    run = world.worker(
        "run",
        tool=tool,
        path="invoke",
        crash="before_checkpoint",
        extra=["--hold-lock", str(witness)],
    )
    assert run.killed, run.describe()
    held = json.loads(witness.read_text())
    assert held["thread_rows"] == 1, held
    assert held["effect_rows"] == 1, held
    assert held["contended"] is True, f"the rows were not locked when the worker died: {held}"
    assert len(world.provider_effects()) == 1
    (record,) = world.ledger(TOOL_NAMES[tool])
    assert record.status is EffectStatus.PENDING

    world.pg_dsn = make_conninfo(world.pg_dsn, options="-c lock_timeout=10s")
    report = world.resume(tool=tool, path="invoke")
    _check_completed(world, report, tool=tool)
    stats = world.client.stats()
    assert stats["performed"] == 1
    calls = world.calls()
    (record,) = world.ledger(TOOL_NAMES[tool])
    assert {c["key"] for c in calls} == {record.effect_id}
    if tool == "write":  # re-sent with the same key, answered from the provider's store
        assert len(calls) == 2
        assert stats["replayed"] == 1
    else:  # reconciled: found at the provider, the body does not run again
        assert len(calls) == 1
        assert record.attempts[-1].outcome == "reconciled", record.attempts
