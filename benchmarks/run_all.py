"""Run the whole benchmark suite and write ``benchmarks/results/<date>.jsonl`` + ``latest.md``.

Runs the floor, oncegraph (all workloads) and the peers' tool loop, each peer with its own
virtualenv python (``benchmarks/.venvs/<peer>``, made by ``benchmarks/peers/setup_venvs.sh``),
then prints a markdown table with ratios: oncegraph vs LangGraph ToolNode, vs 10xGraph, vs
the floor (per-step cost / (durable commits per step x the floor's mean commit)).

    python benchmarks/run_all.py             # about 10 minutes on 2 quiet cores
    python benchmarks/run_all.py --quick     # the floor and the N = 200 rounds only
    python benchmarks/run_all.py results/<file>.jsonl   # re-render a results file

10xGraph runs at N = 10 and 200 only, each capped by BENCH_TENXGRAPH_CAP_SECONDS (20 here),
because its cost per step grows with N.

The budget's N = 200 comparison is measured in ``--rounds`` (``BENCH_ROUNDS``, default 5)
interleaved rounds: each round runs oncegraph, LangGraph's two graphs and DBOS back to
back, so a burst of load on this shared machine hits every framework alike. The table shows
each framework's median over the rounds, and each ratio is the median of the per-round
ratios (with its range). The many-threads workload runs in ``BENCH_THREAD_ROUNDS`` (3)
rounds and the worker processes in ``BENCH_WORKER_ROUNDS`` (3): their verdicts stand on
medians too, not on one run each. Rows are appended to the .jsonl as each process ends, so a run cut
short keeps what it measured.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PEERS = HERE / "peers"
VENVS = HERE / ".venvs"
RESULTS = HERE / "results"
NS = ["10", "200", "1000"]
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))
ROUND_N = 200
WORKER_ROUNDS = int(os.environ.get("BENCH_WORKER_ROUNDS", "3"))
# The many-threads workload: a round measures every concurrency of both stores back to
# back, so a round's concurrency 64 / concurrency 1 ratio compares runs seconds apart.
THREAD_ROUNDS = int(os.environ.get("BENCH_THREAD_ROUNDS", "3"))


def sh(cmd: str) -> str:
    out = subprocess.run(cmd, shell=True, capture_output=True, text=True)
    return out.stdout.strip()


def machine() -> dict[str, Any]:
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": os.cpu_count(),
        "memory": sh("free -h | awk '/Mem:/ {print $2}'"),
        "disk": sh("lsblk -d -o NAME,ROTA,TYPE,MODEL 2>/dev/null | sed -n '2,4p' | tr -s ' '")
        or "unknown",
        "load_before": sh("cat /proc/loadavg"),
        "python": platform.python_version(),
        "kernel": platform.release(),
        # the code measured: the commit, "+dirty" when the work tree had changes
        "commit": sh(
            f"cd {HERE.parent} && git rev-parse --short HEAD 2>/dev/null && "
            "(git diff --quiet HEAD -- src benchmarks 2>/dev/null || echo +dirty)"
        ).replace("\n", ""),
    }


def run(label: str, argv: list[str], env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    if not Path(argv[0]).exists():  # a peer whose venv was not made: say so, go on
        print(
            f"# {label} skipped: {argv[0]} does not exist "
            f"(bash benchmarks/peers/setup_venvs.sh {label})",
            file=sys.stderr,
            flush=True,
        )
        return []
    print(f"# {label}: {' '.join(argv)}", file=sys.stderr, flush=True)
    out = subprocess.run(
        argv, capture_output=True, text=True, env={**os.environ, **(env or {})}, cwd=HERE.parent
    )
    if out.returncode != 0:
        print(f"# {label} failed ({out.returncode}):\n{out.stderr[-3000:]}", file=sys.stderr)
    lines = [json.loads(x) for x in out.stdout.splitlines() if x.startswith("{")]
    for line in lines:
        line.setdefault("workload", "toolloop")
        line["source"] = label
    return lines


def collect(rounds: int, quick: bool, sink: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Run everything (or, ``quick``, the floor and the N = 200 rounds only); every result
    row goes to ``sink`` as soon as its process ends, so a cut-short run keeps its rows."""
    info = {**machine(), "rounds": rounds}
    sink({"machine": info})
    py = {p: str(VENVS / p / "bin" / "python") for p in ("langgraph", "dbos", "tenxgraph")}
    og = [sys.executable, str(HERE / "oncegraph_bench.py")]
    once = [n for n in NS if int(n) != ROUND_N]
    results: list[dict[str, Any]] = []

    def keep(rows: list[dict[str, Any]], **extra: Any) -> None:
        for row in rows:
            row = {**row, **extra}
            results.append(row)
            sink(row)

    keep(
        run("floor", [py["langgraph"], str(PEERS / "floor.py"), *([str(ROUND_N)] if quick else NS)])
    )
    for r in range(rounds):  # N = 200, interleaved
        n = str(ROUND_N)
        durable = ("--stores", "sqlite,postgres")
        keep(run("oncegraph", [*og, "--workloads", "toolloop", *durable, "--n", n]), round=r)
        keep(run("langgraph", [py["langgraph"], str(PEERS / "langgraph_toolloop.py"), n]), round=r)
        keep(run("dbos", [py["dbos"], str(PEERS / "dbos_toolloop.py"), n]), round=r)
    if not quick:
        memory = ("--workloads", "toolloop,growth", "--stores", "memory")
        keep(run("oncegraph", [*og, *memory]))
        # threads, workers: in rounds, below
        rest = "toolloop,growth,turns,resume,latency,listing,claims"
        stores = ("--stores", "sqlite,postgres")
        keep(run("oncegraph", [*og, "--workloads", rest, *stores, "--n", ",".join(once)]))
        for r in range(THREAD_ROUNDS):
            keep(run("oncegraph", [*og, "--workloads", "threads", *stores]), round=r)
        # worker processes: a few seconds each and noisy, so WORKER_ROUNDS rounds of 1, 2, 4
        # processes back to back; the table shows every round and the verdict the medians
        for r in range(WORKER_ROUNDS):
            keep(run("oncegraph", [*og, "--workloads", "workers", "--stores", "postgres"]), round=r)
        # the HTTP path: oncegraph serve with 1 and 2 processes, runs and reads under writes
        http = [sys.executable, str(HERE / "http_bench.py"), "--stores", "sqlite,postgres"]
        keep(run("oncegraph", [*http, "--runs", str(HTTP_RUNS), "--workers", "1,2"]))
        keep(run("langgraph", [py["langgraph"], str(PEERS / "langgraph_toolloop.py"), *once]))
        keep(run("dbos", [py["dbos"], str(PEERS / "dbos_toolloop.py"), *once]))
        # the many-threads workload, same runs and concurrencies as oncegraph's `threads`
        keep(run("langgraph", [py["langgraph"], str(PEERS / "langgraph_threads.py")]))
        keep(run("dbos", [py["dbos"], str(PEERS / "dbos_threads.py")]))
        keep(
            run(
                "tenxgraph",
                [py["tenxgraph"], str(PEERS / "tenxgraph_toolloop.py"), "10", "200"],
                env={"BENCH_TENXGRAPH_CAP_SECONDS": "20"},
            )
        )
    info["load_after"] = sh("cat /proc/loadavg")
    return info, results


