"""The crash-matrix worker: one ReactAgent run (or its resume) in its own OS process.

The agent is driven by a :class:`ScriptedModel` (turn 0 asks for the tool call(s), turn
1 answers), so a fresh process replays the same script. Its tools call the fake payment
provider with ``current_effect().idempotency_key`` and mark ``crash_point("in_tool")``
right after the provider answered. Every tool invocation also appends one JSON line to
``--calls-log`` BEFORE touching the provider, so the test can count how often a tool
body really ran, across processes (an append reaches the kernel before a SIGKILL).

The process prints one JSON report as its last stdout line::

    {"outcome": "completed" | "needs_review" | "error", "run_id", "run_status",
     "run_error", "effect_id", "error_type", "error", "final", "tool_messages",
     "history"}

(``history``, of a completed run: the thread's checkpoint ids, newest first;
``--durability`` names the call's ``durability=``.)

The store is SQLite (``--db FILE``) or PostgreSQL (``--pg DSN``, a
``PgCheckpointer(postgres_dsn=DSN)``). With ``--hold-lock FILE`` (PostgreSQL only) the
tool body, once the provider answered, opens a SEPARATE connection and leaves a
transaction open on it that holds ``FOR UPDATE`` row locks on the thread's row and on
this call's effect row; it checks from a third connection (``NOWAIT``) that those rows
really are locked, writes that witness as JSON to FILE, and keeps the connection open,
so that a crash after that point kills the process while it holds an open transaction.

With ``--gate FILE --inside FILE`` the tool body and the reconcile hook first create the
``--inside`` file and then wait until the ``--gate`` file exists: the test holds this
process inside the protocol while a second process tries the same run.

Crashes come from the environment (``ONCEGRAPH_CRASH_AT``), set by the test harness.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from oncegraph import NeedsReviewError, Reconciled, current_effect, tool
from oncegraph.prebuilt.agent import ReactAgent
from oncegraph.prebuilt.models.scripted import ScriptedModel
from oncegraph.runtime.faults import crash_point, declare_crash_point
from oncegraph.storage.checkpointer import PgCheckpointer, SqliteCheckpointer
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import EffectRecord
from oncegraph.tools import Tool

IN_TOOL = declare_crash_point("in_tool")  # the provider has the request; no record yet

TOOL_CLASSES = ("write", "irreversible", "irreversible-noreconcile", "read", "blind+slow")
# "blind+slow": two calls in one turn, an irreversible tool without reconcile (parks on an
# unknown outcome) and a write tool that is slow (sleeps SLOW_SECONDS before charging).
SLOW_SECONDS = 0.3
ORDERS = (("1042", 59.0), ("1043", 12.5))
# Connections that must stay open until the process dies (a closed or collected
# connection would end its transaction and release the locks).
_HELD: list[Any] = []


GATE: dict[str, str] = {}  # "gate" and "inside" file paths, from --gate / --inside


def _wait_at_gate() -> None:
    """Say we are inside, then wait until the test opens the gate (see the docstring)."""
    if not GATE:
        return
    with open(GATE["inside"], "a", encoding="utf-8") as f:
        f.write(f"{os.getpid()}\n")
    deadline = time.monotonic() + 120
    while not os.path.exists(GATE["gate"]):
        if time.monotonic() > deadline:
            raise SystemExit("the gate never opened")
        time.sleep(0.01)


def _log_call(path: str, name: str, args: dict[str, Any]) -> None:
    line = json.dumps({"tool": name, "key": current_effect().idempotency_key, "args": args})
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def hold_row_locks(dsn: str, thread_id: str, effect_id: str, witness: str) -> None:
    """Open a transaction that locks the thread's row and the effect row, and keep it.

    The witness file gets ``{"backend_pid", "thread_rows", "effect_rows",
    "contended"}``: how many rows each ``SELECT ... FOR UPDATE`` locked, and whether a
    ``NOWAIT`` attempt from another connection was refused on both (it must be).
    """
    import psycopg

    holder = psycopg.connect(dsn)  # not autocommit: the first statement opens a transaction
    _HELD.append(holder)
    thread_rows = holder.execute(
        "SELECT thread_id FROM oncegraph_threads WHERE thread_id = %s FOR UPDATE", (thread_id,)
    ).fetchall()
    effect_rows = holder.execute(
        "SELECT effect_id FROM oncegraph_effects WHERE effect_id = %s FOR UPDATE", (effect_id,)
    ).fetchall()
    refused = 0
    with psycopg.connect(dsn, autocommit=True) as probe:
        for table, column, key in (
            ("oncegraph_threads", "thread_id", thread_id),
            ("oncegraph_effects", "effect_id", effect_id),
        ):
            try:
                probe.execute(
                    f"SELECT 1 FROM {table} WHERE {column} = %s FOR UPDATE NOWAIT", (key,)
                )
            except psycopg.errors.LockNotAvailable:
                refused += 1
    report = {
        "backend_pid": holder.info.backend_pid,
        "thread_rows": len(thread_rows),
        "effect_rows": len(effect_rows),
        "contended": refused == 2,
    }
    with open(witness, "w", encoding="utf-8") as out:
        out.write(json.dumps(report))


def build_tool(
    kind: str,
    provider_url: str,
    calls_log: str,
    *,
    after_charge: Callable[[str], None] | None = None,
) -> Tool:
    """The tool of class ``kind``; all of them charge (or look up) one order.

    ``after_charge(idempotency_key)`` runs once the provider answered, before the
    ``in_tool`` crash point.
    """
    from oncegraph.testing.provider import ProviderClient

    client = ProviderClient(provider_url)

    def charge_body(name: str, order_id: str, amount: float) -> dict[str, Any]:
        _wait_at_gate()
        _log_call(calls_log, name, {"order_id": order_id, "amount": amount})
        key = current_effect().idempotency_key
        charged = client.charge(amount, "eur", order_id, idempotency_key=key)
        if after_charge is not None:
            after_charge(key)
        crash_point("in_tool")
        return {"charge_id": charged["id"], "order_id": order_id, "amount": amount}

    def find_charge(record: EffectRecord) -> Reconciled:
        _wait_at_gate()
        found = client.find_by_key(record.effect_id)
        if found is None:
            return Reconciled.not_done()
        return Reconciled.done(
            {
                "charge_id": found["id"],
                "order_id": found["body"]["order_id"],
                "amount": found["body"]["amount"],
            },
            provider_reference=found["id"],
        )

    if kind == "write":

        def refund_write(order_id: str, amount: float) -> dict[str, Any]:
            """Refund an order (idempotent at the provider through the key)."""
            return charge_body("refund_write", order_id, amount)

        return tool(effect="write", recipient="payments")(refund_write)
    if kind == "irreversible":

        def refund_irreversible(order_id: str, amount: float) -> dict[str, Any]:
            """Refund an order; money moves, so an unknown outcome is reconciled."""
            return charge_body("refund_irreversible", order_id, amount)

        return tool(effect="irreversible", reconcile=find_charge, recipient="payments")(
            refund_irreversible
        )
    if kind == "irreversible-noreconcile":

        def refund_blind(order_id: str, amount: float) -> dict[str, Any]:
            """Refund an order; no way to ask the provider what happened."""
            return charge_body("refund_blind", order_id, amount)

        return tool(effect="irreversible", recipient="payments")(refund_blind)
    if kind == "read":

        def order_status(order_id: str, amount: float) -> dict[str, Any]:
            """Look an order up (a read: may run again)."""
            _log_call(calls_log, "order_status", {"order_id": order_id, "amount": amount})
            found = client.find_by_key(f"order-{order_id}")
            crash_point("in_tool")
            return {"order_id": order_id, "known": found is not None}

        return tool(effect="read")(order_status)
    if kind == "slow":

        def refund_slow(order_id: str, amount: float) -> dict[str, Any]:
            """Refund an order, slowly (idempotent at the provider through the key)."""
            time.sleep(SLOW_SECONDS)
            return charge_body("refund_slow", order_id, amount)

        return tool(effect="write", recipient="payments")(refund_slow)
    raise SystemExit(f"unknown tool class {kind!r}; use one of {TOOL_CLASSES}")


def build_model(tool_names: list[str], parallel: bool) -> ScriptedModel:
    orders = ORDERS if parallel else ORDERS[:1]
    names = tool_names * len(orders) if len(tool_names) == 1 else tool_names
    calls = [
        {"id": f"call_{i + 1}", "name": name, "args": {"order_id": o, "amount": a}}
        for i, ((o, a), name) in enumerate(zip(orders, names, strict=True))
    ]
    return ScriptedModel.turns({"content": "", "tool_calls": calls}, "All refunds are done.")


def _drive(app: Any, input: Any, config: dict[str, Any], path: str, **options: Any) -> None:
    if path == "invoke":
        app.invoke(input, config, **options)
    else:
        for _ in app.stream(input, config, stream_mode=["updates", "events"], **options):
            pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="crash_worker")
    store = parser.add_mutually_exclusive_group()
    store.add_argument("--db", default=os.environ.get("ONCEGRAPH_CRASH_DB"), help="SQLite file")
    store.add_argument("--pg", metavar="DSN", help="PostgreSQL DSN (PgCheckpointer)")
    parser.add_argument("--provider", required=True, help="URL of the fake provider")
    parser.add_argument("--calls-log", required=True)
    parser.add_argument("--thread", default="crash-thread")
    parser.add_argument("--mode", choices=("run", "resume"), required=True)
    parser.add_argument("--path", choices=("invoke", "stream"), default="invoke")
    parser.add_argument("--tool", choices=TOOL_CLASSES, default="write")
    parser.add_argument("--parallel", action="store_true", help="two tool calls in one turn")
    parser.add_argument("--gate", metavar="FILE", help="wait in the tool until FILE exists")
    parser.add_argument("--inside", metavar="FILE", help="created when at the gate")
    parser.add_argument(
        "--durability",
        choices=("sync", "async", "exit"),
        help="LangGraph's durability= for this call (none given: the run's own)",
    )
    parser.add_argument(
        "--hold-lock",
        metavar="FILE",
        help="(--pg only) after the charge, hold row locks in an open transaction",
    )
    args = parser.parse_args(argv)
    if not args.db and not args.pg:
        parser.error("--db (or ONCEGRAPH_CRASH_DB) or --pg is required")
    if args.hold_lock and not args.pg:
        parser.error("--hold-lock needs --pg")
    if bool(args.gate) != bool(args.inside):
        parser.error("--gate and --inside go together")
    if args.gate:
        GATE.update(gate=args.gate, inside=args.inside)

    checkpointer: Checkpointer
    if args.pg:
        checkpointer = PgCheckpointer(postgres_dsn=args.pg)
    else:
        checkpointer = SqliteCheckpointer(args.db)
    after_charge: Callable[[str], None] | None = None
    if args.hold_lock:
        dsn, thread_id, witness = args.pg, args.thread, args.hold_lock
        after_charge = lambda key: hold_row_locks(dsn, thread_id, key, witness)  # noqa: E731
    kinds = ["irreversible-noreconcile", "slow"] if args.tool == "blind+slow" else [args.tool]
    the_tools = [
        build_tool(k, args.provider, args.calls_log, after_charge=after_charge) for k in kinds
    ]
    app = ReactAgent(
        model=build_model([t.name for t in the_tools], args.parallel or len(the_tools) > 1),
        system_prompt="You refund orders.",
        tools=the_tools,
    ).compile(checkpointer=checkpointer)
    config: dict[str, Any] = {"thread_id": args.thread, "tool_timeout": 30}
    user_input = {"messages": [{"role": "user", "content": "Refund my orders, please."}]}
    report: dict[str, Any] = {"outcome": "completed"}
    run: Callable[[], None]
    options = {"durability": args.durability} if args.durability else {}
    given = user_input if args.mode == "run" else None
    run = lambda: _drive(app, given, config, args.path, **options)  # noqa: E731
    try:
        run()
    except NeedsReviewError as exc:
        report.update(outcome="needs_review", effect_id=exc.effect_id, error=str(exc))
    except Exception as exc:  # reported to the test, which decides
        report.update(outcome="error", error_type=type(exc).__name__, error=str(exc))
    latest = app.runs(thread_id=args.thread, limit=1)
    if latest:
        report.update(
            run_id=latest[0].run_id, run_status=str(latest[0].status), run_error=latest[0].error
        )
    if report["outcome"] == "completed":
        state = app.get_state({"thread_id": args.thread}).values
        messages = state["messages"]
        report["final"] = messages[-1].get("content")
        report["tool_messages"] = [
            {"status": m.get("status"), "content": m.get("content")}
            for m in messages
            if m["role"] == "tool"
        ]
        report["history"] = [
            s.config["configurable"]["checkpoint_id"]
            for s in app.get_state_history({"thread_id": args.thread})
        ]
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
