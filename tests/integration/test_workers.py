"""Distributed workers over one PostgreSQL database: claim, lease, heartbeat, fencing,
recovery of a SIGKILLed worker, release on SIGTERM, FIFO per thread.

Each test gets a fresh database created from ONCEGRAPH_TEST_PG_DSN (default: the local
``test`` database) and dropped afterwards; without a reachable server the tests skip,
except under CI=true where they fail. Worker processes run ``python -m oncegraph worker
worker_app:app`` with a small agent module written into the test's temp directory: a
:class:`ScriptedModel` asks for one ``charge`` tool call per run (the order id is the
user's message) and the tool charges the fake provider (a thread in this process) with
the effect's idempotency key, so the provider counts real side effects.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypedDict

import psycopg
import pytest

from oncegraph import END, START, MessagesState, StateGraph
from oncegraph.app import CompiledGraph
from oncegraph.errors import LeaseLostError
from oncegraph.prebuilt.agent import ReactAgent
from oncegraph.prebuilt.models.scripted import ScriptedModel
from oncegraph.runtime.config import RunConfig
from oncegraph.storage.records import CheckpointRecord, RunRecord, RunStatus, StepCommit
from oncegraph.storage.sql.postgres import PgCheckpointer
from oncegraph.testing.provider import FakeProvider
from oncegraph.worker import Runnable, RunQueue, Worker
from oncegraph.worker.queue import CLAIM, claim_params

pytestmark = pytest.mark.postgres


APP_MODULE = '''
"""Worker test app: one charge per run through the fake provider."""
import os
import time

from oncegraph import current_effect, tool
from oncegraph.prebuilt.agent import ReactAgent
from oncegraph.prebuilt.models.scripted import ScriptedModel
from oncegraph.storage.checkpointer import PgCheckpointer
from oncegraph.testing.provider import ProviderClient

client = ProviderClient(os.environ["WORKER_TEST_PROVIDER"])
SLEEP = float(os.environ.get("WORKER_TEST_TOOL_SLEEP", "0"))
GATE = os.environ.get("WORKER_TEST_GATE")  # a file: the tool waits for it to exist


@tool(effect="write", recipient="payments")
def charge(order_id: str, amount: float) -> dict:
    """Charge an order (idempotent at the provider through the effect key)."""
    time.sleep(SLEEP)
    deadline = time.monotonic() + 300
    while GATE and not os.path.exists(GATE) and time.monotonic() < deadline:
        time.sleep(0.02)
    done = client.charge(amount, "eur", order_id,
                         idempotency_key=current_effect().idempotency_key)
    return {"charge_id": done["id"], "order_id": order_id}


def ask(messages, tools):
    order = [m for m in messages if m["role"] == "user"][-1]["content"]
    return {"content": "", "tool_calls": [
        {"id": "call_1", "name": "charge", "args": {"order_id": order, "amount": 10.0}}]}


app = ReactAgent(
    model=ScriptedModel.turns(ask, "charged"),
    system_prompt="You charge orders.",
    tools=[charge],
).compile(checkpointer=PgCheckpointer(os.environ["WORKER_TEST_DSN"]))
'''


# -- fixtures ----------------------------------------------------------------------------


@pytest.fixture
def dsn(fresh_dsn: str) -> str:
    return fresh_dsn


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    with FakeProvider() as p:
        yield p


def sql(dsn: str, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description else []


def wait_for(what: str, check: Callable[[], bool], timeout: float = 120.0) -> None:
    """Poll until ``check()``; the timeout only catches a hang (a loaded VM is slow)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


class Workers:
    """Worker processes for one test; all killed at teardown."""

    def __init__(self, tmp: Path, dsn: str, provider_url: str) -> None:
        self.tmp = tmp
        (tmp / "worker_app.py").write_text(APP_MODULE)
        self.env = {
            **os.environ,
            "WORKER_TEST_DSN": dsn,
            "WORKER_TEST_PROVIDER": provider_url,
            "PYTHONPATH": os.pathsep.join([str(tmp), os.environ.get("PYTHONPATH", "")]),
        }
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(
        self,
        owner: str,
        *,
        concurrency: int = 4,
        lease: float = 2.0,
        heartbeat: float = 0.5,
        tool_sleep: float = 0.0,
        gate: Path | None = None,
        log_format: str = "text",
    ) -> subprocess.Popen[bytes]:
        """A worker process; its tool calls wait for ``gate`` to exist, if given."""
        argv = [
            sys.executable,
            "-m",
            "oncegraph",
            "worker",
            "worker_app:app",
            "--owner",
            owner,
            "--concurrency",
            str(concurrency),
            "--lease",
            str(lease),
            "--heartbeat",
            str(heartbeat),
            "--poll",
            "0.1",
            "--log-format",
            log_format,
        ]
        log = open(self.tmp / f"{owner}.log", "wb")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            argv,
            cwd=self.tmp,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={
                **self.env,
                "WORKER_TEST_TOOL_SLEEP": str(tool_sleep),
                "WORKER_TEST_GATE": str(gate) if gate else "",
            },
        )
        log.close()
        self.procs.append(proc)
        return proc

    def log(self, owner: str) -> str:
        return (self.tmp / f"{owner}.log").read_text(errors="replace")

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                with _suppress():
                    os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
            proc.wait(timeout=10)