HTTP_RUNS = int(os.environ.get("BENCH_HTTP_RUNS", "500"))


def _find(rows: list[dict[str, Any]], **keys: Any) -> dict[str, Any] | None:
    """The row matching ``keys``; over several rounds, the median round's row."""
    found = [r for r in rows if all(r.get(k) == v for k, v in keys.items())]
    if not found:
        return None
    found.sort(key=lambda r: r["us_per_step"])
    return {**found[(len(found) - 1) // 2], "rounds": len(found)}


# The budget at N = ROUND_N, on equal work only: speed-up over LangGraph's ToolNode graph
# (the same graph) and over DBOS recording what an agent on DBOS records (a model-turn step
# and a tool step per iteration, peer "dbos-agent"). DBOS's one-step loop ("dbos") records
# no model turn: it is shown as a lower bound, with no target. ``floor_x``: how far a step
# may be from (its durable commits x one commit at the floor).
TOOLLOOP_TARGETS = {
    "sqlite": {"langgraph": 5.0, "dbos_agent": 2.0, "floor_x": 3.0},
    "postgres": {"langgraph": 5.0, "dbos_agent": 2.0, "floor_x": 2.0},
}


def _toolloop_verdicts(
    rows: list[dict[str, Any]],
    store: str,
    n: int,
    me: dict[str, Any],
    fast: dict[str, Any] | None,
    speedups: dict[str, tuple[float, float, float] | None],
    floor_us: float | None,
) -> list[str]:
    """The tool loop's budget lines: the speed-ups over LangGraph and DBOS, commits per
    step and the distance to the floor, and the performance budget's µs per step. Each target also
    shows the step time it asks for next to what two commits at the floor cost alone."""
    out: list[str] = []
    targets = TOOLLOOP_TARGETS[store]
    lg = _find(rows, peer="langgraph-toolnode", store=store, n=n)
    two = f"; 2 commits at the floor: {2 * floor_us:,.0f} µs" if floor_us else ""
    ratio = speedups.get("default")
    if ratio is not None:
        target = targets["langgraph"]
        ok = "MET" if ratio[0] >= target else "NOT MET"
        asks = f"; asks <= {lg['us_per_step'] / target:,.0f} µs/step{two}" if lg else ""
        out.append(
            f"- {store}, N={n}: >= {target:g}x faster than LangGraph ToolNode, the same graph "
            f"(default): {ok} ({_ratio(ratio)}{asks})"
        )
    key = {
        "peer": "oncegraph",
        "workload": "toolloop",
        "store": store,
        "n": n,
        "variant": "default",
    }
    for peer, target, words in (
        ("dbos-agent", targets["dbos_agent"], "DBOS recording a model step + a tool step"),
        ("dbos", None, "DBOS's one-step loop (a lower bound: no model turn recorded)"),
    ):
        them = _find(rows, peer=peer, store=store, n=n)
        ratio = _round_ratio(rows, key, peer=peer, store=store, n=n)
        if ratio is None and them:
            one = them["us_per_step"] / me["us_per_step"]
            ratio = (one, one, one)
        if ratio is None:
            continue
        if target is None:
            out.append(f"- {store}, N={n}: vs {words}: no target ({_ratio(ratio)})")
            continue
        ok = "MET" if ratio[0] >= target else "NOT MET"
        asks = f"; asks <= {them['us_per_step'] / target:,.0f} µs/step{two}" if them else ""
        out.append(
            f"- {store}, N={n}: >= {target:g}x faster than {words}: {ok} ({_ratio(ratio)}{asks})"
        )
    commits = me["commits_per_step"]
    ok = "MET" if commits <= 2.05 else "NOT MET"
    out.append(f"- {store}, N={n}: 2.0 commits per step (write tools): {ok} ({commits})")
    if floor_us:
        floor_x = me["us_per_step"] / (commits * floor_us)
        limit = targets["floor_x"]
        ok = "MET" if floor_x <= limit else "NOT MET"
        out.append(
            f"- {store}, N={n}: within {limit:g}x of commits x floor (default): {ok} "
            f"({floor_x:.1f}x; the rest is the framework's own work per step: see "
            "'Where the time goes')"
        )
    return out


def _round_ratio(
    rows: list[dict[str, Any]], mine: dict[str, Any], **peer: Any
) -> tuple[float, float, float] | None:
    """Median, min and max over rounds of (peer's time / oncegraph's time) in that round."""
    ratios = []
    for r in {x["round"] for x in rows if "round" in x}:
        me = _find(rows, **mine, round=r)
        them = _find(rows, **peer, round=r)
        if me and them:
            ratios.append(them["us_per_step"] / me["us_per_step"])
    if not ratios:
        return None
    ratios.sort()
    return ratios[(len(ratios) - 1) // 2], ratios[0], ratios[-1]


def _x(a: float | None, b: float | None) -> str:
    return f"{a / b:.1f}x" if a and b else "-"


def _ratio(r: tuple[float, float, float] | None) -> str:
    if r is None:
        return "-"
    mid, low, high = r
    return f"{mid:.1f}x" if low == high else f"{mid:.1f}x ({low:.1f}-{high:.1f})"


STORE_ORDER = ("memory", "sqlite", "postgres")


def _store_then_conc(cell: tuple[str, int]) -> tuple[int, int]:
    return (STORE_ORDER.index(cell[0]) if cell[0] in STORE_ORDER else 99, cell[1])


def _median_by(rows: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """The median row by ``key`` (the lower middle of an even count)."""
    ordered = sorted(rows, key=lambda r: r[key])
    return ordered[(len(ordered) - 1) // 2]


def _each_round(rows: list[dict[str, Any]]) -> str:
    """Each round's runs/s, in round order (a run from before rounds: one figure)."""
    return " / ".join(
        f"{r['runs_per_s']:,.0f}" for r in sorted(rows, key=lambda r: r.get("round", 0))
    )


def _at(rows: list[dict[str, Any]], store: str, concurrency: int) -> list[dict[str, Any]]:
    return [r for r in rows if r["store"] == store and r["concurrency"] == concurrency]


def _round_ratios(threads: list[dict[str, Any]], store: str) -> list[float]:
    """Per round: concurrency 64's runs/s over concurrency 1's, both of that round."""
    ratios = []
    for r in sorted({row.get("round", 0) for row in threads}):
        one = [x for x in _at(threads, store, 1) if x.get("round", 0) == r]
        many = [x for x in _at(threads, store, 64) if x.get("round", 0) == r]
        if one and many:
            ratios.append(many[0]["runs_per_s"] / one[0]["runs_per_s"])
    return ratios


def _rps(r: dict[str, Any] | None) -> str:
    return f"{r['runs_per_s']:,.0f}" if r else "-"


def _us(r: dict[str, Any] | None) -> str:
    if r is None:
        return "-"
    s = f"{r['us_per_step']:,.0f}"
    return s + (f" ({r['n']}/{r['target_n']} steps)" if r.get("truncated") else "")


def _count(value: Any) -> str:
    return "-" if value is None else f"{value:,}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _section(title: str, intro: str, columns: list[str]) -> list[str]:
    """A report section's heading, its paragraph and its table's header rows."""
    return [
        "",
        f"### {title}",
        "",
        intro,
        "",
        "| " + " | ".join(columns) + " |",
        "|" + " --- |" * len(columns),
    ]


def table(info: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """The markdown report, with the budget verdicts."""
    og = [r for r in rows if r["peer"] == "oncegraph"]
    out = [
        f"Date {info['date']}; {info['nproc']} cores, {info['memory']} RAM; disk: "
        f"{' / '.join(info['disk'].splitlines())}; Python {info['python']}; "
        f"commit {info.get('commit') or 'unknown'}; load average before "
        f"`{info['load_before']}`, after `{info['load_after']}`.",
        "",
        "### Tool loop (µs per step; a step = one model turn + one recorded tool call)",
        "",
        "oncegraph runs sync nodes and tools in worker threads by default (timeouts are "
        "enforceable, other runs on the loop are not stalled); the *inline* variant marks the "
        "scripted model node and the tool `inline=True`, running them on the event loop "
        "thread as LangGraph's sync `invoke` does. Both go through the same ledger and "
        f"commits. N = {ROUND_N}: median of {info.get('rounds', 1)} interleaved rounds; "
        f"speed-ups at N = {ROUND_N} are medians of the per-round ratios (range).",
        "",
        "| store | N | oncegraph | s (steps/s) | inline | commits/step | rows/step | bytes/step "
        "| LangGraph ToolNode | speed-up | inline speed-up | LangGraph node loop | 10xGraph "
        "| speed-up | DBOS agent (model step + tool step) | speed-up "
        "| DBOS one step (lower bound) | floor µs/commit, mean (median) "
        "| x (commits x floor mean) |",
        "|" + " --- |" * 19,
    ]
    verdicts: list[str] = []
    for store in ("memory", "sqlite", "postgres"):
        for n in map(int, NS):
            me = _find(og, workload="toolloop", store=store, n=n, variant="default")
            if me is None:
                continue
            fast = _find(og, workload="toolloop", store=store, n=n, variant="inline")
            lg = _find(rows, peer="langgraph-toolnode", store=store, n=n)
            loop = _find(rows, peer="langgraph-node-loop", store=store, n=n)
            tx = _find(rows, peer="tenxgraph", store=store, target_n=n) or _find(
                rows, peer="tenxgraph", store=store, n=n
            )
            db = _find(rows, peer="dbos", store=store, n=n)
            agent = _find(rows, peer="dbos-agent", store=store, n=n)
            fl = _find(rows, peer="floor", store=store, n=n)
            # The floor's mean over its run, like every other column (a run's total / steps):
            # on a machine with stalls the median alone would flatter the floor.
            floor_us = fl["us_per_step"] if fl else None
            floor_cell = (
                f"{fl['us_per_step']:,.0f} ({fl['median_us_per_commit']:,.0f})" if fl else "-"
            )
            floor_x = me["us_per_step"] / (me["commits_per_step"] * floor_us) if floor_us else None
            speedups = {}
            for label, mine in (("default", me), ("inline", fast)):
                ratio = None
                if n == ROUND_N:
                    key = {"peer": "oncegraph", "workload": "toolloop", "store": store, "n": n}
                    ratio = _round_ratio(
                        rows, {**key, "variant": label}, peer="langgraph-toolnode", store=store, n=n
                    )
                if ratio is None and mine and lg:
                    one = lg["us_per_step"] / mine["us_per_step"]
                    ratio = (one, one, one)
                speedups[label] = ratio
            out.append(
                f"| {store} | {n} | {me['us_per_step']:,.0f} "
                f"| {me['seconds']:.3f} ({me['steps_per_s']:,.0f}) | {_us(fast)} "
                f"| {me['commits_per_step']} | {me['rows_per_step']} "
                f"| {me['bytes_per_step']:,.0f} | {_us(lg)} | {_ratio(speedups['default'])} "
                f"| {_ratio(speedups['inline'])} | {_us(loop)} | {_us(tx)} "
                f"| {_x(tx['us_per_step'] if tx else None, me['us_per_step'])} | {_us(agent)} "
                f"| {_x(agent['us_per_step'] if agent else None, me['us_per_step'])} | {_us(db)} "
                f"| {floor_cell} | {f'{floor_x:.1f}x' if floor_x else '-'} |"
            )
            if store != "memory" and n == ROUND_N:
                verdicts += _toolloop_verdicts(rows, store, n, me, fast, speedups, floor_us)
                if tx:
                    got = tx["us_per_step"] / me["us_per_step"]
                    ok = "MET" if got >= 10 else "NOT MET"
                    verdicts.append(
                        f"- {store}, N={n}: >= 10x faster than 10xGraph: {ok} ({got:.1f}x)"
                    )
    out += ["", "### Conversation growth (tool result ~200 bytes; messages grow with N)", ""]
    out += [
        "| store | N | µs/step | bytes/step | commits/step |",
        "| --- | --- | --- | --- | --- |",
    ]
    for store in ("memory", "sqlite", "postgres"):
        growth = [r for r in og if r["workload"] == "growth" and r["store"] == store]
        for r in growth:
            size = f"{r['bytes_per_step']:,.0f}" if store != "memory" else "-"
            out.append(
                f"| {store} | {r['n']} | {r['us_per_step']:,.0f} | {size} "
                f"| {r['commits_per_step']} |"
            )
        small = _find(growth, n=10)
        big = _find(growth, n=1000)
        if small and big:
            t = big["us_per_step"] / small["us_per_step"]
            b = big["bytes_per_step"] / small["bytes_per_step"] if store != "memory" else None
            ok = "MET" if t <= 1.5 and (b is None or b <= 1.5) else "NOT MET"
            sizes = f", bytes {b:.2f}x" if b is not None else ""
            verdicts.append(
                f"- {store} growth, N=1000 vs N=10 within 1.5x: {ok} (time {t:.2f}x{sizes})"
            )
    turns = [r for r in og if r["workload"] == "turns"]
    if turns:
        out += _section(
            "Many runs on one thread (a chat: one turn per run)",
            "Each run is a user message, a model turn calling the tool once, the call and a "
            "closing model turn, all on ONE thread, so its runs, checkpoints and messages grow "
            "with every run; µs per run are the medians of the first and of the last window. "
            "At the end, the thread read back (medians of 7): `get_state`, and "
            "`get_state_history(limit=10)` (ten snapshots, each with all its messages, masked).",
            [
                "store",
                "runs",
                "window",
                "first runs µs/run",
                "last runs µs/run",
                "last / first",
                "messages at the end",
                "bytes/run, first 100 messages",
                "bytes/run, last 100 messages",
                "get_state ms",
                "history, 10 snapshots ms",
            ],
        )
        for r in turns:
            grew = r["last_us_per_run"] / r["first_us_per_run"]
            out.append(
                f"| {r['store']} | {r['n']:,} | {r['window']} | {r['first_us_per_run']:,.0f} "
                f"| {r['last_us_per_run']:,.0f} | {grew:.2f}x | {r['messages']:,} "
                f"| {_count(r.get('first_bytes_per_run'))} | {_count(r.get('last_bytes_per_run'))} "
                f"| {_ms(r.get('get_state_ms'))} | {_ms(r.get('history10_ms'))} |"
            )
            ok = "MET" if grew <= 1.5 else "NOT MET"
            verdicts.append(
                f"- {r['store']} turns: the last {r['window']} of {r['n']:,} runs on one thread "
                f"within 1.5x of the first {r['window']}: {ok} ({grew:.2f}x)"
            )
    listing = [r for r in og if r["workload"] == "listing"]
    if listing:
        out += _section(
            "Listing runs (an operator's view)",
            "Among 200,000 runs (one real run copied in SQL; a tenth of them failed, five "
            "waiting for review; four in five the app's, the rest three other apps'), "
            "medians of 7, with the masking the view does: `app.aruns(limit=50)`, all, "
            "failed and `needs_review`, and every app's (`oncegraph runs --db` without "
            "`--app`), all and failed; and the page ~10,000 runs back of each "
            "(`before=` its previous page's last run).",
            [
                "store",
                "runs",
                "app's newest 50 ms",
                "failed ms",
                "needs_review ms",
                "every app's newest 50 ms",
                "failed ms",
                "app's page 10,000 back ms",
                "every app's ms",
            ],
        )
        keys = (
            "all_ms",
            "failed_ms",
            "review_ms",
            "every_app_ms",
            "every_app_failed_ms",
            "deep_ms",
            "every_app_deep_ms",
        )
        for r in listing:
            cells = [_ms(r[k]) if k in r else "-" for k in keys]
            out.append(f"| {r['store']} | {r['n']:,} | {' | '.join(cells)} |")
    claims = [r for r in og if r["workload"] == "claims"]
    if claims:
        out += _section(
            "A worker's claim (PostgreSQL)",
            "`RunQueue.claim` of one run among 200 queued, median of 50, with none and with "
            "5,000 of the app's runs running under live leases.",
            ["runs running", "claim ms"],
        )
        for r in claims:
            out.append(f"| {r['running']:,} | {r['claim_ms']:.2f} |")
    out += ["", "### Resume after SIGKILL at `after_intent:<k>` (SQLite, fresh process)", ""]
    out += [
        "| N | crash at | call -> first resumed update | call -> done | tool executions | redone |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in (r for r in og if r["workload"] == "resume"):
        out.append(
            f"| {r['n']} | {r['crash_at']} | {r['first_update_ms']} ms ({r['first_update_node']}) "
            f"| {r['total_ms']:,.0f} ms | {r['tool_executions']} | {r['steps_redone']} |"
        )
        ok = "MET" if r["first_update_ms"] <= 50 and r["steps_redone"] == 0 else "NOT MET"
        verdicts.append(
            f"- resume N={r['n']}: <= 50 ms to first resumed step, nothing redone: {ok} "
            f"({r['first_update_ms']} ms, {r['steps_redone']} redone)"
        )
    out += ["", "### Many threads (runs of one model turn + one tool call, one thread each)", ""]
    out += [
        "Each framework runs the same 1,000 runs at the same concurrency in the same "
        "`run_all` (`asyncio.gather` + semaphore over its async entry point): LangGraph "
        '`ToolNode` (AsyncSqliteSaver / AsyncPostgresSaver, `durability="sync"`), DBOS '
        "(one async workflow with two steps: the model turn and the tool call).",
        "",
        "oncegraph's figures are the median round's; the rounds column lists every round "
        "(each measures both stores at every concurrency back to back), and the verdict "
        "below is the median of the rounds' concurrency 64 / concurrency 1 ratios.",
        "",
        "| store | runs | concurrency | seconds | runs/s | rounds | µs/run | commits/run "
        "| LangGraph runs/s | DBOS runs/s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    threads = [r for r in og if r["workload"] == "threads"]
    cells = sorted({(r["store"], r["concurrency"]) for r in threads}, key=_store_then_conc)
    for store, conc in cells:
        same = [r for r in threads if r["store"] == store and r["concurrency"] == conc]
        r = _median_by(same, "runs_per_s")
        lg = _find(rows, peer="langgraph-threads", store=store, concurrency=conc)
        db = _find(rows, peer="dbos-threads", store=store, concurrency=conc)
        out.append(
            f"| {store} | {r['n']} | {conc} | {r['seconds']:.2f} "
            f"| {r['runs_per_s']:,.0f} | {_each_round(same)} | {r['us_per_step']:,.0f} "
            f"| {r['commits_per_run']} | {_rps(lg)} | {_rps(db)} |"
        )
    for store, factor in (("sqlite", 3), ("postgres", 4)):
        ratios = _round_ratios(threads, store)
        if ratios:
            got = statistics.median(ratios)
            ok = "MET" if got >= factor else "NOT MET"
            one = _median_by(_at(threads, store, 1), "runs_per_s")
            many = _median_by(_at(threads, store, 64), "runs_per_s")
            how = f"the median of {len(ratios)} rounds' ratios" if len(ratios) > 1 else "1 round"
            spread = f" ({min(ratios):.1f}-{max(ratios):.1f})" if len(ratios) > 1 else ""
            verdicts.append(
                f"- {store}: concurrency 64 >= {factor}x concurrency 1 (many threads, {how}): "
                f"{ok} ({got:.1f}x{spread}: {many['runs_per_s']:,.0f} vs "
                f"{one['runs_per_s']:,.0f} runs/s, medians)"
            )
    pool = [r for r in og if r["workload"] == "workers"]
    if pool:
        out += [
            "",
            "### Worker processes (the same runs queued in PostgreSQL, claimed by `Worker`s)",
            "",
            "Each round runs 1, 2 and 4 processes back to back; runs/s is the median over the "
            "rounds (each round's figure after it).",
            "",
            "| runs | processes | concurrency each | seconds | runs/s | rounds | submit µs/run "
            "| tool executions |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        medians = []
        for procs in sorted({r["processes"] for r in pool}):
            same = sorted(
                (r for r in pool if r["processes"] == procs), key=lambda r: r["runs_per_s"]
            )
            mid = same[(len(same) - 1) // 2]
            medians.append(mid)
            each = " / ".join(
                f"{r['runs_per_s']:,.0f}" for r in sorted(same, key=lambda r: r.get("round", 0))
            )
            out.append(
                f"| {mid['n']} | {procs} | {mid['concurrency']} | {mid['seconds']:.2f} "
                f"| {mid['runs_per_s']:,.0f} | {each} | {mid['submit_us_per_run']:,.0f} "
                f"| {mid['tool_executions']} |"
            )
        # "does not fall": each step up within 10% of the one before (the machine is noisy)
        falls = [
            (a, b)
            for a, b in itertools.pairwise(medians)
            if b["runs_per_s"] < 0.9 * a["runs_per_s"]
        ]
        if len(medians) > 1:
            ok = "NOT MET" if falls else "MET"
            seq = " / ".join(f"{r['processes']}: {r['runs_per_s']:,.0f}" for r in medians)
            verdicts.append(
                f"- worker processes: runs/s does not fall as processes are added "
                f"(within 10%, medians): {ok} ({seq} runs/s)"
            )
    out += _http_section(og, threads, verdicts)
    lat = [r for r in og if r["workload"] == "latency"]
    if lat:
        out += [
            "",
            "### Submit to first step, one idle worker process (PostgreSQL)",
            "",
            "| wake-up | runs | median | p99 | max |",
            "| --- | --- | --- | --- | --- |",
        ]
        for r in lat:
            out.append(
                f"| {r['variant']} | {r['n']} | {r['median_ms']} ms | {r['p99_ms']} ms "
                f"| {r['max_ms']} ms |"
            )
            if r["variant"] == "notify":
                ok = "MET" if r["median_ms"] <= 10 else "NOT MET"
                verdicts.append(
                    f"- submit to first step, idle worker: median <= 10 ms: {ok} "
                    f"({r['median_ms']} ms)"
                )
                ok = "MET" if r["p99_ms"] <= 50 else "NOT MET"
                verdicts.append(
                    f"- submit to first step, idle worker: p99 <= 50 ms: {ok} "
                    f"({r['p99_ms']} ms, max {r['max_ms']} ms)"
                )
    versions = sorted(
        {
            ("sqlite " if r["peer"] == "floor" and r["store"] == "sqlite" else "") + r["version"]
            for r in rows
            if "version" in r
        }
    )
    out += ["", "### Budget", "", *verdicts, "", "Versions: " + "; ".join(versions) + "."]
    return "\n".join(out) + "\n"


def _http_section(
    og: list[dict[str, Any]], threads: list[dict[str, Any]], verdicts: list[str]
) -> list[str]:
    """The HTTP path's table, and its two budget lines: runs/s through the server at
    concurrency 64 within 3x of the library's (the many-threads workload, same store), and
    reads' p99 under 100 ms while 64 writers start runs."""
    http = [r for r in og if r["workload"] == "http"]
    if not http:
        return []
    out = [
        "",
        "### The HTTP path (`oncegraph serve`, one model turn + one tool call per run)",
        "",
        "`POST /api/threads/{id}/runs` with `wait: true`; then 50 readers of "
        "`GET /api/runs?limit=50` while 64 writers start runs. Checks: every run completed, "
        "one effect each.",
        "",
        "| store | processes | phase | concurrency | runs/s | p50 ms | p99 ms | read p50 ms "
        "| read p99 ms | completed / expected | effects |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in http:
        out.append(
            f"| {r['store']} | {r.get('workers', 1)} | {r['phase']} | {r['concurrency']} "
            f"| {r['runs_per_s']:,.1f} | {r['p50_ms']} | {r['p99_ms']} "
            f"| {r.get('read_p50_ms', '-')} | {r.get('read_p99_ms', '-')} "
            f"| {r['completed']} / {r['expected']} | {r['effects']} |"
        )
    for store in sorted({r["store"] for r in http}):
        at64 = [
            r
            for r in http
            if r["store"] == store and r["phase"] == "starts" and r["concurrency"] == 64
        ]
        library = _at(threads, store, 64)
        if at64 and library:
            best = max(at64, key=lambda r: r["runs_per_s"])
            lib = _median_by(library, "runs_per_s")["runs_per_s"]
            ok = "MET" if best["runs_per_s"] * 3 >= lib else "NOT MET"
            verdicts.append(
                f"- {store}: the HTTP path within 3x of the library's runs/s at concurrency "
                f"64: {ok} ({best['runs_per_s']:,.0f} runs/s with {best.get('workers', 1)} "
                f"process(es) vs {lib:,.0f}: {lib / best['runs_per_s']:.1f}x)"
            )
        reads = [r for r in http if r["store"] == store and r["phase"] == "reads-under-writes"]
        if reads:
            best = min(reads, key=lambda r: r["read_p99_ms"] or float("inf"))
            p99 = best["read_p99_ms"]
            ok = "MET" if p99 is not None and p99 < 100 else "NOT MET"
            verdicts.append(
                f"- {store}: reads' p99 under 100 ms while 64 writers start runs: {ok} "
                f"({p99} ms with {best.get('workers', 1)} process(es))"
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("results", nargs="?", help="re-render this .jsonl instead of running")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="interleaved N=200 rounds")
    parser.add_argument(
        "--quick", action="store_true", help="only the floor and the N=200 rounds (sqlite, pg)"
    )
    args = parser.parse_args()
    if args.results:
        lines = [json.loads(x) for x in Path(args.results).read_text().splitlines()]
        info, rows = lines[0]["machine"], [x for x in lines[1:] if "peer" in x]
        for x in lines[1:]:
            info.update(x.get("machine_after", {}))
    else:
        RESULTS.mkdir(exist_ok=True)
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H%M")
        with open(RESULTS / f"{stamp}.jsonl", "w") as f:

            def sink(row: dict[str, Any]) -> None:
                f.write(json.dumps(row) + "\n")
                f.flush()

            info, rows = collect(args.rounds, args.quick, sink)
            sink({"machine_after": info})
    info.setdefault("load_after", "-")
    report = table(info, rows)
    (RESULTS / "latest.md").write_text(report)
    print(report)


if __name__ == "__main__":
    main()
