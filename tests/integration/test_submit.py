"""``submit``: a handle to a queued run, NOTIFY-woken workers, a clean exit.

A submit NOTIFYs ``oncegraph_runs`` in the transaction that queues the run; an idle
worker LISTENing on its own connection wakes at once, so the tests below give their
workers a poll interval longer than the test could wait (a run that completes was woken
by the notice), and the listener comes back after its connection is killed. The handle
returns what ``invoke`` would have, raises what ended the run, and cancels only a run
no worker has claimed. SQLite and memory apps refuse ``submit``: no worker takes their
runs. A script that only submits exits with nothing on stderr.
"""

from __future__ import annotations

import asyncio
import os
import textwrap
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypedDict

import psycopg
import pytest

from oncegraph import END, START, StateGraph
from oncegraph.app import CompiledGraph
from oncegraph.errors import (
    ConfigError,
    RunFailedError,
    RunStateError,
    WaitTimeoutError,
)
from oncegraph.runs import Submitted
from oncegraph.storage.checkpointer import InMemoryCheckpointer, SqliteCheckpointer
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import RunRecord, RunStatus
from oncegraph.storage.sql.postgres import PgCheckpointer
from oncegraph.testing.crash import start_in_subprocess
from oncegraph.worker import Worker

LONG = 120.0  # bounds that only catch a hang
NEVER = 3600.0  # a poll interval no test waits out: only a NOTIFY wakes the worker


class S(TypedDict, total=False):
    x: int
    fail: bool


def _double(state: S) -> dict[str, Any]:
    if state.get("fail"):
        raise ValueError("asked to fail")
    return {"x": state["x"] * 2}


def _app(store: Checkpointer) -> CompiledGraph:
    g = StateGraph(S)
    g.add_node("double", _double)
    g.add_edge(START, "double")
    g.add_edge("double", END)
    return g.compile(checkpointer=store)


def _serve(dsn: str, body: Callable[[CompiledGraph, Worker], Awaitable[None]]) -> None:
    """Run ``body(app, worker)`` with an idle worker that only a NOTIFY can wake."""

    async def go() -> None:
        store = PgCheckpointer(dsn)
        app = _app(store)
        await app.setup()
        worker = Worker(app, concurrency=2, poll_seconds=NEVER)
        serving = asyncio.create_task(worker.run_forever())
        try:
            await asyncio.wait_for(worker.listening.wait(), LONG)
            await asyncio.sleep(0.05)  # the claim loop is idle now (a poll would take 1 h)
            await body(app, worker)
        finally:
            worker.stop()
            await serving
            await store.aclose()

    asyncio.run(go())


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_submit_is_refused_where_no_worker_would_take_it(kind: str, tmp_path: Path) -> None:
    store: Checkpointer = (
        InMemoryCheckpointer() if kind == "memory" else SqliteCheckpointer(tmp_path / "r.db")
    )
    app = _app(store)
    with pytest.raises(ConfigError, match=r"no worker takes runs from .*PgCheckpointer"):
        app.submit({"x": 1}, {"thread_id": "t"})
    assert app.runs(thread_id="t") == []  # nothing was queued


@pytest.mark.postgres
def test_a_notified_worker_runs_a_submitted_run_and_the_handle_returns_its_output(
    fresh_dsn: str,
) -> None:
    async def body(app: CompiledGraph, worker: Worker) -> None:
        handle = await app.asubmit({"x": 21}, {"thread_id": "t"})
        assert isinstance(handle, Submitted) and isinstance(handle.record, RunRecord)
        assert handle.record.run_id == handle.run_id and handle.thread_id == "t"
        assert await handle.aresult(LONG) == {"x": 42}
        assert await handle.astatus() is RunStatus.COMPLETED
        # a later run on the thread does not change the first one's answer
        second = await app.asubmit({"x": 5}, {"thread_id": "t"})
        assert await second.aresult(LONG) == {"x": 10}
        assert await handle.aresult(LONG) == {"x": 42}

    _serve(fresh_dsn, body)