class _suppress:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return exc[0] is ProcessLookupError


@pytest.fixture
def workers(tmp_path: Path, dsn: str, provider: FakeProvider) -> Iterator[Workers]:
    w = Workers(tmp_path, dsn, provider.url)
    try:
        yield w
    finally:
        w.stop_all()


def submit_all(dsn: str, orders: list[tuple[str, str]]) -> list[str]:
    """Submit one run per ``(thread_id, order_id)`` from this process; returns run ids."""

    async def go() -> list[str]:
        store = PgCheckpointer(dsn)
        app = _agent(store)
        try:
            return [
                (
                    await app.asubmit(
                        {"messages": [{"role": "user", "content": order}]}, {"thread_id": thread}
                    )
                ).run_id
                for thread, order in orders
            ]
        finally:
            await store.aclose()

    return asyncio.run(go())


def _agent(store: PgCheckpointer) -> CompiledGraph:
    """An app with the same graph as APP_MODULE's (same fingerprint), for submitting."""
    from oncegraph import tool

    @tool(effect="write", recipient="payments", dedup="never called in this process")
    def charge(order_id: str, amount: float) -> dict[str, Any]:
        """Charge an order (idempotent at the provider through the effect key)."""
        raise AssertionError("the test process never runs tools")

    return ReactAgent(
        model=ScriptedModel.turns("unused"), system_prompt="You charge orders.", tools=[charge]
    ).compile(checkpointer=store)


async def _queued(app: CompiledGraph, n: int) -> list[RunRecord]:
    """``n`` runs submitted to ``app``, each on its own thread (``t0``, ``t1``, ...), oldest
    first."""
    return [
        await app.asubmit(
            {"messages": [{"role": "user", "content": f"o-{i}"}]}, {"thread_id": f"t{i}"}
        )
        for i in range(n)
    ]


def mine_only(app: CompiledGraph) -> Runnable:
    """What a worker of ``app`` claims: its app's runs of its fingerprint."""
    return Runnable.of(app.service)


def expire_lease(dsn: str, run_id: str) -> None:
    """Move the run's lease expiry into the past, as a paused holder's lease would be.

    Waiting out a short real lease instead would make the test depend on the machine's
    speed (the SIGSTOP test below lets a real lease expire)."""
    sql(dsn, "UPDATE oncegraph_runs SET lease_expires_at = 0 WHERE run_id = %s", (run_id,))


def run_rows(dsn: str) -> dict[str, tuple[str, str | None, int]]:
    return {
        r[0]: (r[1], r[2], int(r[3]))
        for r in sql(dsn, "SELECT run_id, status, lease_owner, fencing_token FROM oncegraph_runs")
    }


def charge_keys(dsn: str) -> list[str]:
    return [
        r[0]
        for r in sql(dsn, "SELECT effect_id FROM oncegraph_effects WHERE effect_type = 'charge'")
    ]


def assert_one_effect_per_command(dsn: str, provider: FakeProvider, n: int) -> None:
    keys = charge_keys(dsn)
    assert len(keys) == n == len(set(keys))
    effects = provider.effects()
    performed_keys = [e["idempotency_key"] for e in effects]
    assert sorted(performed_keys) == sorted(keys), "one provider effect per command"
    assert provider.stats()["performed"] == n


# -- end to end: 3 workers, 100 runs, one SIGKILLed ----------------------------------------


@pytest.mark.slow
def test_three_workers_hundred_runs_one_sigkilled(
    dsn: str, provider: FakeProvider, workers: Workers
) -> None:
    n = 100
    orders = [(f"t{i}", f"o-{i}") for i in range(n)]
    submit_all(dsn, orders)
    procs = {
        name: workers.start(name, concurrency=4, tool_sleep=0.05) for name in ("w1", "w2", "w3")
    }

    def victim_busy() -> bool:
        rows = run_rows(dsn).values()
        done = sum(1 for s, _, _ in rows if s == "completed")
        held = sum(1 for s, o, _ in rows if s == "running" and o == "w1")
        return done >= 10 and held >= 1

    wait_for("w1 to hold runs after others completed", victim_busy)
    procs["w1"].send_signal(signal.SIGKILL)
    procs["w1"].wait(timeout=10)
    at_kill = {
        rid: tok for rid, (s, o, tok) in run_rows(dsn).items() if s == "running" and o == "w1"
    }
    assert at_kill, "w1 died holding runs"

    wait_for(
        "all runs to complete",
        lambda: all(s == "completed" for s, _, _ in run_rows(dsn).values()),
    )
    final = run_rows(dsn)
    for rid, token in at_kill.items():
        status, owner, new_token = final[rid]
        assert status == "completed" and owner in ("w2", "w3") and new_token > token
    assert_one_effect_per_command(dsn, provider, n)
    assert provider.stats()["rejected"] == 0
    # the survivors' logs say which runs they took over from the dead worker
    taken = workers.log("w2") + workers.log("w3")
    for rid in at_kill:
        assert f"run {rid} " in taken and "taken over from worker w1" in taken


