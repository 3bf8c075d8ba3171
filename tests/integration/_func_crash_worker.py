"""The functional API's crash-matrix worker: one ``@entrypoint`` run (or its resume) in
its own OS process.

The workflow looks an order up with a plain ``@task`` (recorded like a read), then
refunds it with a ``@task`` of class ``--tool`` (``write``, ``irreversible`` with a
reconcile hook, or ``irreversible-noreconcile``) that charges the fake provider with
``current_effect().idempotency_key`` and marks ``crash_point("in_tool")`` once the
provider answered. Every task body appends one JSON line to ``--calls-log`` BEFORE it
touches the provider, so the test can count how often a body really ran, across
processes.

The last stdout line is one JSON report::

    {"outcome": "completed" | "needs_review" | "error", "run_status", "result", "error"}

Crashes come from the environment (``ONCEGRAPH_CRASH_AT``), set by the test harness.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from oncegraph import NeedsReviewError, Reconciled, current_effect
from oncegraph.func import entrypoint, task
from oncegraph.runtime.faults import crash_point, declare_crash_point
from oncegraph.storage.checkpointer import PgCheckpointer, SqliteCheckpointer
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import EffectRecord
from oncegraph.testing.provider import ProviderClient

declare_crash_point("in_tool")


def _log(path: str, name: str, key: str | None) -> None:
    line = json.dumps({"task": name, "key": key})
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def build(kind: str, provider: str, calls_log: str, store: Checkpointer) -> Any:
    client = ProviderClient(provider)

    @task
    def lookup(order_id: str) -> dict[str, Any]:
        _log(calls_log, "lookup", None)
        return {"order_id": order_id, "amount": 59.0}

    def charge(order: dict[str, Any]) -> dict[str, Any]:
        key = current_effect().idempotency_key
        _log(calls_log, "refund", key)
        charged = client.charge(order["amount"], "eur", order["order_id"], idempotency_key=key)
        crash_point("in_tool")
        return {"charge_id": charged["id"], "order_id": order["order_id"]}

    def find_charge(record: EffectRecord) -> Reconciled:
        found = client.find_by_key(record.effect_id)
        if found is None:
            return Reconciled.not_done()
        result = {"charge_id": found["id"], "order_id": found["body"]["order_id"]}
        return Reconciled.done(result, provider_reference=found["id"])

    if kind == "write":
        refund = task(effect="write", recipient="payments", name="refund")(charge)
    elif kind == "irreversible":
        refund = task(
            effect="irreversible", reconcile=find_charge, recipient="payments", name="refund"
        )(charge)
    elif kind == "irreversible-noreconcile":
        refund = task(effect="irreversible", recipient="payments", name="refund")(charge)
    else:
        raise SystemExit(f"unknown task class {kind!r}")

    @entrypoint(checkpointer=store)
    def refund_flow(order_id: str) -> dict[str, Any]:
        order = lookup(order_id).result()
        receipt = refund(order).result()
        return {"receipt": receipt}

    return refund_flow


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="func_crash_worker")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--db", help="SQLite file")
    where.add_argument("--pg", metavar="DSN", help="PostgreSQL DSN")
    parser.add_argument("--provider", required=True)
    parser.add_argument("--calls-log", required=True)
    parser.add_argument("--thread", default="func-crash")
    parser.add_argument("--mode", choices=("run", "resume"), required=True)
    parser.add_argument("--path", choices=("invoke", "stream"), default="invoke")
    parser.add_argument("--tool", default="write")
    args = parser.parse_args(argv)
    store: Checkpointer = (
        PgCheckpointer(postgres_dsn=args.pg) if args.pg else SqliteCheckpointer(args.db)
    )
    flow = build(args.tool, args.provider, args.calls_log, store)
    config = {"configurable": {"thread_id": args.thread}}
    given = "1042" if args.mode == "run" else None
    report: dict[str, Any] = {"outcome": "completed"}
    try:
        if args.path == "invoke":
            report["result"] = flow.invoke(given, config)
        else:
            for chunk in flow.stream(given, config, stream_mode="updates"):
                if "refund_flow" in chunk:
                    report["result"] = chunk["refund_flow"]
    except NeedsReviewError as exc:
        report.update(outcome="needs_review", effect_id=exc.effect_id)
    except Exception as exc:  # reported to the test, which decides
        report.update(outcome="error", error=f"{type(exc).__name__}: {exc}")
    latest = flow.runs(thread_id=args.thread, limit=1)
    if latest:
        report["run_status"] = str(latest[0].status)
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
