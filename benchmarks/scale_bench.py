"""The scale an agent product meets: paused runs across a deploy, and memory over many runs.

Workloads (``--workloads``, comma-separated):

- ``paused``: ``--runs`` runs (default 100,000) each wait at an interrupt (an approval of a
  refund) on SQLite and PostgreSQL. Then a new version of the app is "deployed": ``--deploy
  compatible`` (version 2 adds an optional state field, a change the paused runs do not stand
  on) or ``--deploy migrate`` (version 2 raises the state schema version and registers a
  migration for version 1). Every run is answered (approve) by the NEW version and completes:
  on SQLite, 1, 2 and 4 processes (``--procs``) each answer their share of the threads with
  ``ainvoke(Command(resume=...))``, 64 at a time, as the servers answering approvals would;
  on PostgreSQL, one process queues every answer (``submit(Command(resume=...))``, 64 at a
  time: the answer recorded, the run queued) while 1, 2 and 4 ``Worker`` processes
  (concurrency 64 each) go on with the runs; the clock runs from the first answer to the
  last run completed. Reported: seconds to
  pause them all, database bytes per paused run, seconds and runs/s to answer them all, and
  the checks: runs not completed afterwards (stranded) and refunds at the provider (a file
  each refund appends a line to) minus runs (twice). Each process count starts from the same
  paused database, copied (SQLite) or re-created (PostgreSQL).
- ``statements``: the SQL statements (and the process's CPU) one answer takes, counted on
  the real connection (:mod:`oncegraph.testing.statements`): min(``--runs``, 50) runs
  paused, then answered one at a time by a new process; on PostgreSQL
  ``submit(Command(resume=...))`` (``statements_per_answer``) and on both stores
  ``ainvoke(Command(resume=...))`` with the rest of the run (``statements_per_answered_run``).
- ``idle``: the RSS of one process over ``--runs`` short runs on SQLite (sampled every
  tenth), and of a worker-shaped process that has loaded ``--threads`` (10,000) interrupted
  threads' state it may be asked to resume.

    python benchmarks/scale_bench.py --workloads paused --runs 100000 --stores sqlite,postgres
    python benchmarks/scale_bench.py --workloads paused --runs 2000 --procs 1,2  # a quick look
    python benchmarks/scale_bench.py --workloads idle --runs 100000

Each result is one JSON line on stdout (``run_all.py`` reads them). Timings are of this
machine only: run on a quiet machine and repeat before quoting.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, NotRequired, TypedDict

sys.path.insert(0, str(Path(__file__).resolve().parent))

from oncegraph_bench import fresh_pg_database, pg_footprint, sqlite_footprint

from oncegraph import (
    END,
    START,
    Command,
    StateGraph,
    ToolNode,
    add_messages,
    interrupt,
    tool,
)

EFFECT_LOG = os.environ.get("BENCH_EFFECT_LOG")
BATCH = 64  # runs started (or answered) concurrently by one process


class Refund(TypedDict):
    messages: Annotated[list[Any], add_messages]
    amount: int


class RefundV2(Refund):
    note: NotRequired[str]  # the compatible change: a new optional field


@tool(dedup="benchmark: a line appended to a file, counted per run")
def refund(amount: int) -> str:
    """Refund the customer ``amount`` cents."""
    if EFFECT_LOG:
        with open(EFFECT_LOG, "a") as f:
            f.write(f"{amount}\n")
    return f"refunded {amount}"


def approval_graph(version: int, deploy: str) -> StateGraph:
    """``ask`` waits for a person's approval; ``model`` then asks for the refund; ``tools``
    performs it (a recorded write effect); ``model`` finishes."""

    def ask(state: dict[str, Any]) -> dict[str, Any]:
        answer = interrupt({"approve_refund": state["amount"]})
        return {"messages": [{"role": "user", "content": f"approved: {answer}"}]}

    def model(state: dict[str, Any]) -> dict[str, Any]:
        if state["messages"][-1].get("role") == "tool":
            return {"messages": [{"role": "assistant", "content": "done"}]}
        call = {"id": "call_refund", "name": "refund", "args": {"amount": state["amount"]}}
        return {"messages": [{"role": "assistant", "content": "", "tool_calls": [call]}]}

    def route(state: dict[str, Any]) -> str:
        return "tools" if state["messages"][-1].get("tool_calls") else END

    schema = RefundV2 if version == 2 and deploy == "compatible" else Refund
    schema_version = 2 if version == 2 and deploy == "migrate" else 1
    g = StateGraph(
        schema, name="refunds", version=str(version), state_schema_version=schema_version
    )
    g.add_node("ask", ask)
    g.add_node("model", model)
    g.add_node("tools", ToolNode([refund]))
    g.add_edge(START, "ask")
    g.add_edge("ask", "model")
    g.add_conditional_edges("model", route, ["tools", END])
    g.add_edge("tools", "model")
    return g


def compiled(store: Any, version: int, deploy: str) -> Any:
    migrations = {"1": lambda values: values} if version == 2 and deploy == "migrate" else None
    return approval_graph(version, deploy).compile(checkpointer=store, migrations=migrations)


def open_store(kind: str, where: str) -> Any:
    from oncegraph.storage.checkpointer import PgCheckpointer, SqliteCheckpointer

    if kind == "sqlite":
        return SqliteCheckpointer(where)
    return PgCheckpointer(postgres_dsn=where, min_size=2, max_size=8)


def emit(workload: str, store: str, n: int, seconds: float, **extra: Any) -> None:
    line = {"peer": "oncegraph", "workload": workload, "store": store, "n": n}
    line.update(seconds=round(seconds, 3), **extra)
    line["load_average"] = [round(x, 2) for x in os.getloadavg()]  # a busy machine shows
    print(json.dumps(line), flush=True)


async def _gather_batches(items: list[int], each: Any) -> None:
    for start in range(0, len(items), BATCH):
        await asyncio.gather(*(each(i) for i in items[start : start + BATCH]))


async def pause_all(kind: str, where: str, runs: int, deploy: str) -> float:
    store = open_store(kind, where)
    try:
        app = compiled(store, 1, deploy)
        await app.setup()
        begin = time.perf_counter()

        async def start(i: int) -> None:
            out = await app.ainvoke(
                {"messages": [], "amount": i}, {"thread_id": f"refund-{i}", "recursion_limit": 20}
            )
            assert "__interrupt__" in out, f"run {i} did not wait for its approval"

        await _gather_batches(list(range(runs)), start)
        return time.perf_counter() - begin
    finally:
        await store.aclose()


async def _answer_share(kind: str, where: str, deploy: str, share: list[int]) -> None:
    """One SQLite process's share: answer each thread's approval with the new version."""
    store = open_store(kind, where)
    try:
        app = compiled(store, 2, deploy)

        async def answer(i: int) -> None:
            await app.ainvoke(Command(resume="yes"), {"thread_id": f"refund-{i}"})

        await _gather_batches(share, answer)
    finally:
        await store.aclose()


async def _queue_answers(where: str, deploy: str, share: list[int]) -> None:
    """PostgreSQL: queue these threads' answers for the workers (nothing runs here)."""
    store = open_store("postgres", where)
    try:
        app = compiled(store, 2, deploy)

        async def answer(i: int) -> None:
            await app.asubmit(Command(resume="yes"), {"thread_id": f"refund-{i}"})

        await _gather_batches(share, answer)
    finally:
        await store.aclose()