# -- fencing -------------------------------------------------------------------------------


async def test_expired_lease_is_fenced_off(dsn: str) -> None:
    store = PgCheckpointer(dsn)
    other = PgCheckpointer(dsn)
    try:
        app = _agent(store)
        run = await app.asubmit(
            {"messages": [{"role": "user", "content": "o-1"}]}, {"thread_id": "t"}
        )
        queue, queue_b = RunQueue(store, mine_only(app)), RunQueue(other, mine_only(app))
        [mine] = await queue.claim("a", 60, 10)
        assert mine.run_id == run.run_id and mine.lease_owner == "a"
        assert await queue_b.claim("b", 5, 10) == []  # held: not claimable
        expire_lease(dsn, run.run_id)  # a is "paused": its lease expires
        [theirs] = await queue_b.claim("b", 5, 10)
        assert theirs.fencing_token == mine.fencing_token + 1
        assert not await queue.renew(run.run_id, "a", mine.fencing_token, 5)

        before = await store.get_run(run.run_id)
        with pytest.raises(LeaseLostError):
            await store.update_run(run.run_id, status=RunStatus.FAILED, fence=mine.fencing_token)
        cp = CheckpointRecord("cp-a", "t", run.run_id, -1, 1, None, {}, {}, ("agent",))
        with pytest.raises(LeaseLostError):
            await store.commit(
                StepCommit("t", 0, cp, run_status=RunStatus.RUNNING, fence=mine.fencing_token)
            )
        assert await store.get_thread("t") is None  # nothing written
        assert await store.get_run(run.run_id) == before
        assert not await queue.release(run.run_id, "a", mine.fencing_token)
        assert (await store.get_run(run.run_id)).lease_owner == "b"  # type: ignore[union-attr]
    finally:
        await store.aclose()
        await other.aclose()


async def test_app_run_under_a_lost_lease_writes_nothing(dsn: str) -> None:
    store = PgCheckpointer(dsn)
    try:
        app = _agent(store)
        run = await app.asubmit(
            {"messages": [{"role": "user", "content": "o-1"}]}, {"thread_id": "t"}
        )
        queue = RunQueue(store, mine_only(app))
        [mine] = await queue.claim("a", 60, 10)
        expire_lease(dsn, run.run_id)
        [theirs] = await queue.claim("b", 30, 10)
        assert theirs.fencing_token == mine.fencing_token + 1
        with pytest.raises(LeaseLostError):
            await app.service.execute(
                mine, RunConfig.parse({"thread_id": "t"}), fence=mine.fencing_token
            )
        assert await store.get_thread("t") is None  # nothing written
    finally:
        await store.aclose()


@pytest.mark.slow
def test_sigstopped_worker_cannot_write_after_its_lease_expired(
    dsn: str, provider: FakeProvider, workers: Workers, tmp_path: Path
) -> None:
    [run_id] = submit_all(dsn, [("t-stop", "o-stop")])
    gate = tmp_path / "gate"
    paused = workers.start("paused", concurrency=1, lease=1.0, heartbeat=0.2, gate=gate)
    wait_for("paused to claim", lambda: run_rows(dsn)[run_id][1] == "paused")
    # its intent is committed: the tool is running, held at the gate before the provider
    wait_for("paused to enter the tool", lambda: len(charge_keys(dsn)) == 1)
    os.kill(paused.pid, signal.SIGSTOP)
    try:
        # No sleep: the rescuer polls, and may claim only once the paused worker's lease
        # has expired AND the server has ended its silent lock session (claim_timeout).
        workers.start(
            "rescuer", concurrency=1, lease=5.0, heartbeat=0.5, tool_sleep=0.0, log_format="json"
        )
        wait_for("rescuer to complete", lambda: run_rows(dsn)[run_id][0] == "completed")
        version = sql(dsn, "SELECT version FROM oncegraph_threads WHERE thread_id = 't-stop'")
        token = run_rows(dsn)[run_id][2]
    finally:
        os.kill(paused.pid, signal.SIGCONT)
    gate.touch()  # the paused tool goes on to the provider, with the same key
    wait_for(
        "the paused worker to notice",
        lambda: "lease" in workers.log("paused").lower() and run_id in workers.log("paused"),
    )
    # its tool reaches the provider (answered from the key store: one effect) ...
    wait_for("the paused tool's charge", lambda: provider.stats()["replayed"] >= 1)
    # ... and it records nothing: its attempt to record that outcome is refused, the fence
    # has moved on (as the call's late outcome, or as the step's result: which one depends
    # on whether its heartbeat noticed the lost lease before the call returned), or its
    # heartbeat cancelled the step before its commit was answered. The database below
    # shows that nothing of it was written either way.
    wait_for(
        "the paused worker's refused record, or its step cancelled for the lost lease",
        lambda: "is no longer held with fencing token" in workers.log("paused")
        or "another worker holds the lease now" in workers.log("paused"),
    )
    assert paused.poll() is None, "a fenced-off run does not crash the worker"
    # the rescuer's (JSON) log says it took the run over from the silent worker
    lines = [json.loads(x) for x in workers.log("rescuer").splitlines() if x.startswith("{")]
    taken = [x for x in lines if x.get("taken_from") == "paused"]
    assert taken and taken[0]["run_id"] == run_id and "taken over" in taken[0]["message"]
    assert run_rows(dsn)[run_id] == ("completed", "rescuer", token)
    assert sql(dsn, "SELECT version FROM oncegraph_threads WHERE thread_id = 't-stop'") == version
    assert_one_effect_per_command(dsn, provider, 1)


