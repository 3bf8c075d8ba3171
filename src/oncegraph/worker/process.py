"""The worker process around a :class:`~oncegraph.worker.worker.Worker`: run it until
SIGTERM or SIGINT, then stop cleanly (claiming stops, unfinished runs are released,
the store is closed) and exit 0. ``oncegraph worker module:app`` calls :func:`run_worker`.
"""

from __future__ import annotations

import asyncio
import signal

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


def run_worker(worker: Worker) -> int:
    """Serve ``worker`` until stopped (:func:`serve`, in a loop of its own); returns the
    exit code."""
    asyncio.run(serve(worker))
    return 0