async def _work(where: str, deploy: str) -> None:
    """One worker process (the new version) until its parent says stop on stdin."""
    from oncegraph.worker import Worker

    store = open_store("postgres", where)
    try:
        app = compiled(store, 2, deploy)
        if deploy == "compatible":
            # A worker claims the runs its graph can run: its own fingerprint's, or a
            # version it registers. A compatible deploy with a new version number names
            # the old one as a previous version, as such a deploy must today.
            previous = {"1": approval_graph(1, deploy)}
            app = approval_graph(2, deploy).compile(checkpointer=store, previous_versions=previous)
        worker = Worker(app, concurrency=BATCH, lease_seconds=60, poll_seconds=1)
        serving = asyncio.create_task(worker.run_forever())
        await asyncio.wait_for(worker.listening.wait(), 60)
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)  # "stop", or the parent's end
        worker.stop()
        await serving
    finally:
        await store.aclose()


def _share_arg(first: int, runs: int, step: int) -> str:
    """A child's share of the threads, ``range(first, runs, step)``, as one argument (a
    list of 100,000 ids would pass the kernel's limit on one argument's length)."""
    return f"{first}:{runs}:{step}"


def _share(arg: str) -> list[int]:
    first, runs, step = (int(x) for x in arg.split(":"))
    return list(range(first, runs, step))