# -- queue semantics ------------------------------------------------------------------------


def _plan_nodes(plan: str) -> list[tuple[str, str]]:
    """Each node of an EXPLAIN text: (its line, the text of its subtree)."""
    lines = plan.splitlines()

    def indent(line: str) -> int:
        return len(line) - len(line.lstrip(" ->"))

    nodes = []
    for i, line in enumerate(lines):
        if i and "->" not in line:
            continue
        end = i + 1
        while end < len(lines) and indent(lines[end]) > indent(line):
            end += 1
        nodes.append((line, "\n".join(lines[i:end])))
    return nodes


def _thrown_away(plan: str) -> list[int]:
    """The rows each scan of ``oncegraph_runs`` in an EXPLAIN ANALYZE read and filtered out."""
    counts = []
    scanning = False
    for line in plan.splitlines():
        if "->" in line or line.lstrip().startswith(("Update", "Limit")):
            scanning = " on oncegraph_runs " in line
        elif scanning and (found := re.search(r"Rows Removed by Filter: (\d+)", line)):
            counts.append(int(found.group(1)))
    return counts


def _claim_plan(dsn: str, r: Runnable, limit: int, *, analyze: bool = False) -> str:
    with psycopg.connect(dsn) as conn:  # rolled back: nothing is claimed
        how = "EXPLAIN (ANALYZE) " if analyze else "EXPLAIN "
        cur = conn.execute(how + CLAIM, claim_params(r, "c0", 30.0, limit))
        plan = "\n".join(row[0] for row in cur.fetchall())
        conn.rollback()
    return plan


@pytest.mark.parametrize("analyzed", [False, True], ids=["fresh-stats", "analyzed"])
async def test_a_claim_walks_the_queue_index_in_order_not_the_whole_queue(
    dsn: str, analyzed: bool
) -> None:
    """With 400 runs queued, the claim reads its app's queued runs through the
    ``oncegraph_runs_queued`` index, already in queue order (no sort of the queue: the
    only sort is of the running runs whose lease expired), before and after the table's
    statistics exist; it claims the oldest runs first."""
    store = PgCheckpointer(dsn)
    try:
        app = _agent(store)
        runs = await _queued(app, 400)
        if analyzed:
            sql(dsn, "ANALYZE oncegraph_runs")
        r = mine_only(app)
        plan = _claim_plan(dsn, r, 3)
        assert "oncegraph_runs_queued" in plan, plan
        assert "Seq Scan on oncegraph_runs" not in plan, plan
        for line, subtree in _plan_nodes(plan):
            if "Sort" in line and "Merge" not in line:
                assert "oncegraph_runs_queued" not in subtree, plan
        got = await RunQueue(store, r).claim("c0", 30, 3)
        assert [x.run_id for x in got] == [x.run_id for x in runs[:3]]
    finally:
        await store.aclose()


async def test_a_claim_does_not_walk_past_the_running_runs(dsn: str) -> None:
    """With 300 of the app's runs running under live leases and the newest 20 queued, a
    claim reads the queued runs it takes, not the running ones before them: no scan of
    the claim's plan reads (and throws away) a row per running run."""
    store = PgCheckpointer(dsn)
    try:
        app = _agent(store)
        runs = await _queued(app, 320)
        r = mine_only(app)
        queue = RunQueue(store, r)
        held = await queue.claim("busy", 300, 300)
        assert {x.run_id for x in held} == {x.run_id for x in runs[:300]}
        sql(dsn, "ANALYZE oncegraph_runs")
        plan = _claim_plan(dsn, r, 2, analyze=True)
        assert max(_thrown_away(plan), default=0) < 20, plan
        assert "oncegraph_runs_queued" in plan, plan
        got = await queue.claim("c0", 30, 2)
        assert [x.run_id for x in got] == [x.run_id for x in runs[300:302]]
    finally:
        await store.aclose()


