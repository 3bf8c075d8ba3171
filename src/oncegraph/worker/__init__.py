"""Distributed workers over PostgreSQL: claim queued runs, hold them under a lease with a
heartbeat and a fencing token, and resume the runs of workers that died.

``app.submit(input, config)`` enqueues (and NOTIFYs idle workers) and returns a handle
(``result(timeout)``, ``status()``, ``cancel()``); ``oncegraph worker module:app
--concurrency N`` (or ``python -m oncegraph.worker module:app``) executes. See
:mod:`oncegraph.worker.queue` for what is claimable and :mod:`oncegraph.worker.worker`
for the lease discipline.
"""

from __future__ import annotations

from oncegraph.worker.queue import Runnable, RunQueue
from oncegraph.worker.worker import Worker, default_owner

__all__ = ["RunQueue", "Runnable", "Worker", "default_owner"]
