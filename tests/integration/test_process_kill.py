"""Guarantee 1 across real processes: a SIGKILLed run is resumed by a FRESH process.

``_node_worker.py`` runs ``first -> middle -> last`` on a SQLite file. The process is
killed in the middle of ``middle`` (by the test, after the node wrote its marker; or by
oncegraph itself through ``ONCEGRAPH_CRASH_AT``). A new process then continues the run
with ``invoke(None, config)``: ``first`` is not re-run, ``middle`` re-runs from the top,
and the conversation holds every message exactly once. Executions are counted in an
append-only file the nodes fsync, so the counts survive the kill.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

WORKER = Path(__file__).with_name("_node_worker.py")
MARKER_WAIT = 60.0  # seconds; generous for a loaded machine, never reached when healthy

pytestmark = pytest.mark.slow


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "ONCEGRAPH_CRASH_AT"}
    env.update(extra)
    return env


def _spawn(tmp: Path, path: str, action: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), str(tmp / "runs.db"), str(tmp), path, action],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(**env),
    )


def _executions(tmp: Path) -> list[str]:
    log = tmp / "executions.log"
    return log.read_text().splitlines() if log.exists() else []


def _wait_for_marker(proc: subprocess.Popen[str], marker: Path) -> None:
    deadline = time.monotonic() + MARKER_WAIT
    while not marker.exists():
        if proc.poll() is not None:
            _, err = proc.communicate()
            pytest.fail(f"the worker exited ({proc.returncode}) before the marker: {err}")
        if time.monotonic() > deadline:
            proc.kill()
            proc.communicate()
            pytest.fail(f"no marker after {MARKER_WAIT}s")
        time.sleep(0.01)


def _finish(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    values: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return values


def _run_rows(tmp: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(tmp / "runs.db") as conn:
        rows = conn.execute("SELECT run_id, status FROM oncegraph_runs").fetchall()
    conn.close()
    return [(str(r[0]), str(r[1])) for r in rows]


def _head_next(tmp: Path) -> list[str]:
    with sqlite3.connect(tmp / "runs.db") as conn:
        (next_nodes,) = conn.execute(
            "SELECT c.next_nodes FROM oncegraph_threads t JOIN oncegraph_checkpoints c "
            "ON c.thread_id = t.thread_id AND c.checkpoint_id = t.head_checkpoint_id"
        ).fetchone()
    conn.close()
    return list(json.loads(next_nodes))


def _assert_resumed(tmp: Path, path: str, killed_runs: list[tuple[str, str]]) -> None:
    # the dead process left the run unfinished, its head naming the interrupted node
    assert [status for _, status in killed_runs] == ["running"]
    assert _head_next(tmp) == ["middle"]

    values = _finish(_spawn(tmp, path, "resume"))

    assert _executions(tmp) == [
        "first",  # not re-run
        "middle:start",  # the killed attempt
        "middle:start",  # re-run from the top
        "middle:end",
        "last",
    ]
    assert [m["content"] for m in values["messages"]] == ["hello", "first", "middle", "last"]
    assert len({m["id"] for m in values["messages"]}) == 4
    assert values["seen"] == 3
    (run,) = _run_rows(tmp)
    assert run == (killed_runs[0][0], "completed")  # the same run, resumed


@pytest.mark.parametrize("path", ["invoke", "stream"])
def test_sigkill_in_the_middle_of_a_node_then_resume_in_a_fresh_process(
    tmp_path: Path, path: str
) -> None:
    (tmp_path / "hang").touch()
    proc = _spawn(tmp_path, path, "start")
    _wait_for_marker(proc, tmp_path / "middle.marker")
    assert int((tmp_path / "middle.marker").read_text()) == proc.pid
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL
    assert _executions(tmp_path) == ["first", "middle:start"]

    (tmp_path / "hang").unlink()
    _assert_resumed(tmp_path, path, _run_rows(tmp_path))


@pytest.mark.parametrize("path", ["invoke", "stream"])
def test_oncegraph_crash_at_before_checkpoint_then_resume_in_a_fresh_process(
    tmp_path: Path, path: str
) -> None:
    # the 2nd step checkpoint is the one after `middle`: the node ran, its commit did not
    proc = _spawn(tmp_path, path, "start", ONCEGRAPH_CRASH_AT="before_checkpoint:2")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == -signal.SIGKILL, err
    assert out == ""
    assert _executions(tmp_path) == ["first", "middle:start", "middle:end"]

    values = _finish(_spawn(tmp_path, path, "resume"))
    assert _executions(tmp_path) == [
        "first",
        "middle:start",
        "middle:end",
        "middle:start",
        "middle:end",
        "last",
    ]
    assert [m["content"] for m in values["messages"]] == ["hello", "first", "middle", "last"]
    ((_, status),) = _run_rows(tmp_path)
    assert status == "completed"


def test_a_second_resume_after_completion_runs_nothing(tmp_path: Path) -> None:
    """``invoke(None)`` on a finished thread (as in LangGraph) returns the thread's final
    state from a fresh process, and no node runs again."""
    proc = _spawn(tmp_path, "invoke", "start", ONCEGRAPH_CRASH_AT="after_checkpoint:1")
    proc.communicate(timeout=300)
    assert proc.returncode == -signal.SIGKILL
    assert _executions(tmp_path) == ["first"]
    done = _finish(_spawn(tmp_path, "invoke", "resume"))
    assert _executions(tmp_path) == ["first", "middle:start", "middle:end", "last"]
    assert _finish(_spawn(tmp_path, "invoke", "resume")) == done
    assert _executions(tmp_path) == ["first", "middle:start", "middle:end", "last"]