@pytest.mark.postgres
def test_the_listener_reconnects_after_its_connection_is_killed(fresh_dsn: str) -> None:
    async def body(app: CompiledGraph, worker: Worker) -> None:
        worker.listening.clear()
        with psycopg.connect(fresh_dsn, autocommit=True) as conn:
            killed = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE query = 'LISTEN oncegraph_runs' AND pid <> pg_backend_pid() "
                "AND datname = current_database()"  # not another test's listener
            ).fetchall()
        assert killed == [(True,)]
        await asyncio.wait_for(worker.listening.wait(), LONG)
        await asyncio.sleep(0.05)
        handle = await app.asubmit({"x": 4}, {"thread_id": "t"})
        assert await handle.aresult(LONG) == {"x": 8}

    _serve(fresh_dsn, body)


@pytest.mark.postgres
def test_a_failed_run_raises_from_result(fresh_dsn: str) -> None:
    async def body(app: CompiledGraph, worker: Worker) -> None:
        handle = await app.asubmit({"x": 1, "fail": True}, {"thread_id": "t"})
        with pytest.raises(RunFailedError, match="asked to fail") as err:
            await handle.aresult(LONG)
        assert err.value.run_id == handle.run_id
        with pytest.raises(RunStateError, match="cannot be cancelled: it is failed"):
            await handle.acancel()

    _serve(fresh_dsn, body)


@pytest.mark.postgres
def test_cancel_abandons_a_queued_run_and_result_waits_with_a_timeout(fresh_dsn: str) -> None:
    app = _app(PgCheckpointer(fresh_dsn))  # no worker: the run stays queued
    try:
        handle = app.submit({"x": 1}, {"thread_id": "t"})
        assert handle.status() is RunStatus.QUEUED
        with pytest.raises(WaitTimeoutError, match=r"still queued after 0\.05s"):
            handle.result(timeout=0.05)
        cancelled = handle.cancel(reason="changed my mind", actor="alice")
        assert cancelled.status is RunStatus.ABANDONED and handle.status() is RunStatus.ABANDONED
        (audit,) = app.audit(run_id=handle.run_id)
        assert (audit.action, audit.actor, audit.reason) == ("cancel", "alice", "changed my mind")
        with pytest.raises(RunStateError, match="cannot be cancelled: it is abandoned"):
            handle.cancel()
        # the thread is free again for new work
        assert app.invoke({"x": 3}, {"thread_id": "t"}) == {"x": 6}
    finally:
        app.close()


SUBMITTER = """
import asyncio, sys
from typing import TypedDict
from oncegraph import END, START, StateGraph
from oncegraph.storage.checkpointer import PgCheckpointer

class S(TypedDict, total=False):
    x: int

g = StateGraph(S)
g.add_node("n", lambda s: {"x": 1})
g.add_edge(START, "n"); g.add_edge("n", END)
app = g.compile(checkpointer=PgCheckpointer(sys.argv[1], redis_url=sys.argv[3] or None,
                                            cache_prefix=sys.argv[4]))
if sys.argv[2] == "sync":
    print(app.submit({"x": 0}, {"thread_id": "t-sync"}).run_id)
else:
    async def main():
        print((await app.asubmit({"x": 0}, {"thread_id": "t-async"})).run_id)
    asyncio.run(main())
"""


@pytest.mark.postgres
@pytest.mark.parametrize("how", ["sync", "async"])
@pytest.mark.parametrize("redis", [False, True])
def test_a_submit_only_script_exits_cleanly(
    fresh_dsn: str, tmp_path: Path, how: str, redis: bool
) -> None:
    url = os.environ.get("ONCEGRAPH_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
    if redis:
        pytest.importorskip("redis")
    script = tmp_path / "submitter.py"
    script.write_text(textwrap.dedent(SUBMITTER))
    prefix = f"oncegraph-test-submit-{os.getpid()}-{how}:"
    child = start_in_subprocess(script, [fresh_dsn, how, url if redis else "", prefix])
    done = child.wait(LONG)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("run_") and done.stderr == "", done.stderr