async def test_queued_runs_and_expired_leases_are_claimed_in_queue_order(dsn: str) -> None:
    """The two walks merge in queue order: a run whose lease expired is taken in its
    place among the queued runs (older ones first), and a live lease is never taken."""
    store = PgCheckpointer(dsn)
    try:
        app = _agent(store)
        runs = await _queued(app, 5)
        ids = [x.run_id for x in runs]
        r = mine_only(app)
        queue = RunQueue(store, r)
        # runs 1 and 3 were claimed by a worker that went silent; run 3's lease lapsed
        for run_id in (ids[1], ids[3]):
            sql(
                dsn,
                "UPDATE oncegraph_runs SET status = 'running', lease_owner = 'gone', "
                "lease_expires_at = extract(epoch from clock_timestamp()) + 300 "
                "WHERE run_id = %s",
                (run_id,),
            )
        expire_lease(dsn, ids[3])
        order = [(await queue.claim_runs("c0", 30, 1))[0] for _ in range(4)]
        assert [c.run.run_id for c in order] == [ids[0], ids[2], ids[3], ids[4]]
        assert [c.taken_from for c in order] == [None, None, "gone", None]
        assert await queue.claim("c0", 30, 5) == []  # run 1's lease is live
    finally:
        await store.aclose()


async def test_concurrent_claimers_never_share_a_run(dsn: str) -> None:
    stores = [PgCheckpointer(dsn) for _ in range(5)]
    try:
        app = _agent(stores[0])
        runs = await _queued(app, 60)

        # every claimer's first claim is asked before any claimer asks a second time, so all
        # five really race for the same rows (a fast claimer could otherwise drain the queue
        # before the others have connected)
        first_asked, everyone_asked = 0, asyncio.Event()

        async def claimer(store: PgCheckpointer, owner: str) -> list[str]:
            nonlocal first_asked
            queue, got = RunQueue(store, mine_only(app)), list[str]()
            while True:
                batch = await queue.claim(owner, 30, 3)
                if not everyone_asked.is_set():
                    first_asked += 1
                    if first_asked == len(stores):
                        everyone_asked.set()
                    await everyone_asked.wait()
                if not batch:
                    return got
                got += [r.run_id for r in batch]

        results = await asyncio.gather(*(claimer(s, f"c{i}") for i, s in enumerate(stores)))
        claimed = [rid for got in results for rid in got]
        assert sorted(claimed) == sorted(r.run_id for r in runs)
        assert all(results), "every claimer won rows in the race"
        for i, got in enumerate(results):
            for rid in got:
                rec = await stores[0].get_run(rid)
                assert rec is not None
                assert (rec.status, rec.lease_owner, rec.fencing_token) == ("running", f"c{i}", 1)
    finally:
        for s in stores:
            await s.aclose()


async def test_claim_rules(dsn: str) -> None:
    store = PgCheckpointer(dsn)
    try:
        app = _agent(store)
        queue = RunQueue(store, mine_only(app))

        async def submit(thread: str) -> str:
            msg = {"messages": [{"role": "user", "content": thread}]}
            return (await app.asubmit(msg, {"thread_id": thread})).run_id

        first, second = await submit("busy"), await submit("busy")
        parked = {s: await submit(f"parked-{s}") for s in ("needs_review", "interrupted", "failed")}
        behind_parked = await submit("parked-needs_review")
        for status, rid in parked.items():
            await store.update_run(rid, status=RunStatus(status))
        claimed = [r.run_id for r in await queue.claim("a", 30, 50)]
        assert claimed == [first], "FIFO per thread; parked runs and runs behind them wait"

        assert not await queue.renew(first, "someone-else", 1, 30)
        assert await queue.renew(first, "a", 1, 30)
        assert await queue.release(first, "a", 1)
        rec = await store.get_run(first)
        assert rec is not None
        assert (rec.status, rec.lease_owner, rec.lease_expires_at) == ("queued", None, None)
        [again] = await queue.claim("b", 30, 50)
        assert (again.run_id, again.fencing_token) == (first, 3)
        await store.update_run(first, status=RunStatus.COMPLETED, fence=3)
        assert [r.run_id for r in await queue.claim("b", 30, 50)] == [second]

        await store.update_run(parked["needs_review"], status=RunStatus.ABANDONED)
        assert [r.run_id for r in await queue.claim("b", 30, 50)] == [behind_parked]
        # a running run without a lease was started by invoke() in-process: not ours
        await store.update_run(parked["failed"], status=RunStatus.RUNNING)
        assert await queue.claim("b", 30, 50) == []
    finally:
        await store.aclose()


async def test_claims_take_the_oldest_runs_first_from_a_long_queue(dsn: str) -> None:
    store = PgCheckpointer(dsn)
    try:
        app = _agent(store)
        queue = RunQueue(store, mine_only(app))
        ids = [
            (
                await app.asubmit(
                    {"messages": [{"role": "user", "content": f"o-{i}"}]}, {"thread_id": f"t{i}"}
                )
            ).run_id
            for i in range(40)
        ]
        got: list[str] = []
        while batch := await queue.claim("a", 30, 7):
            assert len(batch) <= 7
            got += [r.run_id for r in batch]
        assert got == ids, "queue order, in batches of the limit, every run once"
    finally:
        await store.aclose()


