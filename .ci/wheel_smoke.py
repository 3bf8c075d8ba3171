"""The first hour from a built wheel: build it, install it NON-editable with [cli,server]
into a fresh venv that cannot see this checkout, run the demo there, serve the demo's
database without any app code (``oncegraph serve --db``) and read it over HTTP.

    python .ci/wheel_smoke.py            # CI runs it (.ci/run); about half a minute

Every step runs from an empty directory outside the checkout, with PYTHONPATH unset, so
nothing can come from ``src/``. The venv is made without the system's site-packages and
gets only what the wheel's [cli,server] extras name (no PostgreSQL driver: serving
SQLite must not need one). The server it starts is stopped by its own pid.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
KEY = "wheel-smoke-admin-key"


_T0 = time.monotonic()


def step(what: str) -> None:
    print(f"wheel smoke: [{time.monotonic() - _T0:5.1f} s] {what}", flush=True)


def run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 300) -> str:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"wheel smoke: {' '.join(cmd[:3])}... exited {done.returncode}")
    return done.stdout


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


APP = """
from typing import TypedDict

from oncegraph import END, START, StateGraph


class State(TypedDict):
    n: int


def inc(state: State) -> dict:
    return {"n": state["n"] + 1}


graph = StateGraph(State)
graph.add_node("inc", inc)
graph.add_edge(START, "inc")
graph.add_edge("inc", END)
"""
AUTH = {"Authorization": f"Bearer {KEY}"}


def serve(bin_: Path, work: Path, env: dict[str, str], args: list[str], check: Any) -> None:
    """``oncegraph serve ARGS`` on a free port until ``check(base_url)`` has passed; the
    server is stopped by its own pid."""
    port = free_port()
    log_path = work / f"serve-{port}.log"
    with log_path.open("w") as log:
        server = subprocess.Popen(
            [str(bin_ / "oncegraph"), "serve", *args, "--port", str(port)],
            cwd=work,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    status, body = get(f"{base}/api/health")
                    break
                except OSError:
                    if server.poll() is not None or time.monotonic() > deadline:
                        sys.stderr.write(log_path.read_text())
                        raise SystemExit("wheel smoke: the server did not start") from None
                    time.sleep(0.2)
            assert status == 200, body
            check(base)
        finally:
            server.terminate()  # our own server, by its pid
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()


def demo_database(base: str) -> None:
    status, body = get(f"{base}/api/health")
    assert json.loads(body)["graph"] == "database", body
    status, body = get(f"{base}/api/runs", AUTH)
    runs = json.loads(body)["runs"]
    assert status == 200 and [r["status"] for r in runs] == ["completed"], body
    run_id = runs[0]["run_id"]
    status, body = get(f"{base}/api/runs/{run_id}/effects", AUTH)
    assert status == 200 and any(
        e["effect_type"] == "refund_order" and e["status"] == "completed"
        for e in json.loads(body)["effects"]
    ), body
    status, body = get(f"{base}/ui/login")
    assert status == 200 and 'name="key"' in body, body[:300]
    status, body = get(f"{base}/static/oncegraph.css")
    assert status == 200 and body, "no stylesheet in the wheel"
    status, body = get(f"{base}/ui/runs/{run_id}", {"Cookie": f"oncegraph_key={KEY}"})
    assert status == 200 and 'id="database-only"' in body, body[:300]
    status, body = post(f"{base}/api/runs/{run_id}/replay", {"reason": "audit"})
    assert status == 409 and "oncegraph serve MODULE:APP" in body, body


def app_runs(base: str) -> None:
    status, body = post(f"{base}/api/threads/t1/runs", {"input": {"n": 1}, "wait": True})
    assert status in (200, 201) and '"completed"' in body, body
    status, body = get(f"{base}/api/threads/t1/state", AUTH)
    assert status == 200 and json.loads(body)["state"]["values"] == {"n": 2}, body


def post(url: str, payload: dict[str, Any]) -> tuple[int, str]:
    data = json.dumps(payload).encode()
    headers = {**AUTH, "Content-Type": "application/json"}
    request = urllib.request.Request(url, data=data, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def main() -> None:
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="oncegraph-wheel-"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.pop("ONCEGRAPH_DATABASE", None)
    step("building the wheel")
    dist = work / "dist"
    run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(ROOT)],
        work,
        env,
    )
    (wheel,) = dist.glob("oncegraph-*.whl")
    step(f"installing {wheel.name}[cli,server] into a fresh venv")
    venv = work / "venv"
    # no pip inside (ensurepip costs seconds): this interpreter's pip installs into it
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], work, env)
    bin_ = venv / "bin"
    constraints = ROOT / "constraints" / "ci.txt"
    pins = ["-c", str(constraints)] if constraints.exists() else []
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(bin_ / "python"),
            "install",
            "-q",
            *pins,
            f"{wheel}[cli,server]",
        ],
        work,
        env,
        timeout=600,
    )
    env["PATH"] = f"{bin_}{os.pathsep}{env.get('PATH', '')}"
    where = run(
        [
            str(bin_ / "python"),
            "-c",
            "import importlib.util, oncegraph; print(oncegraph.__file__); "
            "print(importlib.util.find_spec('psycopg') is not None)",
        ],
        work,
        env,
    ).split()
    if not where[0].startswith(str(venv)) or where[1] != "False":
        raise SystemExit(f"wheel smoke: oncegraph from {where[0]}, psycopg present: {where[1]}")

    step("oncegraph demo --db demo.db")
    out = run([str(bin_ / "oncegraph"), "demo", "--db", "demo.db"], work, env)
    if "exactly once." not in out or "oncegraph serve --db demo.db" not in out:
        sys.stderr.write(out)
        raise SystemExit("wheel smoke: the demo did not end as it should")

    env["ONCEGRAPH_API_KEYS"] = f"{KEY}=admin"
    step("oncegraph serve --db demo.db (no app code)")
    serve(bin_, work, env, ["--db", "demo.db"], demo_database)
    nothing = subprocess.run(
        [str(bin_ / "oncegraph"), "serve"], cwd=work, env=env, capture_output=True, text=True
    )
    assert nothing.returncode == 2 and "--db" in nothing.stderr, nothing.stderr

    step("oncegraph serve app.py:graph --database app.db (an app, SQLite, no psycopg)")
    (work / "app.py").write_text(APP)
    serve(bin_, work, env, ["app.py:graph", "--database", "app.db"], app_runs)
    step(f"passed in {time.monotonic() - started:.0f} s ({work})")
    subprocess.run(["rm", "-rf", str(work)], check=False)


if __name__ == "__main__":
    main()