def _child(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, __file__, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
    )


def _start_together(children: list[subprocess.Popen[str]]) -> float:
    for child in children:
        assert child.stdout is not None
        if child.stdout.readline().strip() != "ready":
            raise RuntimeError(f"process {child.pid} did not start")
    begin = time.perf_counter()
    for child in children:
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    return begin


def _counts(kind: str, where: str) -> dict[str, int]:
    """Runs by status, read straight from the database."""
    query = "SELECT status, count(*) FROM oncegraph_runs GROUP BY status"
    if kind == "sqlite":
        import sqlite3

        with sqlite3.connect(where) as conn:
            return {str(s): int(c) for s, c in conn.execute(query)}
    import psycopg

    with psycopg.connect(where, autocommit=True) as conn:
        return {str(s): int(c) for s, c in conn.execute(query)}


@contextmanager
def paused_database(kind: str, runs: int, deploy: str, folder: Path) -> Iterator[dict[str, Any]]:
    """A database with ``runs`` runs paused at their approval (made once per store)."""
    if kind == "sqlite":
        path = folder / "paused.db"
        seconds = asyncio.run(pause_all(kind, str(path), runs, deploy))
        size = sqlite_footprint(path)
        yield {"where": str(path), "pause_seconds": seconds, "footprint": size}
        return
    with fresh_pg_database() as dsn:
        seconds = asyncio.run(pause_all(kind, dsn, runs, deploy))
        yield {"where": dsn, "pause_seconds": seconds, "footprint": pg_footprint(dsn)}


@contextmanager
def copy_of(kind: str, paused: dict[str, Any], folder: Path, procs: int) -> Iterator[str]:
    """A fresh copy of the paused database for one measurement."""
    if kind == "sqlite":
        target = folder / f"answer-{procs}.db"
        src = Path(paused["where"])
        for suffix in ("", "-wal", "-shm"):
            if Path(f"{src}{suffix}").exists():
                shutil.copyfile(f"{src}{suffix}", f"{target}{suffix}")
        try:
            yield str(target)
        finally:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{target}{suffix}").unlink(missing_ok=True)
        return
    import psycopg

    base = paused["where"]
    source = base.rsplit("/", 1)[1].split("?")[0]
    name = f"{source}_p{procs}"
    admin = base.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{source}"')
    try:
        yield base.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def answer_all(
    kind: str,
    where: str,
    runs: int,
    deploy: str,
    procs: int,
    log: Path,
    answerers: int = 1,
    limit: float = 3600,
) -> dict:
    env = {"BENCH_EFFECT_LOG": str(log)}
    if kind == "postgres":  # the answers queued by `answerers` processes, run by workers
        children = [_child(["_work", where, deploy], env) for _ in range(procs)]
        for child in children:
            assert child.stdout is not None
            if child.stdout.readline().strip() != "ready":
                raise RuntimeError(f"worker {child.pid} did not start")
        if answerers == 1:
            begin = time.perf_counter()
            asyncio.run(_queue_answers(where, deploy, list(range(runs))))
        else:  # as several server processes taking the approvals would
            queuers = [
                _child(["_queue", where, deploy, _share_arg(p, runs, answerers)], env)
                for p in range(answerers)
            ]
            begin = _start_together(queuers)
            children += queuers
    else:
        children = [
            _child(["_answer", kind, where, deploy, _share_arg(p, runs, procs)], env)
            for p in range(procs)
        ]
    try:
        if kind != "postgres":
            begin = _start_together(children)
        deadline = begin + limit
        while True:
            counts = _counts(kind, where)
            if counts.get("completed", 0) >= runs or time.perf_counter() > deadline:
                break
            if all(c.poll() is not None for c in children):
                break
            time.sleep(0.2)
        seconds = time.perf_counter() - begin
    finally:
        for child in children:
            if kind == "postgres" and child.stdin is not None and child.poll() is None:
                with contextlib.suppress(BrokenPipeError):
                    child.stdin.write("stop\n")
                    child.stdin.flush()
            child.wait(120)
    counts = _counts(kind, where)
    refunds = len(log.read_text().splitlines()) if log.exists() else 0
    return {
        "seconds": seconds,
        "completed": counts.get("completed", 0),
        "stranded": runs - counts.get("completed", 0),
        "refunds": refunds,
        "twice": refunds - runs,
        "statuses": counts,
    }


