"""oncegraph's side of the benchmark suite: one JSON line per (workload, store, N).

Workloads (``--workloads``, comma-separated):

- ``toolloop``: one run of N sequential steps; a step is one turn of a scripted model node
  (a plain node emitting an assistant message with one tool call) plus one call of a trivial
  sync ``write``-class tool through the prebuilt ``ToolNode`` and the effect ledger. The
  graph mirrors ``benchmarks/peers/langgraph_toolloop.py`` (``langgraph-toolnode``).
  Stores: ``memory``, ``sqlite`` (file, WAL, synchronous=FULL: the default) and
  ``postgres`` (a fresh database per measurement). Counts durable commits (wrapped
  ``commit``, ``begin_effect``, ``save_effect``) and rows/bytes written. Variants
  (``--variants``): ``default`` runs the sync model node and tool in worker threads (so
  timeouts are enforceable); ``inline`` marks both ``inline=True``, running them on the
  event loop thread as LangGraph's sync ``invoke`` runs its nodes.
- ``growth``: the same ReAct shape with a ~200-byte tool result, so the message list grows
  with N; time and bytes stored per step at N = 10, 100, 1000 (bytes on sqlite and
  postgres; the memory store keeps no bytes to count).
- ``resume``: a child process runs the loop on SQLite and is SIGKILLed by
  ``ONCEGRAPH_CRASH_AT=after_intent:<k>``; a fresh process times ``astream(None, config,
  stream_mode="updates")`` from the call to the first update and to completion; tool
  executions are counted in an append-only file.
- ``threads``: 1,000 short runs (one model turn + one tool call), one per thread,
  sequential and with concurrency 8 (``asyncio.gather`` + semaphore over ``ainvoke``).
- ``turns``: a chat: ``--turns`` runs (2,500: 10,000 messages) on ONE thread, each a
  user message, a model turn with one tool call, the call, and a closing model turn; the
  median µs per run of the first and of the last 200 runs (the thread's runs, checkpoints
  and messages grow all along), and the bytes stored per run over the first and the last
  25 runs (the first and the last 100 messages).
- ``workers``: the same 1,000 runs submitted to the PostgreSQL run queue (``asubmit``) and
  executed by 1, 2 and 4 ``Worker`` processes (concurrency 8 each, claiming with
  ``FOR UPDATE SKIP LOCKED`` under a lease); timed from "go" to the last run completed.
- ``latency``: submit to first step with an idle worker process: one run at a time is
  submitted (``asubmit``) and waited for; its only node stamps ``time.monotonic()`` (one
  clock for every process on the machine) when it starts. Two variants: ``notify`` (the
  worker LISTENs; the default) and ``poll`` (``listen=False``, the default
  ``poll_seconds=0.5``): the A/B of the NOTIFY wake-up.
- ``claims``: a worker's claim of one run (``RunQueue.claim``, median of 50) among 200
  queued runs, with none and with 5,000 runs of the app running under live leases (a
  fleet's): it must cost the rows it returns, not the runs before them.
- ``listing``: an operator's list of an app's newest runs (``app.aruns(limit=50)``, all,
  with ``status="failed"``, a tenth of them, and ``"needs_review"``, five) and of every
  app's (the run service of ``oncegraph runs --db`` without ``--app``: all, and failed)
  among 200,000 runs, a fifth of them three other apps' (one real run, copied in SQL;
  medians of 7), and a page ~10,000 runs back of both (``before=``): the read must cost
  the rows it returns, not the table, nor the runs before the page.

The clock covers the run only: store creation, schema setup and a 2-step warm-up run on
another thread are outside it. Every run goes through ``ainvoke`` inside ``asyncio.run``.

    python benchmarks/oncegraph_bench.py --workloads toolloop --stores memory,sqlite,postgres
    python benchmarks/oncegraph_bench.py --profile      # cProfile of the memory tool loop
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import io
import json
import os
import pstats
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

from oncegraph import END, START, StateGraph, ToolNode, __version__, add_messages
from oncegraph import tool as as_tool
from oncegraph.app import CompiledGraph
from oncegraph.runs.service import RunService
from oncegraph.storage.checkpointer import InMemoryCheckpointer, SqliteCheckpointer
from oncegraph.storage.records import RunStatus
from oncegraph.tools import ToolLimits

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
EFFECTS: list[int] = []
EFFECT_LOG = os.environ.get("BENCH_EFFECT_LOG")  # append-only file: one line per execution
PAYLOAD = "x" * 200


class Msgs(TypedDict, total=False):
    messages: Annotated[list[Any], add_messages]


BENCH_DEDUP = "benchmark: the effect is a list append, counted per run"


def record_effect(i: int) -> str:
    """Perform one side effect (a trivial function)."""
    EFFECTS.append(i)
    if EFFECT_LOG:
        with open(EFFECT_LOG, "a") as f:
            f.write(f"{i}\n")
    return f"done {i}"


def record_payload(i: int) -> str:
    """Perform one side effect and return a ~200-byte result."""
    EFFECTS.append(i)
    return f"done {i} {PAYLOAD}"


def build(n: int, tool: Callable[..., str] = record_effect, *, inline: bool = False) -> StateGraph:
    """The scripted ReAct loop: ``model`` -> ``tools`` -> ``model`` until N tool results.

    ``inline``: the model node and the tool run on the event loop thread
    (``add_node(..., inline=True)``, ``@tool(inline=True)``), as LangGraph's sync
    ``invoke`` runs them, instead of in a worker thread (the default, which makes
    timeouts enforceable).
    """
    name = tool.__name__

    def model(state: dict[str, Any]) -> dict[str, Any]:
        done = (len(state["messages"]) - 1) // 2  # user, then (assistant, tool) pairs
        if done >= n:
            return {"messages": [{"role": "assistant", "content": "finished"}]}
        call = {"id": f"call_{done}", "name": name, "args": {"i": done}}
        return {"messages": [{"role": "assistant", "content": "", "tool_calls": [call]}]}

    def route(state: dict[str, Any]) -> str:
        return "tools" if state["messages"][-1].get("tool_calls") else END

    g = StateGraph(Msgs)
    g.add_node("model", model, inline=inline)
    # no per-run cap: the loop's N tool calls are the workload (ToolLimits bounds agents)
    unlimited = ToolLimits(per_run=None)
    node = ToolNode([as_tool(tool, inline=inline, dedup=BENCH_DEDUP)], limits=unlimited)
    g.add_node("tools", node)
    g.add_edge(START, "model")
    g.add_conditional_edges("model", route, ["tools", END])
    g.add_edge("tools", "model")
    return g


def _input(n: int) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": f"do {n} things"}]}


def _config(thread_id: str, n: int) -> dict[str, Any]:
    return {"thread_id": thread_id, "recursion_limit": 2 * n + 10}


# -- stores, counters, footprint ----------------------------------------------------------


def pg_dsn() -> str:
    return os.environ.get("BENCH_PG_DSN") or os.environ.get("ONCEGRAPH_TEST_PG_DSN") or DEFAULT_DSN


@contextlib.contextmanager
def fresh_pg_database() -> Iterator[str]:
    import psycopg

    name = f"bench_oncegraph_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_dsn(), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        parts = urllib.parse.urlsplit(pg_dsn())
        yield urllib.parse.urlunsplit(parts._replace(path="/" + name))
    finally:
        with psycopg.connect(pg_dsn(), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.asynccontextmanager
async def open_store(kind: str) -> AsyncIterator[tuple[Any, Callable[[], dict[str, int]]]]:
    """A fresh store and a function measuring (rows, bytes) stored."""
    if kind == "memory":
        store: Any = InMemoryCheckpointer()
        yield store, lambda: {"rows": 0, "bytes": 0}
    elif kind == "sqlite":
        with tempfile.TemporaryDirectory(prefix="bench_oncegraph_") as folder:
            path = Path(folder) / "bench.sqlite"
            store = SqliteCheckpointer(path)
            try:
                yield store, lambda: sqlite_footprint(path)
            finally:
                await store.aclose()
    else:
        from oncegraph.storage.checkpointer import PgCheckpointer

        with fresh_pg_database() as dsn:
            store = PgCheckpointer(postgres_dsn=dsn)
            try:
                yield store, lambda: pg_footprint(dsn)
            finally:
                await store.aclose()


def sqlite_footprint(path: Path) -> dict[str, int]:
    """Rows and summed length of every column of every oncegraph table."""
    conn = sqlite3.connect(path)
    try:
        rows = size = 0
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type='table' AND name LIKE 'oncegraph_%'"
                " AND name != 'oncegraph_schema'"
            )
        ]
        for table in tables:
            cols = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
            expr = " + ".join(f"coalesce(length({c}), 0)" for c in cols) or "0"
            count, total = conn.execute(f"SELECT count(*), sum({expr}) FROM {table}").fetchone()
            rows += count
            size += total or 0
        return {"rows": rows, "bytes": size}
    finally:
        conn.close()


def pg_footprint(dsn: str) -> dict[str, int]:
    """Rows and summed ``pg_column_size`` of every row of every oncegraph table."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE tablename LIKE 'oncegraph%%'"
                " AND tablename != 'oncegraph_schema'"
            )
        ]
        rows = size = 0
        for table in tables:
            row = conn.execute(
                f"SELECT count(*), coalesce(sum(pg_column_size(t.*)), 0) FROM {table} t"
            ).fetchone()
            assert row is not None
            rows += int(row[0])
            size += int(row[1])
        return {"rows": rows, "bytes": size}


