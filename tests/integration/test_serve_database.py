"""``oncegraph serve`` without MODULE:APP, as a user types it (a real process each time):
nothing to serve, a path with no database or a file that is not one is one or two lines
naming the fix, and nothing is created; ``--db`` on the demo's database starts a real
server that lists the demo's run and refuses a Continue with the words to serve the app.
The server is stopped by its own pid."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from clirun import SRC, assert_user_error, og, ok

KEY = "serve-db-admin-key"


def test_serve_with_nothing_or_a_wrong_database_says_what_to_pass(tmp_path: Path) -> None:
    assert_user_error(og("serve"), "MODULE:APP", "--db")
    missing = str(tmp_path / "missing.db")
    assert_user_error(og("serve", "--db", missing), "no SQLite database", "missing.db")
    not_db = tmp_path / "notes.txt"
    not_db.write_text("hello")
    assert_user_error(og("serve", "--db", str(not_db)), "notes.txt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]  # nothing created


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _call(url: str, body: dict[str, object] | None = None) -> tuple[int, str]:
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    request = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.mark.slow
def test_serve_db_opens_the_demos_database_without_its_code(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    out = ok("demo", "--db", str(db))
    assert f"oncegraph serve --db {db}" in out.stdout  # the demo's last line says how
    port = _port()
    env = {k: v for k, v in os.environ.items() if k != "ONCEGRAPH_DATABASE"}
    env.update(PYTHONPATH=os.pathsep.join([str(SRC), *sys.path]), ONCEGRAPH_API_KEYS=f"{KEY}=admin")
    log = tmp_path / "serve.log"
    with log.open("w") as sink:
        server = subprocess.Popen(
            [sys.executable, "-m", "oncegraph", "serve", "--db", str(db), "--port", str(port)],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(1500):  # a hang detector, not a timing assert
            try:
                status, _ = _call(f"{base}/api/health")
                break
            except OSError:
                assert server.poll() is None, log.read_text()
                time.sleep(0.2)
        status, body = _call(f"{base}/api/runs")
        runs = json.loads(body)["runs"]
        assert status == 200 and [r["status"] for r in runs] == ["completed"], body
        status, body = _call(f"{base}/api/runs/{runs[0]['run_id']}/continue", {"reason": "go"})
        assert status == 409 and "oncegraph serve MODULE:APP" in body, body
    finally:
        server.terminate()
        server.wait(timeout=60)