def paused(
    kind: str,
    runs: int,
    deploy: str,
    procs_list: list[int],
    answerers: int = 1,
    limit: float = 3600,
) -> None:
    with tempfile.TemporaryDirectory(prefix="bench_paused_") as tmp:
        folder = Path(tmp)
        with paused_database(kind, runs, deploy, folder) as made:
            size = made["footprint"]
            for procs in procs_list:
                log = folder / f"refunds-{procs}.log"
                with copy_of(kind, made, folder, procs) as where:
                    got = answer_all(kind, where, runs, deploy, procs, log, answerers, limit)
                emit(
                    "paused",
                    kind,
                    runs,
                    got["seconds"],
                    deploy=deploy,
                    processes=procs,
                    answered_by="workers" if kind == "postgres" else "ainvoke",
                    **({"queueing_processes": answerers} if kind == "postgres" else {}),
                    runs_per_s=round(runs / got["seconds"], 1),
                    pause_seconds=round(made["pause_seconds"], 2),
                    bytes_per_paused_run=round(size["bytes"] / runs),
                    rows_per_paused_run=round(size["rows"] / runs, 2),
                    completed=got["completed"],
                    stranded=got["stranded"],
                    refunds=got["refunds"],
                    twice=got["twice"],
                    statuses=got["statuses"],
                )


