"""Run the whole benchmark suite and write ``benchmarks/results/<date>.jsonl`` + ``latest.md``.

Runs the floor, oncegraph (all workloads) and the peers' tool loop, each peer with its own
virtualenv python (``benchmarks/.venvs/<peer>``, made by ``benchmarks/peers/setup_venvs.sh``),
then prints a markdown table with ratios: oncegraph vs LangGraph ToolNode, vs 10xGraph, vs
the floor (per-step cost / (durable commits per step x median floor commit)).

    python benchmarks/run_all.py            # about 5-10 minutes on 2 cores

10xGraph runs at N = 10 and 200 only, each capped by BENCH_TENXGRAPH_CAP_SECONDS (20 here),
because its cost per step grows with N.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PEERS = HERE / "peers"
VENVS = HERE / ".venvs"
RESULTS = HERE / "results"
NS = ["10", "200", "1000"]


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
    }


def run(label: str, argv: list[str], env: dict[str, str] | None = None) -> list[dict[str, Any]]:
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


def collect() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    info = machine()
    py = {p: str(VENVS / p / "bin" / "python") for p in ("langgraph", "dbos", "tenxgraph")}
    results: list[dict[str, Any]] = []
    results += run("floor", [py["langgraph"], str(PEERS / "floor.py"), *NS])
    results += run("oncegraph", [sys.executable, str(HERE / "oncegraph_bench.py")])
    results += run("langgraph", [py["langgraph"], str(PEERS / "langgraph_toolloop.py"), *NS])
    results += run("dbos", [py["dbos"], str(PEERS / "dbos_toolloop.py"), *NS])
    results += run(
        "tenxgraph",
        [py["tenxgraph"], str(PEERS / "tenxgraph_toolloop.py"), "10", "200"],
        env={"BENCH_TENXGRAPH_CAP_SECONDS": "20"},
    )
    info["load_after"] = sh("cat /proc/loadavg")
    return info, results


def _find(rows: list[dict[str, Any]], **keys: Any) -> dict[str, Any] | None:
    for r in rows:
        if all(r.get(k) == v for k, v in keys.items()):
            return r
    return None


def _x(a: float | None, b: float | None) -> str:
    return f"{a / b:.1f}x" if a and b else "-"


def _us(r: dict[str, Any] | None) -> str:
    if r is None:
        return "-"
    s = f"{r['us_per_step']:,.0f}"
    return s + (f" ({r['n']}/{r['target_n']} steps)" if r.get("truncated") else "")


def table(info: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """The markdown report, with the budget verdicts."""
    og = [r for r in rows if r["peer"] == "oncegraph"]
    out = [
        f"Date {info['date']}; {info['nproc']} cores, {info['memory']} RAM; disk: "
        f"{' / '.join(info['disk'].splitlines())}; Python {info['python']}; load average before "
        f"`{info['load_before']}`, after `{info['load_after']}`.",
        "",
        "### Tool loop (µs per step; a step = one model turn + one recorded tool call)",
        "",
        "| store | N | oncegraph | commits/step | rows/step | bytes/step | LangGraph ToolNode "
        "| speed-up | 10xGraph | speed-up | DBOS | floor µs/commit | x (commits x floor) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    verdicts: list[str] = []
    for store in ("memory", "sqlite", "postgres"):
        for n in map(int, NS):
            me = _find(og, workload="toolloop", store=store, n=n)
            if me is None:
                continue
            lg = _find(rows, peer="langgraph-toolnode", store=store, n=n)
            tx = _find(rows, peer="tenxgraph", store=store, target_n=n) or _find(
                rows, peer="tenxgraph", store=store, n=n
            )
            db = _find(rows, peer="dbos", store=store, n=n)
            fl = _find(rows, peer="floor", store=store, n=n)
            floor_us = fl["median_us_per_commit"] if fl else None
            floor_x = me["us_per_step"] / (me["commits_per_step"] * floor_us) if floor_us else None
            out.append(
                f"| {store} | {n} | {me['us_per_step']:,.0f} | {me['commits_per_step']} "
                f"| {me['rows_per_step']} | {me['bytes_per_step']:,.0f} | {_us(lg)} "
                f"| {_x(lg['us_per_step'] if lg else None, me['us_per_step'])} | {_us(tx)} "
                f"| {_x(tx['us_per_step'] if tx else None, me['us_per_step'])} | {_us(db)} "
                f"| {floor_us or '-'} | {f'{floor_x:.1f}x' if floor_x else '-'} |"
            )
            if store != "memory" and n == 200:
                for name, peer, need in (("LangGraph ToolNode", lg, 3), ("10xGraph", tx, 10)):
                    if peer:
                        got = peer["us_per_step"] / me["us_per_step"]
                        ok = "MET" if got >= need else "NOT MET"
                        verdicts.append(
                            f"- {store}, N=200: >= {need}x faster than {name}: {ok} ({got:.1f}x)"
                        )
                if floor_x:
                    ok = "MET" if floor_x <= 3 else "NOT MET"
                    verdicts.append(
                        f"- {store}, N=200: within 3x of commits x floor: {ok} ({floor_x:.1f}x)"
                    )
                budget = 1000 if store == "sqlite" else 1500
                ok = "MET" if me["us_per_step"] <= budget else "NOT MET"
                verdicts.append(
                    f"- {store}, N=200: <= {budget} µs per step (DESIGN §5): {ok} "
                    f"({me['us_per_step']:,.0f} µs)"
                )
    out += ["", "### Conversation growth (tool result ~200 bytes; messages grow with N)", ""]
    out += [
        "| store | N | µs/step | bytes/step | commits/step |",
        "| --- | --- | --- | --- | --- |",
    ]
    for store in ("sqlite", "postgres"):
        growth = [r for r in og if r["workload"] == "growth" and r["store"] == store]
        for r in growth:
            out.append(
                f"| {store} | {r['n']} | {r['us_per_step']:,.0f} | {r['bytes_per_step']:,.0f} "
                f"| {r['commits_per_step']} |"
            )
        small = _find(growth, n=10)
        big = _find(growth, n=1000)
        if small and big:
            t = big["us_per_step"] / small["us_per_step"]
            b = big["bytes_per_step"] / small["bytes_per_step"]
            ok = "MET" if t <= 1.5 and b <= 1.5 else "NOT MET"
            verdicts.append(
                f"- {store} growth, N=1000 vs N=10 within 1.5x: {ok} "
                f"(time {t:.2f}x, bytes {b:.2f}x)"
            )
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
        "| store | runs | concurrency | seconds | runs/s | µs/run | commits/run |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in (r for r in og if r["workload"] == "threads"):
        out.append(
            f"| {r['store']} | {r['n']} | {r['concurrency']} | {r['seconds']:.2f} "
            f"| {r['runs_per_s']:,.0f} | {r['us_per_step']:,.0f} | {r['commits_per_run']} |"
        )
    versions = sorted(
        {
            ("sqlite " if r["peer"] == "floor" and r["store"] == "sqlite" else "") + r["version"]
            for r in rows
        }
    )
    out += ["", "### Budget", "", *verdicts, "", "Versions: " + "; ".join(versions) + "."]
    return "\n".join(out) + "\n"


def main() -> None:
    if len(sys.argv) > 1:  # re-render a results file: run_all.py results/<date>.jsonl
        lines = [json.loads(x) for x in Path(sys.argv[1]).read_text().splitlines()]
        info, rows = lines[0]["machine"], lines[1:]
    else:
        info, rows = collect()
        RESULTS.mkdir(exist_ok=True)
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H%M")
        with open(RESULTS / f"{stamp}.jsonl", "w") as f:
            f.write(json.dumps({"machine": info}) + "\n")
            for r in rows:
                f.write(json.dumps(r) + "\n")
    report = table(info, rows)
    (RESULTS / "latest.md").write_text(report)
    print(report)


if __name__ == "__main__":
    main()
