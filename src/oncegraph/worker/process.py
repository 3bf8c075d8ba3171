"""The worker process around a :class:`~oncegraph.worker.worker.Worker`: run it until
SIGTERM or SIGINT, then stop cleanly (claiming stops, unfinished runs are released,
the store is closed) and exit 0. ``oncegraph worker module:app`` calls :func:`run_worker`.
"""

from __future__ import annotations

import asyncio
import signal

from oncegraph.app import CompiledGraph
from oncegraph.worker.worker import Worker


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
    if isinstance(target, CompiledGraph):
        app = target
    else:
        from oncegraph.loading import load_app

        app = load_app(target)
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


__all__ = ["run_worker", "serve"]