async def test_renew_many_keeps_ended_runs_and_reports_taken_ones(dsn: str) -> None:
    store = PgCheckpointer(dsn)
    try:
        app = _agent(store)
        queue = RunQueue(store, mine_only(app))
        for i in range(3):
            await app.asubmit(
                {"messages": [{"role": "user", "content": f"o-{i}"}]}, {"thread_id": f"t{i}"}
            )
        running, ended, taken = await queue.claim("a", 30, 3)
        # ended under its lease (its last commit written): not lost, not taken
        await store.update_run(ended.run_id, status=RunStatus.COMPLETED, fence=ended.fencing_token)
        # released and claimed by another: taken
        assert await queue.release(taken.run_id, "a", taken.fencing_token)
        [again] = await queue.claim("b", 30, 1)
        assert again.run_id == taken.run_id
        held = {r.run_id: r.fencing_token for r in (running, ended, taken)}
        assert await queue.renew_many("a", held, 30) == {running.run_id, ended.run_id}
        assert await queue.renew_many("a", {}, 30) == set()
        rec = await store.get_run(running.run_id)
        assert rec is not None and rec.lease_owner == "a" and rec.status == "running"
    finally:
        await store.aclose()


async def test_a_busy_worker_claims_a_run_queued_meanwhile_when_a_slot_frees(dsn: str) -> None:
    """Concurrency 1, polling off in effect: the NOTIFY of the second run arrives while the
    worker is busy with the first; it is claimed as soon as the first ends."""
    store = PgCheckpointer(dsn)
    gate, started = asyncio.Event(), asyncio.Event()
    try:

        async def slow(state: dict[str, Any]) -> dict[str, Any]:
            if state["messages"][-1]["content"] == "first":
                started.set()
                await gate.wait()
            return {"messages": [{"role": "assistant", "content": "ok"}]}

        g = StateGraph(MessagesState)
        g.add_node("slow", slow)
        g.add_edge(START, "slow")
        g.add_edge("slow", END)
        app = g.compile(checkpointer=store)
        worker = Worker(app, concurrency=1, poll_seconds=600)
        serving = asyncio.create_task(worker.run_forever())
        try:
            await asyncio.wait_for(worker.listening.wait(), 60)
            first = await app.asubmit(
                {"messages": [{"role": "user", "content": "first"}]}, {"thread_id": "a"}
            )
            await asyncio.wait_for(started.wait(), 60)
            assert worker.held == [first.run_id]
            second = await app.asubmit(
                {"messages": [{"role": "user", "content": "second"}]}, {"thread_id": "b"}
            )
            await asyncio.sleep(0.2)  # its notice has come and gone while the worker was full
            gate.set()
            await asyncio.wait_for(second.aresult(60), 30)  # long before the 600 s poll
            assert (await first.arun()).status == RunStatus.COMPLETED
        finally:
            worker.stop()
            await serving
    finally:
        await store.aclose()


async def test_second_submit_on_busy_thread_queues_behind(dsn: str) -> None:
    store = PgCheckpointer(dsn)
    try:
        model = ScriptedModel(
            lambda messages, tools: (
                "echo " + [m for m in messages if m["role"] == "user"][-1]["content"]
            )
        )
        app = ReactAgent(model=model, system_prompt="Echo.").compile(checkpointer=store)
        cfg = {"thread_id": "chat"}
        one = await app.asubmit({"messages": [{"role": "user", "content": "one"}]}, cfg)
        two = await app.asubmit({"messages": [{"role": "user", "content": "two"}]}, cfg)
        worker = Worker(app, concurrency=4, lease_seconds=5, heartbeat_seconds=1, poll_seconds=0.05)
        serving = asyncio.create_task(worker.run_forever())
        for _ in range(400):
            runs = {r.run_id: r.status for r in await app.aruns(thread_id="chat")}
            if set(runs.values()) == {"completed"}:
                break
            await asyncio.sleep(0.05)
        worker.stop()
        await serving
        assert runs == {one.run_id: "completed", two.run_id: "completed"}
        state = await app.aget_state(cfg)
        said = [
            (m["role"], m["content"])
            for m in state.values["messages"]
            if m["role"] in ("user", "assistant")
        ]
        assert said == [
            ("user", "one"),
            ("assistant", "echo one"),
            ("user", "two"),
            ("assistant", "echo two"),
        ]
    finally:
        await store.aclose()


# -- clean shutdown ---------------------------------------------------------------------------


