"""The run queue in PostgreSQL: claim, renew and release leases on ``oncegraph_runs``.

Invariants:

* **A claim is one statement.** ``claim`` picks rows with ``FOR UPDATE SKIP LOCKED`` and
  updates them in the same statement, so concurrent claimers (threads, processes,
  machines) never receive the same run: a row another claimer holds is skipped, and a
  row it has just claimed no longer matches (PostgreSQL re-checks the ``WHERE`` clause
  on the newest row version before locking it).
* **Every claim bumps ``fencing_token``.** The token returned with a claimed run is the
  one its writes must carry (``RunService.execute(run, fence=token)``); the store refuses
  a write with an older token (:class:`~oncegraph.errors.LeaseLostError`), so a worker
  that lost its lease (paused, partitioned) cannot write afterwards.
* **Claimable** means: ``queued``, or ``running`` with a lease that has expired (its
  worker died or stopped heartbeating), and in both cases not locked by a live session
  (:data:`~oncegraph.storage.sql.pg_locks.HELD_BY_OTHERS`): a holder that is alive but
  silent may still have a call in flight, so its run is not taken (guarantee 13). A ``running``
  run that never had a lease was started in-process by ``invoke`` and is its caller's to
  continue. ``interrupted``,
  ``needs_review``, ``failed``, ``completed`` and ``abandoned`` runs are never claimed:
  an interrupt waits for its answer and a parked run for an operator. ``failed`` runs
  are NOT retried automatically either: a node raised, and re-running it on a timer
  would repeat the failure (and its model calls) forever; an operator continues it
  (``invoke(None, config)``) or abandons it.
* **One run per thread at a time, first in first out, in the database's order.** A run
  is claimable only if its thread has no EARLIER unfinished run (``queued``,
  ``running``, ``interrupted``, ``needs_review``, ``failed``), earlier as the database
  placed them (``seq``, set by the insert; never ``created_at`` or the run id, which are
  the submitter's clock), and no OTHER run of the thread, earlier or not, is ``running``
  with a live lease or a live holder's lock: a second submit on a busy thread waits
  behind the first and is claimed once the first completes or is abandoned, whatever
  the submitters' clocks said.
* **Lease times come from the database clock** (``clock_timestamp()``), so workers on
  machines with skewed clocks agree on when a lease has expired.
* **A worker claims only its own app's runs** (guarantee 15): ``app_id`` must match (a row
  with none belongs to its ``workflow_name``), and the run must be one this worker's
  graph can run: its ``graph_fingerprint`` is the graph's own or a registered previous
  version's, or its ``workflow_version`` has a registered migration or previous version.
  Any other run stays queued, untouched, for the workers of its own app and version:
  two apps on one database never run each other's runs, even under one name. A worker
  of a tenant-bound app (``app.for_tenant(t)``) claims only that tenant's runs.
* ``release`` is for a clean shutdown: the run goes back to ``queued`` with its lease
  cleared and its token bumped (anything still in flight under the old token is fenced
  off). A run that had already started continues from its head when claimed again.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from oncegraph.errors import ConfigError, StorageError
from oncegraph.storage.records import RunRecord, RunStatus
from oncegraph.storage.sql.pg_queue import CLAIM, RELEASE, RENEW, RENEW_MANY
from oncegraph.storage.sql.postgres import PgCheckpointer

if TYPE_CHECKING:
    from oncegraph.runs.service import RunService


@dataclass(frozen=True, slots=True)
class Runnable:
    """Which queued runs a worker's graph can run (see the module docstring)."""

    app_id: str
    fingerprints: tuple[str, ...]  # its own, and its registered previous versions'
    versions: tuple[str, ...] = ()  # versions with a registered migration or previous graph
    tenant: str | None = None  # a tenant-bound app's workers claim only that tenant's runs

    @classmethod
    def of(cls, service: RunService) -> Runnable:
        """What ``service`` (an app's run service) can run."""
        if service.scope is None or service.identity is None or service.versions is None:
            raise ConfigError("a worker needs a compiled app's run service, not a read-only one")
        gate = service.versions
        fingerprints = {service.identity.fingerprint}
        fingerprints.update(spec.fingerprint() for spec in gate.previous.values())
        versions = (set(gate.migrations) | set(gate.previous)) - {service.identity.version}
        return cls(
            service.scope.app_id,
            tuple(sorted(fingerprints)),
            tuple(sorted(versions)),
            service.scope.tenant,
        )


