"""``oncegraph.server.serve``: what it loads, and a real server process over an example.

The CLI's ``oncegraph serve`` calls :func:`oncegraph.server.serve`; these tests run it
in a subprocess the way the CLI will, with nothing else running (SQLite).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from conftest import free_port
from oncegraph.app import CompiledGraph
from oncegraph.errors import ConfigError
from oncegraph.server.auth import ApiKey, Role, key_ring, parse_spec
from oncegraph.server.loading import compiled, load_target

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "support_agent_approval.py"
KEY = "served-admin-key"
ASK = {"messages": [{"role": "user", "content": "Refund order 1042."}]}


def test_targets_load_from_a_file_or_a_module_and_bad_ones_say_why(tmp_path: Path) -> None:
    found = load_target(f"{EXAMPLE}:app")
    assert isinstance(found, CompiledGraph)
    assert compiled(found, None) is found  # its own checkpointer
    moved = compiled(found, str(tmp_path / "other.db"))
    assert moved is not found and moved.spec is found.spec
    graph = load_target(f"{ROOT / 'examples' / 'map_reduce.py'}:graph")
    assert isinstance(compiled(graph, str(tmp_path / "mr.db")), CompiledGraph)
    assert isinstance(load_target("oncegraph.server.loading:load_target"), type(load_target))
    for bad, why in [
        ("nocolon", "module:attribute"),
        (f"{tmp_path / 'missing.py'}:app", "no Python file"),
        ("oncegraph_no_such_module:app", "cannot import"),
        (f"{EXAMPLE}:nope", "no attribute"),
        (":app", "module:attribute"),
    ]:
        with pytest.raises(ConfigError, match=why):
            load_target(bad)
    with pytest.raises(ConfigError, match="not a compiled graph"):
        compiled(42, None)


def test_keys_come_from_a_spec_a_mapping_or_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    keys = parse_spec("aaaaaaaa=admin, bbbbbbbb=viewer@acme#vic")
    assert keys == [
        ApiKey("aaaaaaaa", Role.ADMIN),
        ApiKey("bbbbbbbb", Role.VIEWER, "acme", "vic"),
    ]
    ring, generated = key_ring({"cccccccc": "operator@globex"})
    assert generated is None and ring.find("cccccccc") is not None
    assert ring.find("cccccccc").tenant == "globex"  # type: ignore[union-attr]
    assert ring.find("wrong-key") is None and ring.find(None) is None
    monkeypatch.setenv("ONCEGRAPH_API_KEYS", "dddddddd=viewer")
    ring, generated = key_ring(None)
    assert generated is None and ring.find("dddddddd") is not None
    monkeypatch.delenv("ONCEGRAPH_API_KEYS")
    ring, generated = key_ring(None)
    assert generated is not None and ring.find(generated).role is Role.ADMIN  # type: ignore[union-attr]
    for bad, why in [
        ("short=admin", "at least 8"),
        ("aaaaaaaa", "no role"),
        ("aaaaaaaa=root", "unknown role"),
        ("aaaaaaaa=admin@a:b", "tenant"),
    ]:
        with pytest.raises(ConfigError, match=why):
            parse_spec(bad)


@contextlib.contextmanager
def _serve(tmp_path: Path, target: str, env: dict[str, str]) -> Iterator[tuple[str, list[str]]]:
    port = free_port()
    code = f"import sys; from oncegraph.server import serve; serve({target!r}, port={port})"
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src"), **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    printed: list[str] = []
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, "the server process ended early"
            try:
                if httpx.get(f"{url}/api/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the server did not come up"
            time.sleep(0.1)
        yield url, printed
    finally:
        proc.terminate()
        try:
            _, err = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        printed.append(err)


def test_serving_an_example_answers_an_interrupt_over_http(tmp_path: Path) -> None:
    env = {"ONCEGRAPH_API_KEYS": f"{KEY}=admin#ops"}
    with _serve(tmp_path, f"{EXAMPLE}:app", env) as (url, _):
        headers = {"Authorization": f"Bearer {KEY}"}
        with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
            started = client.post("/api/threads/ticket-1/runs", json={"input": ASK, "wait": True})
            assert started.status_code == 200, started.text
            run = started.json()["run"]
            assert run["status"] == "interrupted"
            answer = {"decisions": [{"type": "approve"}], "approver": "alice@shop"}
            went_on = client.post(
                f"/api/runs/{run['run_id']}/continue", json={"answer": answer, "reason": "ok"}
            )
            assert went_on.status_code == 200, went_on.text
            assert went_on.json()["run"]["status"] == "completed"
            audit = client.get(f"/api/runs/{run['run_id']}/audit").json()["audit"]
            assert [(a["action"], a["actor"]) for a in audit] == [
                ("answer", "api:ops"),
                ("start", "api:ops"),  # newest first: the run's start, then the answer
            ]
            assert client.get("/ui/login").status_code == 200


def test_a_graph_without_a_store_is_served_on_sqlite_with_a_generated_key(
    tmp_path: Path,
) -> None:
    env = {"ONCEGRAPH_API_KEYS": ""}
    target = f"{ROOT / 'examples' / 'map_reduce.py'}:graph"
    with _serve(tmp_path, target, env) as (url, printed):
        assert (tmp_path / "oncegraph.db").exists()
        assert httpx.get(f"{url}/api/runs", timeout=10).status_code == 401
    (err,) = printed
    assert "generated an admin key" in err
    key = err.split("generated an admin key for this process:\n", 1)[1].split()[0]
    assert len(key) >= 20


def test_oncegraph_serve_takes_the_public_origin_and_the_limits(tmp_path: Path) -> None:
    """``oncegraph serve --origin ... --auth-rate ... --auth-burst ...``: only the public
    origin's pages may post the UI's forms, and guesses are limited as asked."""
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "oncegraph.cli",
            "serve",
            f"{EXAMPLE}:app",
            "--port",
            str(port),
            "--database",
            str(tmp_path / "served.db"),
            "--origin",
            "https://ops.example.com",
            "--auth-rate",
            "0.01",
            "--auth-burst",
            "3",
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src"), "ONCEGRAPH_API_KEYS": f"{KEY}=admin"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:  # the health probe is never limited
            assert proc.poll() is None, proc.communicate()[1]
            try:
                if httpx.get(f"{url}/api/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the server did not come up"
            time.sleep(0.1)
        with httpx.Client(base_url=url, timeout=30) as client:
            form = {"key": KEY}
            direct = client.post("/ui/login", data=form, headers={"Origin": url})
            assert direct.status_code == 403 and "set-cookie" not in direct.headers
            public = client.post(
                "/ui/login", data=form, headers={"Origin": "https://ops.example.com"}
            )
            assert public.status_code == 303 and "oncegraph_key" in public.headers["set-cookie"]
            client.cookies.clear()
            guess = client.get("/api/runs", headers={"Authorization": "Bearer wrong-key-1"})
            assert guess.status_code == 401
            limited = client.get("/api/runs", headers={"Authorization": "Bearer wrong-key-2"})
            assert limited.status_code == 429 and int(limited.headers["Retry-After"]) >= 1
            served = client.get("/api/runs", headers={"Authorization": f"Bearer {KEY}"})
            assert served.status_code == 200
    finally:
        proc.terminate()
        try:
            proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
