"""The HTTP path: runs through ``oncegraph serve``, and reads while runs are written.

A server process (``oncegraph serve`` on a fresh SQLite file or PostgreSQL database) serves
the tool-loop app of ``oncegraph_bench`` with N = 1 (one model turn, one recorded tool call
per run). A client process (httpx, a key per client so the per-key rate limit is not what
is measured) starts ``--runs`` runs with ``POST /api/threads/{id}/runs {"wait": true}`` at
each concurrency (``--concurrency``, default 1,16,64), each run on its own thread, and
reports runs/s and the start-to-completed latency's p50 and p99. Then ``--readers`` clients
read ``GET /api/runs?limit=50`` in a loop while 64 writers start runs: the readers' p50/p99
and the writers' runs/s beside the same writers alone. Checks after each measurement: every
run completed, one effect each (counted in a file).

    python benchmarks/http_bench.py --stores sqlite,postgres
    python benchmarks/http_bench.py --stores sqlite --runs 500 --concurrency 16
    python benchmarks/http_bench.py --stores postgres --workers 1,2   # oncegraph serve --workers N

One JSON line per result on stdout. The server, the client and the database share this
machine's cores: compare figures of one run, and quote them only from a quiet machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from oncegraph_bench import fresh_pg_database  # noqa: E402

APP = """
import sys
sys.path.insert(0, {here!r})
import oncegraph_bench
app = oncegraph_bench.build(1).compile()
"""


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def server(
    kind: str, folder: Path, keys: list[str], workers: int = 1
) -> Iterator[tuple[str, Path]]:
    """``oncegraph serve`` (``workers`` processes) on a fresh store; yields its base URL and
    the effects log."""
    app = folder / "httpapp.py"
    app.write_text(APP.format(here=str(HERE)))
    log = folder / "effects.log"
    with contextlib.ExitStack() as stack:
        if kind == "sqlite":
            database = str(folder / "http.db")
        else:
            database = stack.enter_context(fresh_pg_database())
        port = _port()
        env = {
            **os.environ,
            "BENCH_EFFECT_LOG": str(log),
            "ONCEGRAPH_API_KEYS": ",".join(f"{k}=operator#bench{i}" for i, k in enumerate(keys)),
        }
        argv = [sys.executable, "-m", "oncegraph", "serve", f"{app}:app", "--port", str(port)]
        argv += ["--database", database, "--log-level", "warning", "--workers", str(workers)]
        out = stack.enter_context(open(folder / "server.log", "wb"))
        proc = subprocess.Popen(argv, cwd=folder, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{port}"
            _wait_healthy(url, proc, folder)
            yield url, log
        finally:
            proc.terminate()
            proc.wait(30)


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], folder: Path) -> None:
    import httpx

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError((folder / "server.log").read_text(errors="replace")[-3000:])
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/api/health", timeout=2).status_code == 200:
                return
        time.sleep(0.1)
    raise RuntimeError("the server did not answer /api/health within 60 s")


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def _start_runs(
    url: str, keys: list[str], runs: int, concurrency: int, tag: str
) -> tuple[float, list[float]]:
    import httpx

    latencies: list[float] = []
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(runs):
        queue.put_nowait(i)

    async def client(c: int) -> None:
        headers = {"Authorization": f"Bearer {keys[c % len(keys)]}"}
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=120) as http:
            while True:
                try:
                    i = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                body = {"input": {"messages": [{"role": "user", "content": "go"}]}, "wait": True}
                start = time.perf_counter()
                while True:
                    got = await http.post(f"/api/threads/{tag}-{i}/runs", json=body)
                    if got.status_code != 429:
                        break
                    await asyncio.sleep(float(got.json()["error"].get("retry_after", 0.05)))
                latencies.append(time.perf_counter() - start)
                if got.status_code not in (200, 202):
                    raise RuntimeError(f"start {i}: {got.status_code} {got.text[:300]}")

    begin = time.perf_counter()
    await asyncio.gather(*(client(c) for c in range(concurrency)))
    return time.perf_counter() - begin, latencies


async def _read_while(url: str, key: str, readers: int, stop: asyncio.Event) -> list[float]:
    import httpx

    latencies: list[float] = []

    async def reader() -> None:
        headers = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=120) as http:
            while not stop.is_set():
                start = time.perf_counter()
                got = await http.get("/api/runs", params={"limit": 50})
                if got.status_code == 429:
                    await asyncio.sleep(0.05)
                    continue
                latencies.append(time.perf_counter() - start)

    await asyncio.gather(*(reader() for _ in range(readers)))
    return latencies


def emit(**line: Any) -> None:
    print(json.dumps({"peer": "oncegraph", "workload": "http", **line}), flush=True)


def _check(url: str, key: str, log: Path, expected: int) -> dict[str, int]:
    """Runs completed (paged through the whole store) and effects in the log."""
    import httpx

    completed = 0
    params: dict[str, Any] = {"limit": 1000}
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}) as http:
        while True:
            page = http.get("/api/runs", params=params).json()
            completed += sum(1 for r in page["runs"] if r["status"] == "completed")
            if not page.get("next"):
                break
            params["before"] = page["next"]
    effects = len(log.read_text().splitlines()) if log.exists() else 0
    return {"completed": completed, "effects": effects, "expected": expected}


def measure(kind: str, runs: int, concurrencies: list[int], readers: int, workers: int = 1) -> None:
    keys = [secrets.token_urlsafe(24) for _ in range(max([*concurrencies, 64]) + 1)]
    with (
        tempfile.TemporaryDirectory(prefix="bench_http_") as tmp,
        server(kind, Path(tmp), keys, workers) as (url, log),
    ):
        total = 0
        for conc in concurrencies:
            seconds, lat = asyncio.run(_start_runs(url, keys[:-1], runs, conc, f"c{conc}"))
            total += runs
            emit(
                store=kind,
                phase="starts",
                workers=workers,
                n=runs,
                concurrency=conc,
                seconds=round(seconds, 3),
                runs_per_s=round(runs / seconds, 1),
                p50_ms=round(_pct(lat, 50) * 1e3, 1),
                p99_ms=round(_pct(lat, 99) * 1e3, 1),
                **_check(url, keys[-1], log, total),
            )
        if readers:

            async def both() -> tuple[float, list[float], list[float]]:
                stop = asyncio.Event()
                reads = asyncio.ensure_future(_read_while(url, keys[-1], readers, stop))
                seconds, lat = await _start_runs(url, keys[:-1], runs, 64, "rw")
                stop.set()
                return seconds, lat, await reads

            seconds, lat, reads = asyncio.run(both())
            total += runs
            emit(
                store=kind,
                phase="reads-under-writes",
                workers=workers,
                n=runs,
                concurrency=64,
                readers=readers,
                seconds=round(seconds, 3),
                runs_per_s=round(runs / seconds, 1),
                p50_ms=round(_pct(lat, 50) * 1e3, 1),
                p99_ms=round(_pct(lat, 99) * 1e3, 1),
                reads=len(reads),
                read_p50_ms=round(statistics.median(reads) * 1e3, 1) if reads else None,
                read_p99_ms=round(_pct(reads, 99) * 1e3, 1) if reads else None,
                **_check(url, keys[-1], log, total),
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--concurrency", default="1,16,64")
    parser.add_argument("--readers", type=int, default=50)
    parser.add_argument(
        "--workers", default="1", help="server processes, a list: 1,2 measures each in turn"
    )
    args = parser.parse_args()
    conc = [int(c) for c in args.concurrency.split(",") if c]
    for kind in args.stores.split(","):
        for workers in (int(w) for w in args.workers.split(",") if w):
            measure(kind, args.runs, conc, args.readers, workers)


if __name__ == "__main__":
    main()