@pytest.mark.slow
def test_sigterm_releases_runs_and_another_worker_completes_them(
    dsn: str, provider: FakeProvider, workers: Workers, tmp_path: Path
) -> None:
    ids = submit_all(dsn, [(f"t{i}", f"o-{i}") for i in range(4)])
    gate = tmp_path / "gate"  # no run of "leaving" can finish before it is released
    leaving = workers.start("leaving", concurrency=4, lease=60.0, heartbeat=1.0, gate=gate)
    wait_for(
        "leaving to hold all runs",
        lambda: all(run_rows(dsn)[r][:2] == ("running", "leaving") for r in ids),
    )
    leaving.send_signal(signal.SIGTERM)
    wait_for(
        "leaving to release its runs",
        lambda: all(run_rows(dsn)[r][:2] == ("queued", None) for r in ids),
    )
    # Its tool threads, cut loose from their cancelled runs, finish now (their provider
    # calls carry the runs' keys, so the resumed runs below replay, not repeat, them);
    # the process exits once they have.
    gate.touch()
    assert leaving.wait(timeout=120) == 0
    released = run_rows(dsn)
    for rid in ids:
        status, owner, _ = released[rid]
        assert (status, owner) == ("queued", None), "released, not left to a 60 s lease"
    workers.start("staying", concurrency=4, lease=5.0, heartbeat=0.5, tool_sleep=0.0)
    wait_for(
        "staying to complete them",
        lambda: all(run_rows(dsn)[r][:2] == ("completed", "staying") for r in ids),
    )
    assert_one_effect_per_command(dsn, provider, 4)


# -- runs belong to their app (guarantee 15) -------------------------------------------------------


def _payroll(store: PgCheckpointer, name: str, tool_name: str, done: list[str]) -> CompiledGraph:
    """An agent named ``name`` whose one tool ``tool_name`` notes the order it ran for."""
    from oncegraph import tool

    @tool(effect="write", name=tool_name, dedup="test double: notes the order it ran for")
    def act(order_id: str) -> str:
        """Act on an order."""
        done.append(order_id)
        return "done"

    def ask(messages: list[dict[str, Any]], tools: Any) -> dict[str, Any]:
        order = [m for m in messages if m["role"] == "user"][-1]["content"]
        call = {"id": "c1", "name": tool_name, "args": {"order_id": order}}
        return {"content": "", "tool_calls": [call]}

    model = ScriptedModel.turns(ask, "done")
    return ReactAgent(model=model, tools=[act], name=name).compile(checkpointer=store)


async def test_a_worker_claims_only_its_own_apps_runs(dsn: str) -> None:
    """Two apps on one database, plus an app of the same name with other tools (two
    default-named agents) and a tenant-bound worker of hr: those workers, serving all
    along, never claim hr's (untenanted) runs; hr's worker completes them all, a run
    written without an app id (an older oncegraph) included."""
    stores = [PgCheckpointer(dsn) for _ in range(3)]
    hr_done: list[str] = []
    foreign_done: list[str] = []
    try:
        hr = _payroll(stores[0], "hr", "pay", hr_done)
        support = _payroll(stores[1], "support", "reply", foreign_done)
        same_name = _payroll(stores[2], "hr", "refund", foreign_done)
        assert hr.fingerprint != same_name.fingerprint
        orders = [f"o-{i}" for i in range(4)]
        ids = [
            (
                await hr.asubmit({"messages": [{"role": "user", "content": o}]}, {"thread_id": o})
            ).run_id
            for o in orders
        ]
        sql(dsn, "UPDATE oncegraph_runs SET app_id = NULL WHERE run_id = %s", (ids[0],))
        assert (await hr.aget_run(ids[0])).app_id == "hr"  # read as its workflow_name

        others = [  # and hr's own workers bound to a tenant: hr's runs here have none
            Worker(app, concurrency=4, lease_seconds=5, poll_seconds=0.02)
            for app in (support, same_name, hr.for_tenant("acme"))
        ]
        for worker in others:  # asked directly: nothing of hr's is theirs
            assert await worker.queue.claim(worker.owner, 5, 10) == []
        serving = [asyncio.create_task(w.run_forever()) for w in others]
        mine = Worker(hr, concurrency=2, lease_seconds=5, poll_seconds=0.02)
        serving.append(asyncio.create_task(mine.run_forever()))
        for _ in range(1200):
            runs = {r.run_id: r for r in await hr.aruns()}
            if all(runs[i].status == "completed" for i in ids):
                break
            await asyncio.sleep(0.05)
        for worker in (*others, mine):
            worker.stop()
        await asyncio.gather(*serving)
        assert {i: runs[i].status for i in ids} == dict.fromkeys(ids, "completed")
        assert {runs[i].lease_owner for i in ids} == {mine.owner}
        assert sorted(hr_done) == orders and foreign_done == []
        assert [w.completed for w in others] == [0, 0, 0] and mine.completed == len(ids)
        assert await support.aruns() == []
    finally:
        for store in stores:
            await store.aclose()


# -- operator decisions win (guarantee 15) ---------------------------------------------------------


