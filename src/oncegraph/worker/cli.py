"""The worker process: ``oncegraph worker module:app`` / ``python -m oncegraph.worker``.

``module:app`` names a module attribute that is a compiled app (a
:class:`~oncegraph.app.CompiledGraph` with a ``PgCheckpointer``) or a zero-argument
factory returning one; the current directory is importable, as with uvicorn. SIGTERM and
SIGINT stop the worker cleanly (claiming stops, unfinished runs are released) and the
process exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import os
import signal
import sys
from typing import Any

from oncegraph.app import CompiledGraph
from oncegraph.errors import ConfigError
from oncegraph.worker.worker import Worker


def load_app(target: str) -> CompiledGraph:
    """Import ``module:attr`` and return the compiled app it names (calling a factory)."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"expected module:attribute (e.g. myapp.agent:app), got {target!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise ConfigError(
            f"cannot import {module_name!r} ({exc}); run the worker from the directory that "
            "contains it or put it on PYTHONPATH"
        ) from exc
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigError(f"module {module_name!r} has no attribute {attr!r}") from None
    if not isinstance(obj, CompiledGraph) and callable(obj):
        obj = obj()
    if not isinstance(obj, CompiledGraph):
        raise ConfigError(
            f"{target} is a {type(obj).__name__}, not a compiled app; point at the result of "
            "graph.compile(checkpointer=PgCheckpointer(dsn)) or a function returning it"
        )
    return obj


async def serve(worker: Worker) -> None:
    """Run ``worker`` until SIGTERM/SIGINT, then shut it down cleanly."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, worker.stop)
    try:
        await worker.run_forever()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        store = worker.app.checkpointer
        closer = getattr(store, "aclose", None)
        if closer is not None:
            await closer()


def run_worker(
    target: str | CompiledGraph,
    *,
    concurrency: int = 1,
    lease_seconds: float = 30.0,
    heartbeat_seconds: float | None = None,
    poll_seconds: float = 0.5,
    shutdown_grace_seconds: float = 0.0,
    owner: str | None = None,
) -> int:
    """Serve the app (or ``module:app``) until stopped; returns the exit code."""
    app = target if isinstance(target, CompiledGraph) else load_app(target)
    worker = Worker(
        app,
        concurrency=concurrency,
        lease_seconds=lease_seconds,
        heartbeat_seconds=heartbeat_seconds,
        poll_seconds=poll_seconds,
        shutdown_grace_seconds=shutdown_grace_seconds,
        owner=owner,
    )
    asyncio.run(serve(worker))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="oncegraph worker", description="Execute queued runs of an app from PostgreSQL."
    )
    parser.add_argument("app", help="module:attribute naming the compiled app (or a factory)")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--lease", type=float, default=30.0, help="lease seconds")
    parser.add_argument("--heartbeat", type=float, default=None, help="default: lease / 3")
    parser.add_argument("--poll", type=float, default=0.5, help="idle poll seconds")
    parser.add_argument("--grace", type=float, default=0.0, help="shutdown grace seconds")
    parser.add_argument("--owner", default=None, help="lease owner name (default host:pid:id)")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s [%(process)d] %(message)s",
    )
    try:
        app = load_app(args.app)
    except ConfigError as exc:
        print(f"oncegraph worker: {exc}", file=sys.stderr)
        return 2
    return run_worker(
        app,
        concurrency=args.concurrency,
        lease_seconds=args.lease,
        heartbeat_seconds=args.heartbeat,
        poll_seconds=args.poll,
        shutdown_grace_seconds=args.grace,
        owner=args.owner,
    )


__all__ = ["load_app", "main", "run_worker", "serve"]