async def _count_answers(kind: str, where: str, runs: int, deploy: str) -> dict[str, Any]:
    """Pause ``runs`` runs, then answer them one at a time with the new version, counting
    the statements each answer sends (:func:`oncegraph.testing.statements.counting`) and
    the process's CPU time it takes. PostgreSQL: ``submit(Command(resume=...))`` (the
    answer recorded and the run queued; nothing runs) and, on other threads,
    ``ainvoke(Command(resume=...))`` (the answer and the rest of the run); SQLite: the
    latter only (it has no queue)."""
    from oncegraph.testing.statements import counting

    await pause_all(kind, where, runs * 2, deploy)
    store = open_store(kind, where)
    got: dict[str, Any] = {}
    try:
        app = compiled(store, 2, deploy)
        await app.setup()
        ways = [("answered_run", "ainvoke")]
        if kind == "postgres":
            ways.insert(0, ("answer", "asubmit"))
        for at, (name, method) in enumerate(ways):
            counts, cpu = [], 0.0
            for i in range(at * runs, (at + 1) * runs):
                begin = time.process_time()
                with counting(store) as counted:
                    await getattr(app, method)(Command(resume="yes"), {"thread_id": f"refund-{i}"})
                cpu += time.process_time() - begin
                counts.append(counted.count)
            # the first answer of a process also opens its connections and reads keys
            got[f"statements_per_{name}"] = sorted(counts)[len(counts) // 2]
            got[f"statements_first_{name}"] = counts[0]
            got[f"cpu_ms_per_{name}"] = round(cpu / runs * 1000, 2)
    finally:
        await store.aclose()
    return got


def statements(kind: str, runs: int, deploy: str) -> None:
    """The ``statements`` workload: statements (and CPU) per answer (:func:`_count_answers`)."""
    with tempfile.TemporaryDirectory(prefix="bench_statements_") as tmp:
        if kind == "sqlite":
            got = asyncio.run(_count_answers(kind, str(Path(tmp) / "runs.db"), runs, deploy))
        else:
            with fresh_pg_database() as dsn:
                got = asyncio.run(_count_answers(kind, dsn, runs, deploy))
        emit("statements", kind, runs, 0.0, deploy=deploy, **got)


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def _idle_runs(path: str, runs: int) -> list[float]:
    """RSS (MB) after every tenth of ``runs`` short runs (each its own thread, approved at
    once), one app in one process."""
    store = open_store("sqlite", path)
    samples = []
    try:
        app = compiled(store, 1, "compatible")
        step = max(1, runs // 10)

        async def one(i: int) -> None:
            config = {"thread_id": f"r{i}"}
            await app.ainvoke({"messages": [], "amount": i}, config)
            await app.ainvoke(Command(resume="yes"), config)

        for start in range(0, runs, step):
            await _gather_batches(list(range(start, min(runs, start + step))), one)
            samples.append(round(_rss_mb(), 1))
    finally:
        await store.aclose()
    return samples


async def _idle_threads(path: str, threads: int) -> tuple[float, float]:
    """RSS before and after a process reads the state of ``threads`` interrupted threads."""
    await pause_all("sqlite", path, threads, "compatible")
    store = open_store("sqlite", path)
    try:
        app = compiled(store, 1, "compatible")
        before = _rss_mb()
        for i in range(threads):
            snapshot = await app.aget_state({"thread_id": f"refund-{i}"})
            assert snapshot.next == ("ask",)
        return before, _rss_mb()
    finally:
        await store.aclose()


def idle(runs: int, threads: int) -> None:
    with tempfile.TemporaryDirectory(prefix="bench_idle_") as tmp:
        begin = time.perf_counter()
        samples = asyncio.run(_idle_runs(str(Path(tmp) / "runs.db"), runs))
        seconds = time.perf_counter() - begin
        emit(
            "idle-runs",
            "sqlite",
            runs,
            seconds,
            rss_mb=samples,
            growth_mb=round(samples[-1] - samples[0], 1),
        )
        begin = time.perf_counter()
        before, after = asyncio.run(_idle_threads(str(Path(tmp) / "threads.db"), threads))
        emit(
            "idle-threads",
            "sqlite",
            threads,
            time.perf_counter() - begin,
            rss_before_mb=round(before, 1),
            rss_after_mb=round(after, 1),
        )


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_answer":
        kind, where, deploy, share = sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
        print("ready", flush=True)
        sys.stdin.readline()
        asyncio.run(_answer_share(kind, where, deploy, _share(share)))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "_queue":
        where, deploy, share = sys.argv[2], sys.argv[3], sys.argv[4]
        print("ready", flush=True)
        sys.stdin.readline()
        asyncio.run(_queue_answers(where, deploy, _share(share)))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "_work":
        asyncio.run(_work(sys.argv[2], sys.argv[3]))
        return
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workloads", default="paused,idle")
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--threads", type=int, default=10_000)
    parser.add_argument("--deploy", default="compatible,migrate")
    parser.add_argument("--procs", default="1,2,4")
    parser.add_argument(
        "--answerers", type=int, default=1, help="PostgreSQL: processes queueing the answers"
    )
    parser.add_argument(
        "--deadline",
        type=float,
        default=3600,
        help="seconds the answering of one process count may take before it is cut short",
    )
    args = parser.parse_args()
    workloads = args.workloads.split(",")
    procs = [int(p) for p in args.procs.split(",")]
    if "paused" in workloads:
        for deploy in args.deploy.split(","):
            if deploy not in ("compatible", "migrate"):
                parser.error(f"--deploy: {deploy!r}; known: compatible, migrate")
            for kind in args.stores.split(","):
                paused(kind, args.runs, deploy, procs, args.answerers, args.deadline)
    if "statements" in workloads:
        for deploy in args.deploy.split(","):
            for kind in args.stores.split(","):
                statements(kind, min(args.runs, 50), deploy)
    if "idle" in workloads:
        idle(args.runs, args.threads)


if __name__ == "__main__":
    main()