@pytest.mark.parametrize("heartbeat", [0.2, 20.0], ids=["heartbeat-first", "call-first"])
def test_abandon_during_a_workers_tool_call_stays_abandoned(
    dsn: str, provider: FakeProvider, workers: Workers, tmp_path: Path, heartbeat: float
) -> None:
    """An operator abandons a run while a worker process is inside its tool call: the run
    stays abandoned, the worker's late outcome and next step are refused (it writes
    nothing, starts nothing), and no worker takes the run again. Either the worker's
    heartbeat notices first (it stops the run and keeps the call until it ends), or the
    call returns first (its result write is refused)."""
    [run_id] = submit_all(dsn, [("t-abandon", "o-abandon")])
    gate = tmp_path / "gate"
    worker = workers.start(
        "busy", concurrency=1, lease=3 * heartbeat, heartbeat=heartbeat, gate=gate
    )
    wait_for("busy to claim", lambda: run_rows(dsn)[run_id][1] == "busy")
    wait_for("busy to enter the tool", lambda: len(charge_keys(dsn)) == 1)

    def thread_version() -> list[tuple[Any, ...]]:
        return sql(dsn, "SELECT version FROM oncegraph_threads WHERE thread_id = 't-abandon'")

    def effect_rows() -> list[tuple[Any, ...]]:
        return sql(
            dsn,
            "SELECT effect_type, status, attempts, row_version FROM oncegraph_effects "
            "ORDER BY created_at",
        )

    async def abandon() -> tuple[str, int]:
        store = PgCheckpointer(dsn)
        try:
            done = await _agent(store).aabandon(
                {"thread_id": "t-abandon"}, reason="paid by hand", actor="ops"
            )
            return str(done.status), done.fencing_token
        finally:
            await store.aclose()

    status, token = asyncio.run(abandon())
    assert status == "abandoned"
    version, effects = thread_version(), effect_rows()
    gate.touch()  # the call in flight goes on to the provider: it was sent before the decision
    wait_for("the charge in flight", lambda: len(provider.effects()) == 1)

    async def let_go() -> bool:  # the worker holds the run until its kept call is recorded
        store = PgCheckpointer(dsn)
        try:
            lock = await store.lock_run(run_id)
            if lock is None:
                return False
            await lock.release()
            return True
        finally:
            await store.aclose()

    wait_for("busy to let the run go", lambda: asyncio.run(let_go()))
    assert worker.poll() is None, "a fenced-off run does not crash the worker"
    status, owner, now_token = run_rows(dsn)[run_id]
    assert (status, now_token) == ("abandoned", token) and str(owner).startswith("operator:")
    assert thread_version() == version, "no checkpoint after the abandon"
    assert effect_rows() == effects, "no outcome written, no new attempt, no next model turn"
    assert len(provider.effects()) == 1
    log = workers.log("busy")
    assert run_id in log and "no longer held with fencing token" in log


# -- versions (guarantee 10) on the worker's path ------------------------------------------------


def _payout(version: str, ran: list[str], *, with_pay: bool = True) -> StateGraph:
    """A graph ``payout`` at ``version`` whose ``pay`` node notes which version ran it."""

    class Payout(TypedDict, total=False):
        amount: float
        paid: str

    def pay(state: Payout) -> Payout:
        ran.append(f"v{version}:{state['amount']}")
        return {"paid": f"paid {state['amount']}"}

    g = StateGraph(Payout, name="payout", version=version)
    if with_pay:
        g.add_node("pay", pay)
        g.add_edge(START, "pay")
        g.add_edge("pay", END)
    else:  # incompatible with version 1 on its own: "pay" was removed
        g.add_node("check", lambda s: {"paid": "not paid"})
        g.add_edge(START, "check")
        g.add_edge("check", END)
    return g


async def test_a_worker_runs_a_run_of_a_registered_previous_version_with_it(dsn: str) -> None:
    """A run submitted under version 1, claimed by a worker of version 2 that registers
    version 1 as a previous version: the worker's verdict (read under the run's lock) hands
    it to version 1's graph, which runs it to its end; version 2's own runs run as v2."""
    store = PgCheckpointer(dsn)
    ran: list[str] = []
    try:
        v1 = _payout("1", ran).compile(checkpointer=store)
        old = await v1.asubmit({"amount": 10.0}, {"thread_id": "old"})
        v2 = _payout("2", ran, with_pay=False).compile(
            checkpointer=store, previous_versions={"1": _payout("1", ran)}
        )
        new = await v2.asubmit({"amount": 20.0}, {"thread_id": "new"})
        worker = Worker(v2, concurrency=2, lease_seconds=5, poll_seconds=0.02)
        serving = asyncio.create_task(worker.run_forever())
        try:
            done = await asyncio.wait_for(old.aresult(60), 60)
            assert done["paid"] == "paid 10.0" and ran == ["v1:10.0"]
            assert (await asyncio.wait_for(new.aresult(60), 60))["paid"] == "not paid"
        finally:
            worker.stop()
            await serving
        for handle in (old, new):
            run = await handle.arun()
            assert (run.status, run.lease_owner) == (RunStatus.COMPLETED, worker.owner)
    finally:
        await store.aclose()
