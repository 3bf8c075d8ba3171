"""``Worker``: claims queued runs from PostgreSQL and executes them under a lease.

Invariants:

* **A run executes only under its lease.** Each claimed run is executed by the run
  service with the claim's fencing token (:meth:`RunService.execute`), so every
  checkpoint commit and status update it makes carries that token; once another worker
  claims the run (after this lease expired) those writes raise
  :class:`~oncegraph.errors.LeaseLostError` and write nothing.
* **Heartbeat.** Every ``heartbeat_seconds`` the held leases are renewed, all in one
  statement. A run that ended under its lease (its last commit written, its task not yet
  returned) is not lost and is left alone. A renewal
  that is refused (the token moved on) cancels that run's task at once. A renewal that
  cannot reach the database does not: but when a run's lease has not been renewed for
  ``lease_seconds`` by this process's own clock, the run is cancelled too, so a
  partitioned worker stops working on runs another worker may already hold.
* **Notified, not only polling.** With ``listen`` (the default) a dedicated connection
  LISTENs on ``oncegraph_runs`` (:mod:`oncegraph.worker.listen`): a submit's NOTIFY, sent
  in the transaction that queues the run, wakes an idle worker at once. Polling every
  ``poll_seconds`` stays on as the fallback (a lost notice, a reconnecting listener).
  Once a claim a notice caused found nothing, notices wake the worker at most once per
  :data:`~oncegraph.worker.listen.WAKE_INTERVAL` (a NOTIFY flood costs few claims).
* **Only its own app's runs** (guarantee 15): the claim takes only runs of the app's id that
  its graph can run (:class:`~oncegraph.worker.queue.Runnable`); a run it claimed and
  still finds it cannot run (a version it cannot continue) is handed back to the queue
  untouched and not claimed by it again.
* **Never crash on a run.** A run that fails, parks (``needs_review``), is interrupted
  or loses its lease is logged and dropped; the worker keeps claiming. The store has
  already recorded the run's status (or refused the write when fenced off).
* **Clean shutdown** (:meth:`Worker.stop`, SIGTERM in the CLI): claiming stops; runs
  still executing after ``shutdown_grace_seconds`` are cancelled and released back to
  the queue (lease cleared, token bumped), so another worker picks them up without
  waiting for the lease to expire. A SIGKILLed worker releases nothing: its runs are
  claimed again once their leases expire, and resume from their last checkpoint (the
  effect ledger keeps their tools from acting twice).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from oncegraph._cancel import cancel_and_wait
from oncegraph.app import CompiledGraph
from oncegraph.errors import (
    ForeignRunError,
    IncompatibleVersionError,
    LeaseLostError,
    NeedsReviewError,
    OnceGraphError,
    StaleStateError,
    StorageError,
    ThreadMovedOnError,
)
from oncegraph.runs.masking import process_masker
from oncegraph.runtime.config import RunConfig
from oncegraph.storage.records import RunRecord
from oncegraph.worker.listen import Wakeups, listen_for_runs
from oncegraph.worker.queue import Claimed, Runnable, RunQueue

log = logging.getLogger("oncegraph.worker")


def default_owner() -> str:
    """``host:pid:random``: unique per worker object, readable in the runs table."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass(slots=True)
class _Held:
    run: RunRecord
    token: int
    task: asyncio.Task[None]
    renewed_at: float = field(default_factory=time.monotonic)
    lost: bool = False


