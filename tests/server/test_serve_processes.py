"""``oncegraph serve --workers N`` and ``--log-level``: several real server processes on
one SQLite or PostgreSQL database, and a server that logs no request at ``warning``."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from conftest import free_port
from oncegraph.errors import ConfigError
from oncegraph.server import serve

pytestmark = pytest.mark.slow  # real OS processes: scheduled first under -n auto

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "support_agent_approval.py"
KEY = "processes-admin-key"
ASK = {"messages": [{"role": "user", "content": "Refund order 1042."}]}


def _children(pid: int) -> set[int]:
    """Every live descendant of ``pid``, read from /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                stat = (entry / "stat").read_text()
                parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found: set[int] = set()
    todo = [pid]
    while todo:
        current = todo.pop()
        for child, parent in parents.items():
            if parent == current and child not in found:
                found.add(child)
                todo.append(child)
    return found


@contextlib.contextmanager
def _cli_serve(
    tmp_path: Path, *args: str
) -> Iterator[tuple[str, subprocess.Popen[str], list[str]]]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "oncegraph.cli", "serve", *args, "--port", str(port)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src"), "ONCEGRAPH_API_KEYS": f"{KEY}=admin"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    printed: list[str] = []
    try:
        deadline = time.monotonic() + 90
        while True:
            assert proc.poll() is None, proc.communicate()[1]
            try:
                if httpx.get(f"{url}/api/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the server did not come up"
            time.sleep(0.2)
        yield url, proc, printed
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            _, err = proc.communicate()
        printed.append(err)


def test_two_server_processes_share_one_database_and_log_no_request_at_warning(
    tmp_path: Path,
) -> None:
    db = tmp_path / "shared.db"
    args = (f"{EXAMPLE}:app", "--db", str(db), "--workers", "2", "--log-level", "warning")
    with _cli_serve(tmp_path, *args) as (url, proc, printed):
        deadline = time.monotonic() + 60
        while len(_children(proc.pid)) < 2:  # the supervisor's two server processes
            assert time.monotonic() < deadline, "the server processes did not start"
            time.sleep(0.2)
        headers = {"Authorization": f"Bearer {KEY}"}
        run_ids = []
        # a connection each: requests land on either process, all on one database
        for n in range(6):
            with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
                started = client.post(
                    f"/api/threads/ticket-{n}/runs", json={"input": ASK, "wait": True}
                )
                assert started.status_code == 200, started.text
                assert started.json()["run"]["status"] == "interrupted"
                run_ids.append(started.json()["run"]["run_id"])
        for run_id in run_ids:
            with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
                answer = {"decisions": [{"type": "approve"}], "approver": "alice@shop"}
                went_on = client.post(
                    f"/api/runs/{run_id}/continue", json={"answer": answer, "reason": "ok"}
                )
                assert went_on.status_code == 200, went_on.text
                assert went_on.json()["run"]["status"] == "completed"
        with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
            listed = client.get("/api/runs", params={"limit": 50}).json()["runs"]
            assert {r["run_id"] for r in listed} >= set(run_ids)
            assert {r["status"] for r in listed if r["run_id"] in run_ids} == {"completed"}
            for run_id in run_ids:  # one refund per run, wherever it ran
                effects = client.get(f"/api/runs/{run_id}/effects").json()["effects"]
                assert [e["status"] for e in effects if e["effect_type"] == "refund_order"] == [
                    "completed"
                ]
    (err,) = printed
    assert "GET /api/health" not in err and "POST /api/threads" not in err


def test_several_processes_refuse_a_store_private_to_one(tmp_path: Path) -> None:
    app = tmp_path / "memory_app.py"
    app.write_text(
        "from typing import TypedDict\n"
        "from oncegraph import StateGraph, START, END\n"
        "from oncegraph.storage.memory import InMemoryCheckpointer\n"
        "class S(TypedDict):\n    n: int\n"
        "g = StateGraph(S)\n"
        "g.add_node('a', lambda s: {'n': s['n'] + 1})\n"
        "g.add_edge(START, 'a')\ng.add_edge('a', END)\n"
        "app = g.compile(checkpointer=InMemoryCheckpointer())\n"
    )
    with pytest.raises(ConfigError, match=r"--db runs\.db"):
        serve(f"{app}:app", workers=2, keys=f"{KEY}=admin")
    with pytest.raises(ConfigError, match="workers must be a whole number"):
        serve(f"{app}:app", workers=0)
    with pytest.raises(ConfigError, match="log_level must be"):
        serve(f"{app}:app", log_level="loud")
    with pytest.raises(ConfigError, match="spec string"):
        serve(None, database=str(tmp_path / "x.db"), workers=2, keys={"k" * 8: "admin"})


PAID_APP = """
import os
from oncegraph import current_effect, tool
from oncegraph.prebuilt.agent import ReactAgent
from oncegraph.prebuilt.models.scripted import ScriptedModel
from oncegraph.storage.memory import InMemoryCheckpointer

@tool(effect="irreversible", recipient="payments")
def pay(order_id: str) -> str:
    \"\"\"Pay an order.\"\"\"
    with open(os.environ["PAID_LOG"], "a") as log:  # one line per execution
        log.write(f"{current_effect().idempotency_key} {os.getpid()}\\n")
    return "paid"

call = {"id": "c1", "name": "pay", "args": {"order_id": "7"}}
model = ScriptedModel.turns({"content": "", "tool_calls": [call]}, "Paid.")
app = ReactAgent(model=model, tools=[pay]).compile(checkpointer=InMemoryCheckpointer())
"""


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_runs_through_two_processes_on_one_store_each_run_once_with_one_effect(
    tmp_path: Path, kind: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = tmp_path / "paid_app.py"
    app.write_text(PAID_APP)
    paid = tmp_path / "paid.log"
    monkeypatch.setenv("PAID_LOG", str(paid))
    database = (
        str(tmp_path / "shared.db") if kind == "sqlite" else request.getfixturevalue("fresh_dsn")
    )
    args = (f"{app}:app", "--database", database, "--workers", "2", "--log-level", "warning")
    headers = {"Authorization": f"Bearer {KEY}"}
    started: list[str] = []

    async def batch(url: str, first: int) -> list[str]:
        async def one(n: int) -> str:  # a connection each: either process may take it
            async with httpx.AsyncClient(base_url=url, headers=headers, timeout=120) as http:
                got = await http.post(
                    f"/api/threads/order-{n}/runs", json={"input": ASK, "wait": True}
                )
            assert got.status_code == 200, got.text
            assert got.json()["run"]["status"] == "completed", got.text
            return str(got.json()["run"]["run_id"])

        return list(await asyncio.gather(*(one(first + i) for i in range(8))))

    with _cli_serve(tmp_path, *args) as (url, proc, _):
        deadline = time.monotonic() + 60
        while len(_children(proc.pid)) < 2:  # the supervisor's two server processes
            assert time.monotonic() < deadline, "the server processes did not start"
            time.sleep(0.2)
        # batches of concurrent runs until both processes ran some (the kernel picks)
        for at in range(0, 80, 8):
            started += asyncio.run(batch(url, at))
            if len({line.split()[1] for line in paid.read_text().splitlines()}) == 2:
                break
        with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
            listed = client.get("/api/runs", params={"limit": 200}).json()["runs"]
            assert sorted(r["run_id"] for r in listed) == sorted(started)
            assert {r["status"] for r in listed} == {"completed"}
            for run_id in started:  # each run's ledger: one payment, completed
                effects = client.get(f"/api/runs/{run_id}/effects").json()["effects"]
                assert [e["status"] for e in effects if e["effect_type"] == "pay"] == ["completed"]
    lines = [line.split() for line in paid.read_text().splitlines()]
    assert len(lines) == len(started), "one execution per run, wherever it ran"
    assert len({key for key, _ in lines}) == len(started), "each run's payment once"
    assert len({pid for _, pid in lines}) == 2, "runs went through both processes"