def claim_params(
    runnable: Runnable,
    owner: str,
    lease_seconds: float,
    limit: int,
    *,
    skip: Collection[str] = (),
) -> dict[str, Any]:
    """:data:`CLAIM`'s parameters: up to ``limit`` runs ``runnable`` names, except the run
    ids in ``skip``, for ``owner`` under a lease of ``lease_seconds``."""
    return {
        "app": runnable.app_id,
        "tenant": runnable.tenant,
        "fingerprints": list(runnable.fingerprints),
        "versions": list(runnable.versions),
        "skip": list(skip),
        "limit": limit,
        "owner": owner,
        "lease": lease_seconds,
    }


@dataclass(frozen=True, slots=True)
class Claimed:
    """A claimed run; ``taken_from``: the owner of the expired lease it was taken over
    from (its worker died or went silent), None for a queued run."""

    run: RunRecord
    taken_from: str | None = None


class RunQueue:
    """Claim/renew/release over a :class:`PgCheckpointer`'s pool (this loop's pool), for
    the runs ``runnable`` names (one app's; see :meth:`Runnable.of`).

    Lease owners are free-form strings (``host:pid:uuid`` by default in the worker);
    a lease is held by the pair (owner, fencing token).
    """

    def __init__(self, store: PgCheckpointer, runnable: Runnable) -> None:
        if not isinstance(store, PgCheckpointer):
            raise StorageError(
                "workers need PostgreSQL: compile the app with "
                f"checkpointer=PgCheckpointer(dsn), not {type(store).__name__}"
            )
        self.store = store
        self.runnable = runnable
        self._queue = store.run_queue()  # the claim/renew/release statements

    async def claim(
        self,
        owner: str,
        lease_seconds: float,
        limit: int,
        *,
        skip: Collection[str] = (),
    ) -> list[RunRecord]:
        """Claim up to ``limit`` runs of this queue's app that its graph can run, except
        the run ids in ``skip``, for ``owner``; each comes back with its new token."""
        return [c.run for c in await self.claim_runs(owner, lease_seconds, limit, skip=skip)]

    async def claim_runs(
        self,
        owner: str,
        lease_seconds: float,
        limit: int,
        *,
        skip: Collection[str] = (),
    ) -> list[Claimed]:
        """:meth:`claim`, saying of each run whose lease it took over from a silent holder."""
        if limit <= 0:
            return []
        params = claim_params(self.runnable, owner, lease_seconds, limit, skip=skip)
        return [
            Claimed(
                self.store.rows.run_from_row(r[:-2]),
                r[-1] if r[-2] == RunStatus.RUNNING and r[-1] else None,
            )
            for r in await self._queue.claim(params)
        ]

    async def renew(self, run_id: str, owner: str, token: int, lease_seconds: float) -> bool:
        """Extend the lease; False when it is no longer ours (another claim bumped the
        token, the run was released, or it left ``running``)."""
        return await self._queue.renew(run_id, owner, token, lease_seconds)

    async def renew_many(
        self, owner: str, held: Mapping[str, int], lease_seconds: float
    ) -> set[str]:
        """Extend every lease in ``held`` (run id -> token) in one round trip; returns the
        run ids still ``owner``'s: renewed, or ended under that token (a run whose last
        commit is written but whose task has not returned yet is not lost). A run missing
        from the answer was taken: another claim bumped its token, or it was released or
        abandoned."""
        return await self._queue.renew_many(owner, held, lease_seconds)

    async def release(self, run_id: str, owner: str, token: int) -> bool:
        """Give a running run back to the queue; False if the lease was not ours any more."""
        return await self._queue.release(run_id, owner, token)


__all__ = [
    "CLAIM",
    "RELEASE",
    "RENEW",
    "RENEW_MANY",
    "Claimed",
    "RunQueue",
    "Runnable",
    "claim_params",
]
