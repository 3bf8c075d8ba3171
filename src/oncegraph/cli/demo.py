"""``oncegraph demo``: crash a support agent in the middle of a refund, resume it in a
fresh process, and show that the money moved exactly once."""

from __future__ import annotations

import os
import secrets
import shlex
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
    """Run the demo on ``db`` (kept afterwards), or on a temporary file removed at the end.
    Each demo is a conversation of its own, so the same ``db`` can be used again."""
    if db is not None:
        return _demo(db, crash_at, keep=True)
    with tempfile.TemporaryDirectory(prefix="oncegraph-demo-") as workdir:
        return _demo(Path(workdir) / "runs.db", crash_at, keep=False)


def _demo(db: Path, crash_at: str, *, keep: bool) -> int:
    console = Console()
    thread = f"support-1042-{secrets.token_hex(3)}"  # a new conversation every time
    with FakeProvider() as provider:
        console.rule("[bold]oncegraph demo: a refund that survives a crash")
        console.print(f"store: SQLite at {db}   payment provider: {provider.url}")
        console.print(
            f"1. A worker process runs the support agent; it is killed with SIGKILL at "
            f"[bold]{crash_at}[/]."
        )
        code = _worker("run", db, provider.url, thread, crash_at)
        killed = code == -signal.SIGKILL
        console.print(
            f"   worker exit: {code} ({'killed by SIGKILL' if killed else 'not killed!'})"
        )
        before = provider.stats()["performed"]
        console.print(f"   refunds performed at the provider: {before}")
        app = build(str(db), provider.url)
        pending = [e for e in app.effects(thread_id=thread) if e.status == "pending"]
        for e in pending:
            console.print(
                f"   ledger: {e.effect_type} is [yellow]pending[/] (outcome unknown), "
                f"effect {e.effect_id[:16]}..."
            )
        console.print("   " + _what_the_kill_left(killed, before, bool(pending), crash_at))
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
        if ok:
            console.print("[green]exactly once.[/]")
        elif not killed:
            console.print(
                f"[red]the worker was never killed: the run did not reach {crash_at}.[/] "
                "Pick a point the agent reaches, e.g. --crash-at in_tool."
            )
        else:
            console.print(
                f"[red]expected one refund and a completed run; got {performed} and "
                f"{runs[0].status}.[/]"
            )
        if keep:
            where = shlex.quote(str(db))
            console.print(
                f"Look at it: oncegraph runs --sqlite {where}   "
                f"oncegraph effects --run {runs[0].run_id} --sqlite {where}"
            )
            console.print("Open it in the web UI:", highlight=False)
            console.print(
                f"oncegraph serve --db {where}", markup=False, highlight=False, soft_wrap=True
            )
        else:
            console.print(
                "The database was temporary: run oncegraph demo --db runs.db to keep it, "
                "then open it in the web UI with:",
                highlight=False,
            )
            console.print("oncegraph serve --db runs.db", markup=False, highlight=False)
        return 0 if ok else 1


def _what_the_kill_left(killed: bool, performed: int, pending: bool, crash_at: str) -> str:
    """What the SIGKILL at ``crash_at`` left, in words that match the counts shown."""
    if not killed:
        return f"the worker ended without reaching {crash_at}."
    if performed and pending:
        return (
            "the provider moved the money, and the ledger does not know the outcome: "
            "a resume must not refund blindly."
        )
    if performed:
        return "the refund was made and recorded before the kill."
    if pending:
        return "the refund's intent is recorded and no money moved yet."
    return "the kill came before the refund was decided."