class Counters:
    """Wraps a store's durable-write methods with counters (instance attributes)."""

    def __init__(self, store: Any) -> None:
        self.counts = {"commit": 0, "begin_effect": 0, "save_effect": 0}
        for name in self.counts:
            setattr(store, name, self._wrap(name, getattr(store, name)))

    def _wrap(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.counts[name] += 1
            return await method(*args, **kwargs)

        return counted

    def snapshot(self) -> dict[str, int]:
        return dict(self.counts)

    def total(self) -> int:
        return sum(self.counts.values())


def emit(workload: str, store: str, n: int, seconds: float, **extra: Any) -> None:
    line = {
        "peer": "oncegraph",
        "workload": workload,
        "store": store,
        "n": n,
        "seconds": round(seconds, 6),
        "us_per_step": round(seconds / n * 1e6, 1),
        "steps_per_s": round(n / seconds, 1),
        "version": f"oncegraph {__version__}",
        **extra,
    }
    print(json.dumps(line), flush=True)


# -- workloads -----------------------------------------------------------------------------


async def _warm(store: Any) -> None:
    await build(2).compile(checkpointer=store).ainvoke(_input(2), _config("warmup", 2))


async def loop_once(workload: str, kind: str, n: int, variant: str = "default") -> None:
    tool = record_payload if workload == "growth" else record_effect
    async with open_store(kind) as (store, footprint):
        await _warm(store)
        app = build(n, tool, inline=variant == "inline").compile(checkpointer=store)
        counters = Counters(store)
        before = footprint()
        start_effects = len(EFFECTS)
        start = time.perf_counter()
        await app.ainvoke(_input(n), _config(uuid.uuid4().hex, n))
        seconds = time.perf_counter() - start
        assert len(EFFECTS) - start_effects == n, "every step must perform exactly one effect"
        after = footprint()
    rows = after["rows"] - before["rows"]
    size = after["bytes"] - before["bytes"]
    emit(
        workload,
        kind,
        n,
        seconds,
        variant=variant,
        commits=counters.snapshot(),
        commits_per_step=round(counters.total() / n, 3),
        rows_per_step=round(rows / n, 2),
        bytes_per_step=round(size / n, 1),
    )


def resume(n: int, k: int) -> None:
    """Crash a child at the k-th intent, then time the resume in a fresh process."""
    with tempfile.TemporaryDirectory(prefix="bench_resume_") as folder:
        db, log = Path(folder) / "resume.sqlite", Path(folder) / "effects.log"
        env = {**os.environ, "BENCH_EFFECT_LOG": str(log)}
        me = [sys.executable, __file__]
        crash = subprocess.run(
            [*me, "_resume-child", str(db), str(n)],
            env={**env, "ONCEGRAPH_CRASH_AT": f"after_intent:{k}"},
            capture_output=True,
            text=True,
        )
        before = len(log.read_text().splitlines()) if log.exists() else 0
        out = subprocess.run(
            [*me, "_resume-measure", str(db), str(n)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        result = json.loads(out.stdout.strip().splitlines()[-1])
        executions = log.read_text().splitlines()
    emit(
        "resume",
        "sqlite",
        n,
        result["total_s"],
        crash_at=f"after_intent:{k}",
        child_returncode=crash.returncode,
        executions_before_crash=before,
        first_update_ms=round(result["first_s"] * 1e3, 2),
        first_update_node=result["first_node"],
        total_ms=round(result["total_s"] * 1e3, 2),
        tool_executions=len(executions),
        steps_redone=len(executions) - n,
        unique_steps=len(set(executions)),
    )


async def _resume_child(db: str, n: int) -> None:
    store = SqliteCheckpointer(db)
    await build(n).compile(checkpointer=store).ainvoke(_input(n), _config("resume", n))


async def _resume_measure(db: str, n: int) -> None:
    store = SqliteCheckpointer(db)
    app = build(n).compile(checkpointer=store)
    first: tuple[float, str] | None = None
    start = time.perf_counter()
    async for update in app.astream(None, _config("resume", n), stream_mode="updates"):
        if first is None:
            first = (time.perf_counter() - start, next(iter(update)))
    total = time.perf_counter() - start
    await store.aclose()
    assert first is not None
    print(json.dumps({"first_s": first[0], "first_node": first[1], "total_s": total}))


async def threads_once(kind: str, runs: int, concurrency: int) -> None:
    async with open_store(kind) as (store, _):
        await _warm(store)
        app: CompiledGraph = build(1).compile(checkpointer=store)
        counters = Counters(store)
        sem = asyncio.Semaphore(concurrency)
        start_effects = len(EFFECTS)

        async def one(i: int) -> None:
            async with sem:
                await app.ainvoke(_input(1), _config(f"t{i}", 1))

        start = time.perf_counter()
        if concurrency == 1:
            for i in range(runs):
                await app.ainvoke(_input(1), _config(f"t{i}", 1))
        else:
            await asyncio.gather(*(one(i) for i in range(runs)))
        seconds = time.perf_counter() - start
        assert len(EFFECTS) - start_effects == runs
    emit(
        "threads",
        kind,
        runs,
        seconds,
        concurrency=concurrency,
        runs_per_s=round(runs / seconds, 1),
        commits_per_run=round(counters.total() / runs, 3),
    )


def turn_graph() -> StateGraph:
    """One chat turn per run: the user's message, a model turn calling the tool once, the
    call, and a closing model turn."""

    def model(state: dict[str, Any]) -> dict[str, Any]:
        messages = state["messages"]
        if messages[-1].get("role") == "tool":
            return {"messages": [{"role": "assistant", "content": "done"}]}
        call = {"id": f"call_{len(messages)}", "name": "record_effect", "args": {"i": 0}}
        return {"messages": [{"role": "assistant", "content": "", "tool_calls": [call]}]}

    def route(state: dict[str, Any]) -> str:
        return "tools" if state["messages"][-1].get("tool_calls") else END

    g = StateGraph(Msgs)
    g.add_node("model", model)
    node = ToolNode([as_tool(record_effect, dedup=BENCH_DEDUP)], limits=ToolLimits(per_run=None))
    g.add_node("tools", node)
    g.add_edge(START, "model")
    g.add_conditional_edges("model", route, ["tools", END])
    g.add_edge("tools", "model")
    return g


async def turns_once(kind: str, runs: int, window: int = 200, edge: int = 25) -> None:
    """``runs`` runs on one thread; the median µs per run of the first and of the last
    ``window`` runs, and the bytes stored per run over the first and the last ``edge`` runs
    (25 runs: the thread's first and last 100 messages)."""
    async with open_store(kind) as (store, footprint):
        await _warm(store)
        app: CompiledGraph = turn_graph().compile(checkpointer=store)
        times: list[float] = []
        start_effects = len(EFFECTS)
        marks: dict[int, int] = {}  # runs done -> bytes stored (outside the per-run clock)
        begin = time.perf_counter()
        for i in range(runs):
            if i in (0, edge, runs - edge):
                marks[i] = footprint()["bytes"]
            start = time.perf_counter()
            await app.ainvoke(
                {"messages": [{"role": "user", "content": f"turn {i}"}]}, {"thread_id": "chat"}
            )
            times.append(time.perf_counter() - start)
        seconds = time.perf_counter() - begin
        marks[runs] = footprint()["bytes"]
        assert len(EFFECTS) - start_effects == runs
        messages = len((await app.aget_state({"thread_id": "chat"})).values["messages"])
        reads = await _chat_reads(app)
    # medians: a window is a fraction of a second, and one stall of this machine would
    # decide its mean
    first, last = statistics.median(times[:window]), statistics.median(times[-window:])
    emit(
        "turns",
        kind,
        runs,
        seconds,
        window=window,
        first_us_per_run=round(first * 1e6, 1),  # medians of the windows
        last_us_per_run=round(last * 1e6, 1),
        messages=messages,
        **reads,
        **_edge_bytes(marks, runs, edge),
    )


def _edge_bytes(marks: dict[int, int], runs: int, edge: int) -> dict[str, float]:
    """Bytes stored per run over the first and the last ``edge`` runs (the memory store
    keeps no bytes to count: nothing)."""
    first = (marks[edge] - marks[0]) / edge
    last = (marks[runs] - marks[runs - edge]) / edge
    if not first:
        return {}
    return {
        "edge_runs": edge,
        "first_bytes_per_run": round(first),
        "last_bytes_per_run": round(last),
    }


async def _chat_reads(app: CompiledGraph, rounds: int = 7) -> dict[str, float]:
    """What reading the long thread costs, ms (medians): its state, and a page of ten
    snapshots of its history (each folds the thread's messages; all are masked)."""
    config = {"configurable": {"thread_id": "chat"}}

    async def page() -> None:
        async for _ in app.aget_state_history(config, limit=10):
            pass

    out = {}
    for name, read in (("get_state_ms", lambda: app.aget_state(config)), ("history10_ms", page)):
        times = []
        for _ in range(rounds):
            start = time.perf_counter()
            await read()
            times.append(time.perf_counter() - start)
        out[name] = round(statistics.median(times) * 1e3, 2)
    return out


_COPIES = {  # one real run copied ``n`` times (new ids, later times; a tenth failed)
    "sqlite": (
        "WITH RECURSIVE g(value) AS (SELECT 1 UNION ALL SELECT value + 1 FROM g "
        "WHERE value < {n}) INSERT INTO oncegraph_runs ({cols}) SELECT {exprs} FROM "
        "oncegraph_runs, g"
    ),
    "postgres": (
        "INSERT INTO oncegraph_runs ({cols}) SELECT {exprs} FROM oncegraph_runs, "
        "generate_series(1, {n}) AS g(value)"
    ),
}


async def listing_once(kind: str, runs: int, limit: int = 50) -> None:
    """``app.aruns(limit=...)`` among ``runs`` runs of one app (see the docstring)."""
    async with open_store(kind) as (store, _):
        app: CompiledGraph = build(1).compile(checkpointer=store)
        await app.ainvoke(_input(1), _config("listed", 1))
        new = {
            "run_id": "'run_copy_' || g.value",
            "thread_id": "'thread_copy_' || g.value",
            "status": (  # a tenth failed, five waiting for review
                "CASE WHEN g.value % 10 = 0 THEN 'failed' "
                f"WHEN g.value % {runs // 5} = 7 THEN 'needs_review' ELSE 'completed' END"
            ),
            "created_at": "created_at + g.value",
            "updated_at": "updated_at + g.value",
            # a fifth are three other apps' (an operator's database holds several apps)
            "app_id": "CASE WHEN g.value % 5 = 1 THEN 'other_' || (g.value % 3) ELSE app_id END",
        }
        if kind == "sqlite":
            conn = sqlite3.connect(store.path)
            cols = [r[1] for r in conn.execute("PRAGMA table_info(oncegraph_runs)")]
        else:
            import psycopg

            conn = psycopg.connect(store._dsn, autocommit=True)
            cols = [
                r[0]
                for r in conn.execute(
                    "SELECT column_name FROM information_schema.columns "
                    "WHERE table_name = 'oncegraph_runs' ORDER BY ordinal_position"
                ).fetchall()
            ]
        try:
            exprs = ", ".join(new.get(c, c) for c in cols)
            conn.execute(_COPIES[kind].format(n=runs - 1, cols=", ".join(cols), exprs=exprs))
            conn.execute("ANALYZE" if kind == "sqlite" else "ANALYZE oncegraph_runs")
            conn.commit()
        finally:
            conn.close()
        everyone = RunService(None, store)  # `oncegraph runs --db ...` without --app
        deep = f"run_copy_{runs - 10_000}"  # a page ~10,000 runs back: before= goes on there
        reads = {
            "all": lambda: app.aruns(limit=limit),
            "failed": lambda: app.aruns(limit=limit, status="failed"),
            "review": lambda: app.aruns(limit=limit, status="needs_review"),
            "every_app": lambda: everyone.runs(limit=limit),
            "every_app_failed": lambda: everyone.runs(limit=limit, statuses=[RunStatus.FAILED]),
            "deep": lambda: app.aruns(limit=limit, before=deep),
            "every_app_deep": lambda: everyone.runs(limit=limit, before=deep),
        }
        out: dict[str, float] = {}
        for name, read in reads.items():
            times = []
            for _ in range(7):
                start = time.perf_counter()
                found = await read()
                times.append(time.perf_counter() - start)
            assert len(found) == (5 if name == "review" else limit), (name, len(found))
            out[f"{name}_ms"] = round(statistics.median(times) * 1e3, 2)
    emit("listing", kind, runs, out["all_ms"] / 1e3, limit=limit, **out)


async def claims_once(running: int, queued: int = 200, claims: int = 50) -> None:
    """The median time of a claim of one run with ``running`` runs held (see the docstring)."""
    from oncegraph.storage.checkpointer import PgCheckpointer
    from oncegraph.worker.queue import Runnable, RunQueue

    with fresh_pg_database() as dsn:
        store = PgCheckpointer(postgres_dsn=dsn)
        try:
            app = build(1).compile(checkpointer=store)
            await app.setup()
            for i in range(running + queued):
                await app.asubmit(_input(1), _config(f"t{i}", 1))
            queue = RunQueue(store, Runnable.of(app.service))
            held = await queue.claim("fleet", 600, running) if running else []
            assert len(held) == running
            times = []
            for _ in range(claims):
                start = time.perf_counter()
                got = await queue.claim("bench", 600, 1)
                times.append(time.perf_counter() - start)
                assert len(got) == 1
        finally:
            await store.aclose()
    median = statistics.median(times)
    emit("claims", "postgres", claims, median * claims, running=running, claim_ms=median * 1e3)


def workers(procs: int, runs: int, concurrency: int) -> None:
    """``runs`` short runs queued in PostgreSQL, executed by ``procs`` worker processes.

    The runs are submitted first (timed apart); each worker process then builds its app,
    opens its pool (one connection per concurrent run) and says ``ready``; the clock starts
    when every worker is told to go and stops when the database shows every run
    ``completed`` (polled every 20 ms).
    """
    import psycopg

    with (
        fresh_pg_database() as dsn,
        tempfile.TemporaryDirectory(prefix="bench_workers_") as folder,
    ):
        log = Path(folder) / "effects.log"
        submit_s = asyncio.run(_submit(dsn, runs))
        env = {**os.environ, "BENCH_EFFECT_LOG": str(log)}
        children = [
            subprocess.Popen(
                [sys.executable, __file__, "_worker-child", dsn, str(concurrency)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=env,
            )
            for _ in range(procs)
        ]
        try:
            for child in children:
                assert child.stdout is not None
                if child.stdout.readline().strip() != "ready":
                    raise RuntimeError(f"worker process {child.pid} did not start")
            with psycopg.connect(dsn, autocommit=True) as conn:
                start = time.perf_counter()
                for child in children:
                    assert child.stdin is not None
                    child.stdin.write("go\n")
                    child.stdin.flush()
                done = 0
                while done < runs:
                    if time.perf_counter() - start > 600:
                        raise RuntimeError(f"only {done} of {runs} runs completed in 600 s")
                    time.sleep(0.02)  # each poll is a query: keep the server's share small
                    row = conn.execute(
                        "SELECT count(*) FROM oncegraph_runs WHERE status = 'completed'"
                    ).fetchone()
                    done = int(row[0]) if row else 0
                seconds = time.perf_counter() - start
        finally:
            for child in children:
                child.terminate()
            for child in children:
                child.wait(60)
        executions = log.read_text().splitlines()
    emit(
        "workers",
        "postgres",
        runs,
        seconds,
        processes=procs,
        concurrency=concurrency,
        runs_per_s=round(runs / seconds, 1),
        submit_us_per_run=round(submit_s / runs * 1e6, 1),
        tool_executions=len(executions),
    )


async def _submit(dsn: str, runs: int) -> float:
    from oncegraph.storage.checkpointer import PgCheckpointer

    store = PgCheckpointer(postgres_dsn=dsn)
    try:
        app = build(1).compile(checkpointer=store)
        await app.setup()
        start = time.perf_counter()
        for i in range(runs):
            await app.asubmit(_input(1), _config(f"t{i}", 1))
        return time.perf_counter() - start
    finally:
        await store.aclose()


async def _worker_child(dsn: str, concurrency: int) -> None:
    import signal

    from oncegraph.storage.checkpointer import PgCheckpointer
    from oncegraph.worker import Worker

    # the pool opens its connections before 'ready', outside the clock
    store = PgCheckpointer(postgres_dsn=dsn, min_size=concurrency, max_size=concurrency + 2)
    try:
        app = build(1).compile(checkpointer=store)
        await app.setup()
        worker = Worker(app, concurrency=concurrency, poll_seconds=0.05)
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, worker.stop)
        print("ready", flush=True)
        await loop.run_in_executor(None, sys.stdin.readline)
        await worker.run_forever()
    finally:
        await store.aclose()


class Stamp(TypedDict, total=False):
    i: int
    t: float


def _stamp(state: Stamp) -> dict[str, Any]:
    return {"t": time.monotonic()}


def stamp_graph() -> StateGraph:
    g = StateGraph(Stamp)
    g.add_node("stamp", _stamp, inline=True)  # no thread hand-off before the stamp
    g.add_edge(START, "stamp")
    g.add_edge("stamp", END)
    return g


def latency(runs: int, variant: str) -> None:
    """Submit-to-first-step latency with one idle worker process (see the docstring)."""
    with fresh_pg_database() as dsn:
        child = subprocess.Popen(
            [sys.executable, __file__, "_latency-child", dsn, "1" if variant == "notify" else "0"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert child.stdout is not None
            if child.stdout.readline().strip() != "ready":
                raise RuntimeError(f"worker process {child.pid} did not start")
            waits = asyncio.run(_latency_submit(dsn, runs))
        finally:
            child.terminate()
            child.wait(60)
    waits.sort()
    ms = [w * 1e3 for w in waits]
    emit(
        "latency",
        "postgres",
        runs,
        sum(waits),
        variant=variant,
        median_ms=round(ms[len(ms) // 2], 2),
        p99_ms=round(ms[min(len(ms) - 1, int(len(ms) * 0.99))], 2),
        max_ms=round(ms[-1], 2),
    )


async def _latency_submit(dsn: str, runs: int) -> list[float]:
    from oncegraph.storage.checkpointer import PgCheckpointer

    store = PgCheckpointer(postgres_dsn=dsn)
    try:
        app = stamp_graph().compile(checkpointer=store)
        await app.setup()
        waits = []
        for i in range(runs + 5):  # 5 warm-up runs, not counted
            await asyncio.sleep(0.02)  # the worker is idle again, waiting
            start = time.monotonic()
            handle = await app.asubmit({"i": i}, {"thread_id": f"t{i}"})
            out = await handle.aresult(60)
            if i >= 5:
                waits.append(out["t"] - start)
        return waits
    finally:
        await store.aclose()


async def _latency_child(dsn: str, listen: int) -> None:
    import signal

    from oncegraph.storage.checkpointer import PgCheckpointer
    from oncegraph.worker import Worker

    store = PgCheckpointer(postgres_dsn=dsn)
    try:
        app = stamp_graph().compile(checkpointer=store)
        await app.setup()
        worker = Worker(app, concurrency=8, listen=bool(listen))
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, worker.stop)
        serving = asyncio.create_task(worker.run_forever())
        if listen:
            await worker.listening.wait()
        print("ready", flush=True)
        await serving
    finally:
        await store.aclose()


def profile(n: int) -> None:
    async def go() -> None:
        store = InMemoryCheckpointer()
        await _warm(store)
        app = build(n).compile(checkpointer=store)
        await app.ainvoke(_input(n), _config("profiled", n))

    prof = cProfile.Profile()
    prof.enable()
    asyncio.run(go())
    prof.disable()
    for key in ("tottime", "cumulative"):
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats(key).print_stats(25)
        print(buf.getvalue())


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1].startswith("_"):
        children = {
            "_resume-child": _resume_child,
            "_resume-measure": _resume_measure,
            "_worker-child": _worker_child,
            "_latency-child": _latency_child,
        }
        asyncio.run(children[sys.argv[1]](sys.argv[2], int(sys.argv[3])))
        return
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--workloads",
        default="toolloop,growth,resume,threads,turns,workers,latency,listing,claims",
    )
    parser.add_argument("--listed", type=int, default=200_000, help="runs in listing")
    parser.add_argument("--latency-runs", type=int, default=200, help="runs in latency")
    parser.add_argument("--stores", default="memory,sqlite,postgres")
    parser.add_argument("--n", default="10,200,1000", help="tool-loop steps per run")
    parser.add_argument("--growth-n", default="10,100,1000")
    parser.add_argument("--threads", type=int, default=1000, help="runs in the threads workload")
    parser.add_argument(
        "--turns", type=int, default=2500, help="runs on one thread in turns (4 messages each)"
    )
    parser.add_argument(
        "--concurrency", default="1,8,64", help="concurrent runs in the threads workload"
    )
    parser.add_argument(
        "--processes", default="1,2,4", help="worker processes in the workers workload"
    )
    parser.add_argument(
        "--variants",
        default="default,inline",
        help="tool-loop variants: default (sync callables in worker threads), inline",
    )
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    if args.profile:
        profile(1000)
        return
    stores = [s for s in args.stores.split(",") if s]
    durable = [s for s in stores if s != "memory"]
    workloads = args.workloads.split(",")
    if "toolloop" in workloads:
        for kind in stores:
            for n in map(int, args.n.split(",")):
                for variant in args.variants.split(","):
                    asyncio.run(loop_once("toolloop", kind, n, variant))
    if "growth" in workloads:
        for kind in stores:
            for n in map(int, args.growth_n.split(",")):
                asyncio.run(loop_once("growth", kind, n))
    if "resume" in workloads:
        for n, k in ((200, 100), (1000, 500)):
            resume(n, k)
    if "threads" in workloads:
        for kind in durable:
            for conc in map(int, args.concurrency.split(",")):
                asyncio.run(threads_once(kind, args.threads, conc))
    if "turns" in workloads:
        for kind in stores:
            asyncio.run(turns_once(kind, args.turns))
    if "workers" in workloads and "postgres" in stores:
        for procs in map(int, args.processes.split(",")):
            workers(procs, args.threads, 8)
    if "latency" in workloads and "postgres" in stores:
        for variant in ("notify", "poll"):
            latency(args.latency_runs, variant)
    if "listing" in workloads:
        for kind in durable:
            asyncio.run(listing_once(kind, args.listed))
    if "claims" in workloads and "postgres" in stores:
        for running in (0, 5000):
            asyncio.run(claims_once(running))


if __name__ == "__main__":
    main()
