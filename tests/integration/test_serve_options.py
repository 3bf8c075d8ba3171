"""``oncegraph serve``'s options for idempotency keys, run recovery and stream
keep-alives reach the server (given only when set, so its defaults stay its own), and
a bad value is refused before anything starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from test_cli import FAKE_SERVER

SRC = Path(__file__).resolve().parents[2] / "src"


def _serve(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "fake_server.py"
    script.write_text(FAKE_SERVER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), *sys.path])}
    env.pop("ONCEGRAPH_DATABASE", None)
    return subprocess.run(
        [sys.executable, str(script), "serve", "m:app", *args],
        capture_output=True, text=True, env=env, timeout=300,
    )


def test_serve_hands_idempotency_recovery_and_keepalive_options_to_the_server(
    tmp_path: Path,
) -> None:
    given = _serve(
        tmp_path,
        "--idempotency-window", "3600",
        "--recover-every", "5",
        "--keepalive", "2.5",
    )
    assert given.returncode == 0, given.stderr
    last = given.stdout.strip().splitlines()[-1]
    for part in ("'idempotency_window': 3600.0", "'recover_every': 5.0", "'keepalive': 2.5"):
        assert part in last
    assert "'recover'" not in last
    off = _serve(tmp_path, "--no-recover")
    assert off.returncode == 0 and "'recover': False" in off.stdout.strip().splitlines()[-1]
    bad = _serve(tmp_path, "--idempotency-window", "0")
    assert bad.returncode == 2 and "idempotency-window" in bad.stderr
