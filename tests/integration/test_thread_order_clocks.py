"""One run of a thread at a time, in the database's order, whatever the clocks say.

Real processes whose ``time.time`` is shifted (4 s behind, an hour ahead) start or
submit runs on one thread while another run of it is inside an irreversible tool; the
tool charges a real local HTTP provider (:class:`FakeProvider`) with the effect's
idempotency key, and logs when each call starts and ends (``time.monotonic``, one clock
for every process of the machine). The model is a careful one: it charges every order
the user asked for that no tool result shows as charged, as an LLM would. So a run that
started while another run's charge was in flight would charge that order again.

* SQLite: two processes call ``invoke`` directly. The thread's previous run was written
  by a process an hour ahead, so by the clocks it is newer than the run now charging;
  the second caller is refused (``UnfinishedRunError``) until that run ends, retries,
  and runs after it.
* PostgreSQL: an ``oncegraph worker`` process runs the queue; runs submitted 4 s behind
  and an hour ahead while the first is charging stay queued and run after it, in the
  order they were submitted.

Either way: one charge per order at the provider, no two tool calls of the thread
overlapping, no two runs of the thread ``running`` at once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from oncegraph.testing.provider import FakeProvider

APP_MODULE = '''
"""A careful agent that charges orders through the fake provider."""
import fcntl, json, os, re, time

from oncegraph import current_effect, tool
from oncegraph.prebuilt.agent import ReactAgent
from oncegraph.prebuilt.models import ScriptedModel
from oncegraph.storage.checkpointer import PgCheckpointer, SqliteCheckpointer
from oncegraph.testing.provider import ProviderClient

DIR = os.environ["ORDER_DIR"]
client = ProviderClient(os.environ["ORDER_PROVIDER"])


def _log(event):
    with open(os.path.join(DIR, "calls.log"), "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.write(json.dumps(event) + "\\n")


@tool(effect="irreversible", recipient="payments")
def charge(order_id: str) -> str:
    """Charge an order."""
    _log({"order": order_id, "event": "start", "t": time.monotonic()})
    if os.path.exists(os.path.join(DIR, "hold-" + order_id)):
        deadline = time.monotonic() + 40
        while not os.path.exists(os.path.join(DIR, "go-" + order_id)):
            if time.monotonic() > deadline:
                raise RuntimeError("the test never let the charge go")
            time.sleep(0.02)
    client.charge(10.0, "eur", order_id, idempotency_key=current_effect().idempotency_key)
    _log({"order": order_id, "event": "end", "t": time.monotonic()})
    return f"charged 10.0 for {order_id}"


def turn(messages, tools):  # charge every asked-for order no tool result shows as charged
    asked = [re.search(r"pay order (\\S+)", str(m["content"])).group(1)
             for m in messages if m["role"] == "user" and "pay order" in str(m["content"])]
    done = [o for o in asked
            if any(m["role"] == "tool" and f"for {o}" in str(m["content"]) for m in messages)]
    todo = [o for o in asked if o not in done]
    if todo:
        return {"content": "", "tool_calls": [{"name": "charge", "args": {"order_id": todo[0]}}]}
    return "all orders charged: " + ", ".join(done)


def store():
    db = os.environ["ORDER_DB"]
    return SqliteCheckpointer(db) if db.endswith(".db") else PgCheckpointer(db)


app = ReactAgent(model=ScriptedModel(turn), tools=[charge], name="shop").compile(
    checkpointer=store()
)
'''

# argv: clock shift (s), "invoke" | "submit", order, thread
CALLER = """
import json, os, sys, time
shift, mode, order, thread = float(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
_real = time.time
time.time = lambda: _real() + shift  # this process's clock is off by `shift`
import order_app
from oncegraph.errors import UnfinishedRunError
msg = {"messages": [{"role": "user", "content": f"pay order {order}"}]}
cfg = {"thread_id": thread}
if mode == "submit":
    print(order_app.app.submit(msg, cfg).run_id)
    sys.exit(0)
deadline = time.monotonic() + 45
while True:
    try:
        out = order_app.app.invoke(msg, cfg)
        break
    except UnfinishedRunError as exc:  # a thread runs one run at a time: wait, retry
        open(os.path.join(os.environ["ORDER_DIR"], "refused-" + order), "a").write(str(exc))
        if time.monotonic() > deadline:
            raise
        time.sleep(0.05)
print(json.dumps(out["messages"][-1]["content"]))
"""


class Orders:
    """The app module, its callers and workers, for one test."""

    def __init__(self, tmp: Path, db: str, provider: FakeProvider) -> None:
        self.dir = tmp
        self.provider = provider
        (tmp / "order_app.py").write_text(APP_MODULE)
        (tmp / "caller.py").write_text(CALLER)
        self.env = {
            **os.environ,
            "ORDER_DIR": str(tmp),
            "ORDER_DB": db,
            "ORDER_PROVIDER": provider.url,
            "PYTHONPATH": os.pathsep.join([str(tmp), os.environ.get("PYTHONPATH", "")]),
        }
        self.procs: list[subprocess.Popen[bytes]] = []

    def call(self, shift: float, mode: str, order: str, thread: str) -> subprocess.Popen[bytes]:
        log = open(self.dir / f"caller-{order}.log", "wb")  # noqa: SIM115 - the process's
        proc = subprocess.Popen(
            [sys.executable, str(self.dir / "caller.py"), str(shift), mode, order, thread],
            cwd=self.dir,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.env,
        )
        log.close()
        self.procs.append(proc)
        return proc

    def done(self, proc: subprocess.Popen[bytes], order: str, timeout: float = 50.0) -> str:
        assert proc.wait(timeout=timeout) == 0, self.log(f"caller-{order}")
        return self.log(f"caller-{order}")

    def worker(self) -> subprocess.Popen[bytes]:
        log = open(self.dir / "worker.log", "wb")  # noqa: SIM115 - the process's
        argv = [sys.executable, "-m", "oncegraph", "worker", "order_app:app"]
        argv += ["--concurrency", "2", "--lease", "3", "--heartbeat", "0.5", "--poll", "0.1"]
        proc = subprocess.Popen(
            argv, cwd=self.dir, stdout=log, stderr=subprocess.STDOUT, env=self.env
        )
        log.close()
        self.procs.append(proc)
        return proc

    def log(self, name: str) -> str:
        return (self.dir / f"{name}.log").read_text(errors="replace")

    def hold(self, order: str) -> None:
        (self.dir / f"hold-{order}").touch()

    def go(self, order: str) -> None:
        (self.dir / f"go-{order}").touch()

    def calls(self) -> list[dict[str, Any]]:
        path = self.dir / "calls.log"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def started(self, order: str) -> bool:
        return any(c["order"] == order and c["event"] == "start" for c in self.calls())

    def starts(self) -> list[str]:
        """The orders whose charge started, in the order they started."""
        return [c["order"] for c in self.calls() if c["event"] == "start"]

    def charged(self) -> list[str]:
        return [e["body"]["order_id"] for e in self.provider.state.effects()]

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)


def wait_for(what: str, check: Callable[[], bool], timeout: float = 40.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


def assert_one_at_a_time(calls: list[dict[str, Any]]) -> list[str]:
    """No two tool calls overlap; returns the orders in the order they were called."""
    in_flight, started = 0, []
    for c in sorted(calls, key=lambda c: c["t"]):
        if c["event"] == "start":
            in_flight += 1
            started.append(c["order"])
            assert in_flight == 1, f"two charges of the thread at once: {calls}"
        else:
            in_flight -= 1
    return started


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    with FakeProvider() as p:
        yield p


def test_direct_callers_with_skewed_clocks_run_a_thread_one_run_at_a_time(
    tmp_path: Path, provider: FakeProvider
) -> None:
    orders = Orders(tmp_path, str(tmp_path / "shop.db"), provider)
    try:
        # the thread's first run, from a process an hour ahead: by the clocks, the runs
        # after it are older than it
        first = orders.call(3600.0, "invoke", "R0", "T")
        orders.done(first, "R0")
        orders.hold("A")
        a = orders.call(0.0, "invoke", "A", "T")
        wait_for("A's charge to start", lambda: orders.started("A"))
        b = orders.call(-4.0, "invoke", "B", "T")  # 4 s behind, while A is charging
        wait_for("B to be refused", lambda: (tmp_path / "refused-B").exists())
        time.sleep(0.5)  # B keeps retrying while A is still inside its charge
        assert orders.starts() == ["R0", "A"] and orders.charged() == ["R0"], orders.calls()
        refusal = (tmp_path / "refused-B").read_text()
        assert "one run at a time" in refusal or "unfinished run" in refusal, refusal
        orders.go("A")
        assert "all orders charged: R0, A" in orders.done(a, "A")
        assert "all orders charged: R0, A, B" in orders.done(b, "B")
    finally:
        orders.stop()
    assert sorted(orders.charged()) == ["A", "B", "R0"], orders.charged()  # once each
    assert assert_one_at_a_time(orders.calls()) == ["R0", "A", "B"]


@pytest.mark.postgres
def test_a_worker_runs_runs_submitted_with_skewed_clocks_in_submit_order(
    tmp_path: Path, provider: FakeProvider, fresh_dsn: str
) -> None:
    import psycopg

    orders = Orders(tmp_path, fresh_dsn, provider)
    seen_running: list[int] = []
    stop = threading.Event()

    def watch() -> None:  # how many runs of the thread are running, all along
        with psycopg.connect(fresh_dsn, autocommit=True) as conn:
            while not stop.is_set():
                row = conn.execute(
                    "SELECT count(*) FROM oncegraph_runs WHERE thread_id = 'T' "
                    "AND status = 'running'"
                ).fetchone()
                seen_running.append(int(row[0]) if row else 0)
                time.sleep(0.01)

    watcher = threading.Thread(target=watch)
    try:
        orders.hold("A")
        worker = orders.worker()
        wait_for("the worker to listen", lambda: "started" in orders.log("worker"))
        submitted = time.time()
        orders.done(orders.call(0.0, "submit", "A", "T"), "A")
        wait_for("A's charge to start", lambda: orders.started("A"))
        watcher.start()
        # 4 s behind (more on a slow machine: B's clock must say it came before A)
        behind = max(4.0, time.time() - submitted + 2.0)
        orders.done(orders.call(-behind, "submit", "B", "T"), "B")
        orders.done(orders.call(3600.0, "submit", "C", "T"), "C")  # an hour ahead
        time.sleep(1.5)  # many claims: none may take B or C while A is charging
        assert orders.starts() == ["A"] and orders.charged() == [], orders.calls()
        with psycopg.connect(fresh_dsn, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT run_id, status, created_at FROM oncegraph_runs WHERE thread_id = 'T' "
                "ORDER BY seq"
            ).fetchall()
        assert [r[1] for r in rows] == ["running", "queued", "queued"], rows
        assert rows[1][2] < rows[0][2] < rows[2][2], rows  # the clocks disagree with the order
        orders.go("A")

        def finished() -> bool:
            with psycopg.connect(fresh_dsn, autocommit=True) as conn:
                found = conn.execute(
                    "SELECT status FROM oncegraph_runs WHERE thread_id = 'T'"
                ).fetchall()
            return len(found) == 3 and all(s == "completed" for (s,) in found)

        wait_for("the three runs to complete", finished)
        with psycopg.connect(fresh_dsn, autocommit=True) as conn:
            ends = conn.execute(
                "SELECT r.run_id FROM oncegraph_runs r WHERE thread_id = 'T' ORDER BY updated_at"
            ).fetchall()
    finally:
        stop.set()
        if watcher.is_alive():
            watcher.join(timeout=5)
        orders.stop()
    assert sorted(orders.charged()) == ["A", "B", "C"], orders.charged()  # once each
    assert assert_one_at_a_time(orders.calls()) == ["A", "B", "C"]
    assert [e for (e,) in ends] == [r[0] for r in rows]  # completed in submit order
    assert seen_running and max(seen_running) <= 1, max(seen_running)
    assert "StaleStateError" not in orders.log("worker")
    assert worker.returncode is not None
