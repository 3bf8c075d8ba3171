"""``oncegraph demo``: crash a support agent in the middle of a refund, resume it in a
fresh process, and show that the money moved exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from oncegraph.cli.demo_agent import build
from oncegraph.testing.provider import FakeProvider


def _worker(mode: str, db: Path, url: str, thread: str, crash_at: str | None) -> int:
    env = dict(os.environ)
    env.pop("ONCEGRAPH_CRASH_AT", None)
    if crash_at:
        env["ONCEGRAPH_CRASH_AT"] = crash_at
    cmd = [sys.executable, "-m", "oncegraph.cli.demo_agent", mode, str(db), url, thread]
    # A hang detector, not a speed limit: a loaded machine may take minutes to start Python.
    return subprocess.run(cmd, env=env, capture_output=True, timeout=600).returncode


def run_demo(db: Path | None = None, crash_at: str = "in_tool") -> int:
    console = Console()
    workdir = Path(tempfile.mkdtemp(prefix="oncegraph-demo-"))
    db = db or workdir / "runs.db"
    thread = "support-1042"
    with FakeProvider() as provider:
        console.rule("[bold]oncegraph demo: a refund that survives a crash")
        console.print(f"store: SQLite at {db}   payment provider: {provider.url}")
        console.print(
            f"1. A worker process runs the support agent; it is killed at [bold]{crash_at}[/] "
            "(the provider has just moved the money, nothing is recorded yet)."
        )
        code = _worker("run", db, provider.url, thread, crash_at)
        killed = code == -signal.SIGKILL
        console.print(
            f"   worker exit: {code} ({'killed by SIGKILL' if killed else 'not killed!'})"
        )
        console.print(f"   refunds performed at the provider: {provider.stats()['performed']}")
        app = build(str(db), provider.url)
        pending = [e for e in app.effects(thread_id=thread) if e.status == "pending"]
        for e in pending:
            console.print(
                f"   ledger: {e.effect_type} is [yellow]pending[/] (outcome unknown), "
                f"effect {e.effect_id[:16]}..."
            )
        console.print("2. A fresh process resumes the same thread with invoke(None, config).")
        code = _worker("resume", db, provider.url, thread, None)
        console.print(f"   worker exit: {code}")
        state = app.get_state({"thread_id": thread})
        console.print("3. The conversation:")
        for m in state.values["messages"]:
            text = m.get("content") or ", ".join(
                f"{c['name']}({c['args']})" for c in m.get("tool_calls", [])
            )
            console.print(f"   [bold]{m['role']:>9}[/]: {text}")
        table = Table(title="effect ledger")
        for col in ("effect_type", "class", "status", "attempts", "provider ref"):
            table.add_column(col)
        for e in app.effects(thread_id=thread):
            outcomes = ",".join(a.outcome or "?" for a in e.attempts)
            table.add_row(
                e.effect_type, e.effect_class, e.status, outcomes, e.provider_reference or ""
            )
        console.print(table)
        performed = provider.stats()["performed"]
        runs = app.runs(thread_id=thread)
        ok = killed and performed == 1 and runs[0].status == "completed"
        console.print(
            f"refunds performed at the provider: [bold]{performed}[/]; run {runs[0].run_id} "
            f"is {runs[0].status}."
        )
        console.print("[green]exactly once.[/]" if ok else "[red]something went wrong[/]")
        return 0 if ok else 1