class Worker:
    """Execute an app's queued runs: ``await Worker(app, concurrency=4).run_forever()``.

    ``concurrency`` runs at most that many runs at once (one asyncio task each; sync
    nodes and tools use the app's thread pool, grown to at least ``concurrency``
    threads; :meth:`stats` counts its calls stuck after a timeout). ``lease_seconds`` is
    how long a silent worker keeps its runs; ``heartbeat_seconds`` (well under the lease)
    how often leases are renewed; ``poll_seconds`` how long an idle worker waits before
    asking for work again (a NOTIFY wakes it sooner).
    """

    def __init__(
        self,
        app: CompiledGraph,
        *,
        concurrency: int = 1,
        lease_seconds: float = 30.0,
        heartbeat_seconds: float | None = None,
        poll_seconds: float = 0.5,
        shutdown_grace_seconds: float = 0.0,
        owner: str | None = None,
        listen: bool = True,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        if lease_seconds <= 0:
            raise ValueError(f"lease_seconds must be positive, got {lease_seconds}")
        heartbeat = lease_seconds / 3 if heartbeat_seconds is None else heartbeat_seconds
        if not 0 < heartbeat < lease_seconds:
            raise ValueError(
                f"heartbeat_seconds must be between 0 and lease_seconds ({lease_seconds}), "
                f"got {heartbeat}"
            )
        self.app = app
        self.queue = RunQueue(app.store, Runnable.of(app.service))  # type: ignore[arg-type]
        # A run this worker holds is taken over once it has been silent for its lease.
        store = self.queue.store
        if store.claim_timeout is None or store.claim_timeout > lease_seconds:
            store.claim_timeout = lease_seconds
        self.concurrency = concurrency
        self.lease_seconds = lease_seconds
        self.heartbeat_seconds = heartbeat
        self.poll_seconds = poll_seconds
        self.shutdown_grace_seconds = shutdown_grace_seconds
        self.owner = owner or default_owner()
        self.listen = listen
        self.listening = asyncio.Event()  # set once LISTEN is in place (again)
        self.completed = 0  # runs that finished in this worker (any end status)
        # each held run may be in a sync node or tool: never fewer threads than runs
        app.sync_pool.resize(concurrency)
        self._held: dict[str, _Held] = {}
        # Runs this worker claimed but cannot run (handed back to the queue): not claimed
        # again by it, so they wait for a worker of their own version.
        self._not_mine: set[str] = set()
        self._stopping = asyncio.Event()
        self._wake = asyncio.Event()

    # -- control ---------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop claiming and shut down (safe from a signal handler on the worker's loop)."""
        self._stopping.set()
        self._wake.set()

    @property
    def held(self) -> list[str]:
        """Run ids this worker is executing now."""
        return list(self._held)

    def stats(self) -> dict[str, Any]:
        """Runs held and finished; the sync pool's threads, busy and stuck calls."""
        pool = self.app.sync_pool.stats()
        return {
            "held": len(self._held),
            "completed": self.completed,
            "sync_threads": pool.max_workers,
            "sync_busy": pool.busy,
            "sync_stuck": pool.stuck,
            "sync_stuck_calls": list(pool.stuck_calls),
        }

    async def run_forever(self) -> None:
        """Claim and execute runs until :meth:`stop`; then release what is unfinished."""
        await self.app.setup()
        log.info("worker %s started (concurrency %d)", self.owner, self.concurrency)
        heartbeat = asyncio.create_task(self._heartbeat(), name="oncegraph-heartbeat")
        # notices wake the loop at once, but at most once an interval while the claims they
        # cause find nothing: anyone who may connect can NOTIFY, and a flood must not keep
        # this worker claiming
        wakeups = Wakeups(self._wake.set)
        listener = (
            asyncio.create_task(
                listen_for_runs(self.queue.store, wakeups.notice, on_listening=self.listening.set),
                name="oncegraph-listen",
            )
            if self.listen
            else None
        )
        try:
            while not self._stopping.is_set():
                # cleared BEFORE the claim: a notice that arrives during it is not lost
                self._wake.clear()
                free = self.concurrency - len(self._held)
                claimed: list[Claimed] = []
                if free > 0:
                    try:
                        claimed = await self.queue.claim_runs(
                            self.owner, self.lease_seconds, free, skip=self._not_mine
                        )
                        wakeups.claimed(bool(claimed))
                    except OnceGraphError as exc:
                        log.warning("claim failed (retrying): %s", exc)
                for found in claimed:
                    if found.taken_from is not None:
                        log.warning(
                            "run %s (thread %s) taken over from worker %s, whose lease "
                            "expired (it died or went silent); resuming from its last record",
                            found.run.run_id,
                            found.run.thread_id,
                            found.taken_from,
                            extra={"run_id": found.run.run_id, "taken_from": found.taken_from},
                        )
                    self._start(found.run)
                if claimed and len(claimed) == free:
                    continue  # full batch: there may be more work, ask again at once
                with contextlib.suppress(TimeoutError):  # a NOTIFY or a free slot wakes it
                    await asyncio.wait_for(self._wake.wait(), self.poll_seconds)
        finally:
            if listener is not None:
                listener.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await listener
            wakeups.close()
            await self._shutdown()
            heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heartbeat
            log.info("worker %s stopped", self.owner)

    # -- runs ------------------------------------------------------------------------------

    def _start(self, run: RunRecord) -> None:
        task = asyncio.create_task(self._execute(run), name=f"oncegraph-run-{run.run_id}")
        self._held[run.run_id] = _Held(run, run.fencing_token, task)
        task.add_done_callback(functools.partial(self._finished, run.run_id))
        log.info(
            "claimed run %s (thread %s, token %d)", run.run_id, run.thread_id, run.fencing_token
        )

    def _finished(self, run_id: str, _task: object = None) -> None:
        self._held.pop(run_id, None)
        self._wake.set()  # a slot is free

    async def _execute(self, run: RunRecord) -> None:
        config = RunConfig.from_stored(run.config, run.thread_id)
        try:
            result = await self.app.service.execute(run, config, fence=run.fencing_token)
        except LeaseLostError as exc:
            text = await self._masked(run, exc)
            log.warning("run %s: lease lost, stopped without writing: %s", run.run_id, text)
        except (IncompatibleVersionError, ForeignRunError) as exc:
            # Not this worker's to run: hand it back untouched for the right worker.
            self._not_mine.add(run.run_id)
            text = await self._masked(run, exc)
            log.warning("run %s is not this worker's to run; handed back: %s", run.run_id, text)
            with contextlib.suppress(OnceGraphError):
                await self.queue.release(run.run_id, self.owner, run.fencing_token)
        except NeedsReviewError as exc:
            log.warning("run %s parked for review: %s", run.run_id, await self._masked(run, exc))
        except ThreadMovedOnError as exc:  # failed by the run itself: nobody continues it
            log.warning("run %s failed: %s", run.run_id, await self._masked(run, exc))
        except StaleStateError as exc:
            # its input lost the thread to another run: nothing of it was written, so it
            # goes back to the queue and starts on the thread's new head, after that run
            log.warning("run %s: back in the queue: %s", run.run_id, await self._masked(run, exc))
            with contextlib.suppress(OnceGraphError):
                await self.queue.release(run.run_id, self.owner, run.fencing_token)
        except OnceGraphError as exc:
            text = await self._masked(run, exc)
            log.warning("run %s ended with %s: %s", run.run_id, type(exc).__name__, text)
        except Exception as exc:
            if getattr(exc, "oncegraph_run_id", None) == run.run_id:  # a node's own error
                node = getattr(exc, "oncegraph_node", None)
                kind = type(exc).__name__
                text = await self._masked(run, exc)
                log.warning("run %s failed: node %r raised %s: %s", run.run_id, node, kind, text)
            else:
                trace = await self._masked(run, exc, traceback=True)
                log.error("run %s raised an unexpected error:\n%s", run.run_id, trace)
        else:
            self.completed += 1
            if result.interrupts:
                log.info("run %s is waiting for an interrupt answer", run.run_id)
            else:
                log.info("run %s finished", run.run_id)

    async def _masked(self, run: RunRecord, exc: BaseException, *, traceback: bool = False) -> str:
        """``exc``'s text for the log, with what the run's thread holds secret masked
        (its effects' masked arguments); the masks alone if the store cannot say."""
        masker = process_masker()
        if not isinstance(exc, LeaseLostError | StorageError):  # these quote no payload
            with contextlib.suppress(Exception):  # the store cannot say: what is known
                masker.absorb(await self.app.service.masker(thread_ids=(run.thread_id,)))
        return masker.traceback(exc).rstrip() if traceback else masker.text(str(exc))

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_seconds)
            await self._renew_all()

    async def _renew_all(self) -> None:
        """Renew every held lease in one statement (:meth:`RunQueue.renew_many`)."""
        for held in list(self._held.values()):
            if held.lost and not held.task.done():
                held.task.cancel()  # again: a cancellation can be swallowed (see _cancel)
        live = {
            run_id: held
            for run_id, held in list(self._held.items())
            if not held.task.done() and not held.lost
        }
        if not live:
            return
        try:
            ours = await self.queue.renew_many(
                self.owner, {r: h.token for r, h in live.items()}, self.lease_seconds
            )
        except OnceGraphError as exc:
            for run_id, held in live.items():
                if time.monotonic() - held.renewed_at >= self.lease_seconds:
                    self._lose(held, f"lease could not be renewed in time ({exc})")
                else:
                    log.warning("run %s: renew failed (will retry): %s", run_id, exc)
            return
        renewed_at = time.monotonic()
        for run_id, held in live.items():
            if run_id in ours:
                held.renewed_at = renewed_at
            elif not held.task.done():
                self._lose(held, "another worker holds the lease now")

    def _lose(self, held: _Held, why: str) -> None:
        held.lost = True
        log.warning("run %s: %s; cancelling it here", held.run.run_id, why)
        held.task.cancel()

    async def _shutdown(self) -> None:
        active = [h for h in self._held.values() if not h.task.done()]
        if active and self.shutdown_grace_seconds > 0:
            await asyncio.wait([h.task for h in active], timeout=self.shutdown_grace_seconds)
        unfinished = [h for h in active if not h.task.done()]
        await asyncio.gather(*(cancel_and_wait(h.task) for h in unfinished))
        for held in unfinished:
            if held.lost:
                continue
            try:
                if await self.queue.release(held.run.run_id, self.owner, held.token):
                    log.info("released run %s", held.run.run_id)
            except OnceGraphError as exc:
                log.warning(
                    "could not release run %s (its lease will expire): %s", held.run.run_id, exc
                )


__all__ = ["Worker", "default_owner"]
