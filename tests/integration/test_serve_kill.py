"""SIGKILL a real ``oncegraph serve`` under 64 concurrent starts, restart it, and send
every start again with its ``Idempotency-Key``: exactly one run and one effect per key
at a real recipient (the fake provider, its own process), every run completed, every
answer naming the run the first send made. On SQLite and PostgreSQL.

What the kill leaves, and what resolves it: starts that never reached the server are
started by their retry; starts whose key was claimed but whose run was not yet created
are started under the run id bound to the key; runs left ``running`` are taken over by
the restarted server's recovery pass (or by their own retry, whichever comes first,
through the run's lock: never both); runs that had completed are answered as they are.
The counts are printed (``-s``) for the record.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from oncegraph.testing.provider import ProviderClient, serve_forever_in_subprocess

pytestmark = pytest.mark.slow  # real OS processes: scheduled first under -n auto

HERE = Path(__file__).resolve().parent
APP = HERE / "_served_orders.py"
ORDERS = 64
KEYS = [f"kill-operator-key-{n:02d}" for n in range(8)]
ANSWERED_AT_KILL = 8  # this many starts were answered: the server dies now
LATE = 8  # starts sent only once the server is dead: they never reach it
DEADLINE = 120.0  # seconds for the whole retry phase: the test is bounded


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        return str(request.getfixturevalue("fresh_dsn"))
    return str(tmp_path / "served.db")


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[ProviderClient]:
    with serve_forever_in_subprocess(tmp_path / "provider.port") as proc:
        yield ProviderClient(proc.url)


def _port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    """``oncegraph serve`` as a child process, started (and killed) on one port."""

    database: str
    provider_url: str
    cwd: Path
    port: int = field(default_factory=_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        env = {
            **os.environ,
            "ONCEGRAPH_API_KEYS": ",".join(f"{k}=operator#client-{n}" for n, k in enumerate(KEYS)),
            "KILL_PROVIDER_URL": self.provider_url,
        }
        env.pop("ONCEGRAPH_CRASH_AT", None)
        argv = [sys.executable, "-m", "oncegraph", "serve", f"{APP}:app"]
        argv += ["--port", str(self.port), "--database", self.database]
        argv += ["--log-level", "WARNING"]
        log = (self.cwd / "server.log").open("ab")  # the server's own output, kept apart
        self.proc = subprocess.Popen(
            argv, cwd=self.cwd, env=env, stdout=log, stderr=log, start_new_session=True
        )
        log.close()
        deadline = time.monotonic() + 60
        while True:
            assert self.proc.poll() is None, "the server process ended early"
            try:
                if httpx.get(f"{self.url}/api/health", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the server did not come up"
            time.sleep(0.05)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        assert self.proc.wait(30) == -signal.SIGKILL

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _start(n: int) -> tuple[str, dict[str, str], dict[str, Any]]:
    order = f"order-{n:02d}"
    headers = {"Authorization": f"Bearer {KEYS[n % len(KEYS)]}", "Idempotency-Key": f"key-{n}"}
    body = {"input": {"messages": [{"role": "user", "content": order}]}, "wait": True}
    return f"/api/threads/{order}/runs", headers, body


async def _first_sends(server: Server, provider: ProviderClient) -> list[httpx.Response | None]:
    """The starts at once, but for :data:`LATE` of them, sent once the server was
    SIGKILLed (when :data:`ANSWERED_AT_KILL` starts were answered: the others are at
    every stage of their runs). A start whose answer was lost is ``None``."""

    answered = 0

    async def send(client: httpx.AsyncClient, n: int) -> httpx.Response | None:
        nonlocal answered
        path, headers, body = _start(n)
        try:
            got = await client.post(path, headers=headers, json=body)
        except httpx.TransportError:
            return None
        answered += 1
        return got

    async def killer() -> None:
        deadline = time.monotonic() + 60
        while answered < ANSWERED_AT_KILL:
            assert time.monotonic() < deadline, "the starts were never answered"
            await asyncio.sleep(0.01)
        server.kill()

    limits = httpx.Limits(max_connections=ORDERS + 8)
    async with httpx.AsyncClient(base_url=server.url, timeout=60, limits=limits) as client:
        sends = [asyncio.ensure_future(send(client, n)) for n in range(ORDERS - LATE)]
        await killer()
        late = [asyncio.ensure_future(send(client, n)) for n in range(ORDERS - LATE, ORDERS)]
        return list(await asyncio.gather(*sends, *late))


async def _retries(server: Server) -> tuple[list[httpx.Response], Counter[str]]:
    """Every start again, each with its key, until it is answered (bounded)."""
    seen: Counter[str] = Counter()
    deadline = time.monotonic() + DEADLINE

    async def again(client: httpx.AsyncClient, n: int) -> httpx.Response:
        path, headers, body = _start(n)
        while True:
            assert time.monotonic() < deadline, f"start {n} was never answered"
            try:
                got = await client.post(path, headers=headers, json=body)
            except httpx.TransportError:
                seen["transport_error"] += 1
                await asyncio.sleep(0.2)
                continue
            if got.status_code == 409 and got.json()["error"]["code"] == "request_in_flight":
                seen["in_flight"] += 1
                await asyncio.sleep(float(got.headers.get("retry-after", "1")))
                continue
            seen["replayed" if got.headers.get("idempotent-replayed") else "answered"] += 1
            return got

    limits = httpx.Limits(max_connections=ORDERS + 8)
    async with httpx.AsyncClient(base_url=server.url, timeout=90, limits=limits) as client:
        answers = await asyncio.gather(*(again(client, n) for n in range(ORDERS)))
    return list(answers), seen


def test_a_killed_server_makes_one_run_and_one_effect_per_key(
    database: str, provider: ProviderClient, tmp_path: Path
) -> None:
    server = Server(database, provider.url, tmp_path)
    server.start()
    try:
        first = asyncio.run(_first_sends(server, provider))
        lost = [n for n, r in enumerate(first) if r is None]
        answered = [n for n, r in enumerate(first) if r is not None]
        assert lost, "the kill came after every start was answered: nothing was tried"
        at_kill = provider.stats()["performed"]
        server.start()  # the same port and database
        answers, seen = asyncio.run(_retries(server))
        with httpx.Client(base_url=server.url, timeout=60) as client:
            headers = {"Authorization": f"Bearer {KEYS[0]}"}
            threads = {}
            for n in range(ORDERS):
                got = client.get(f"/api/threads/order-{n:02d}", headers=headers)
                assert got.status_code == 200, got.text
                threads[n] = got.json()["runs"]
            audits = {
                n: client.get(f"/api/runs/{runs[0]['run_id']}/audit", headers=headers).json()
                for n, runs in threads.items()
            }
    finally:
        server.stop()

    for n, answer in enumerate(answers):
        assert answer.status_code == 200, (n, answer.text)
        body = answer.json()
        (run,) = threads[n]  # exactly one run per key
        assert body["run_id"] == run["run_id"] and run["status"] == "completed", (n, body)
        if first[n] is not None and first[n].status_code == 200:  # type: ignore[union-attr]
            assert body == first[n].json()  # type: ignore[union-attr]
    per_order = Counter(e["body"]["order_id"] for e in provider.effects())
    assert per_order == {f"order-{n:02d}": 1 for n in range(ORDERS)}, per_order
    assert provider.stats()["performed"] == ORDERS

    kind = "sqlite" if database.endswith(".db") else "postgres"
    taken_over = sum(
        1
        for found in audits.values()
        for a in found["audit"]
        if a["action"] == "continue" and a["actor"].startswith("server:")
    )
    by_retry = sum(
        1
        for found in audits.values()
        for a in found["audit"]
        if a["action"] == "continue" and a["actor"].startswith("api:")
    )
    print(
        f"\n[{kind}] {ORDERS} starts; "
        f"answered before the kill: {len(answered)}, lost: {len(lost)} ({LATE} never sent "
        f"before it); provider orders at the kill: {at_kill}; "
        f"runs taken over by the restarted server: {taken_over}, by their retry: {by_retry}; "
        f"retry answers: {dict(seen)}"
    )
