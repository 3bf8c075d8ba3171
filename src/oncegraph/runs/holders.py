"""Who holds a running run, and whether they are still there.

A run's status says ``running`` from the moment a process takes it until that process
writes how it stopped. A process that is killed writes nothing, so its runs keep saying
``running``; what tells the truth is the run's holder: its liveness lock (released by the
operating system or the database the moment the process dies) or, for a worker, its lease
(renewed while the worker lives). :func:`holder` reads both, so every surface can show a
run whose holder is gone as *stopped by a crash*, with Continue, from the moment the
lock is gone or the lease has run out.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass

from oncegraph.storage.protocols import Checkpointer, RunLock
from oncegraph.storage.records import RunRecord, RunStatus, now


@dataclass(frozen=True, slots=True)
class Holder:
    """The holder of a ``running`` run. ``alive``: a lease not run out, or its liveness
    lock held (by another process, or by this one); ``last_write``: when the holder last
    wrote the run (a step, a lease renewal)."""

    owner: str | None
    alive: bool
    lease_expires_at: float | None
    last_write: float

    @property
    def crashed(self) -> bool:
        """The run says ``running`` but nobody is running it: its process stopped."""
        return not self.alive

    def as_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)


async def holder_alive(store: Checkpointer, run: RunRecord) -> bool:
    """Is ``run`` (running) held by someone alive: a lease not run out, or its lock?"""
    if run.lease_expires_at is not None and run.lease_expires_at > now():
        return True
    lock = await store.lock_run(run.run_id)
    if lock is None:
        return True
    await lock.release()
    return False


async def holder(store: Checkpointer, run: RunRecord) -> Holder | None:
    """The holder of ``run`` if it is ``running`` (else ``None``: nobody holds it)."""
    if run.status is not RunStatus.RUNNING:
        return None
    return Holder(
        owner=run.lease_owner,
        alive=await holder_alive(store, run),
        lease_expires_at=run.lease_expires_at,
        last_write=run.updated_at,
    )


async def holders(
    store: Checkpointer, runs: Iterable[RunRecord], *, looks: int | None = None
) -> dict[str, Holder]:
    """The holders of the ``running`` runs among ``runs`` (of the first ``looks`` of them
    with no live lease; ``None``: all), by run id, in one pass: the locks are tried
    together, so a store that batches its lock requests (PostgreSQL's lock session) asks
    once for the whole listing, and every lock taken to look is given back at once."""
    running = [r for r in runs if r.status is RunStatus.RUNNING]
    at = now()
    leased = {
        r.run_id for r in running if r.lease_expires_at is not None and r.lease_expires_at > at
    }
    unleased = [r for r in running if r.run_id not in leased]
    tried = unleased if looks is None else unleased[:looks]
    locks = await asyncio.gather(*(store.lock_run(r.run_id) for r in tried), return_exceptions=True)
    await _give_back(
        [lock for lock in locks if lock is not None and not isinstance(lock, BaseException)]
    )
    for lock in locks:
        if isinstance(lock, BaseException):
            raise lock
    free = {r.run_id for r, lock in zip(tried, locks, strict=True) if lock is not None}
    looked = leased | {r.run_id for r in tried}
    return {
        r.run_id: Holder(
            owner=r.lease_owner,
            alive=r.run_id not in free,
            lease_expires_at=r.lease_expires_at,
            last_write=r.updated_at,
        )
        for r in running
        if r.run_id in looked
    }


async def _give_back(locks: list[RunLock]) -> None:
    await asyncio.gather(*(lock.release() for lock in locks))


__all__ = ["Holder", "holder", "holder_alive", "holders"]
