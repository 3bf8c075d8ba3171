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

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from oncegraph.errors import ConfigError, StorageError
from oncegraph.storage.records import RunRecord, RunStatus
from oncegraph.storage.sql import statements as S
from oncegraph.storage.sql.pg_locks import HELD_BY_OTHERS
from oncegraph.storage.sql.postgres import PgCheckpointer, _mapped

if TYPE_CHECKING:
    from oncegraph.runs.service import RunService

_DB_NOW = "extract(epoch from clock_timestamp())"
_UNFINISHED = ", ".join(
    f"'{s}'"
    for s in (
        RunStatus.QUEUED,
        RunStatus.RUNNING,
        RunStatus.INTERRUPTED,
        RunStatus.NEEDS_REVIEW,
        RunStatus.FAILED,
        RunStatus.PAUSED,
    )
)
_RETURNING = ", ".join(f"u.{c}" for c in S.RUN_COLUMNS)
# HELD_BY_OTHERS of another run ``o`` of the thread (its holder's session is alive)
_HELD_O = HELD_BY_OTHERS.replace("r.run_id", "o.run_id")

# Named params (:func:`claim_params`): app, tenant (NULL: any), fingerprints, versions,
# skip (run ids), limit, owner, lease (seconds).
#
# ``c`` lists the claimable rows of this app in queue order; it is a subquery with its own
# ORDER BY (never flattened), so the planner knows its order and walks it with a nested
# loop into ``r``, testing the costly conditions (live lock holders, an older unfinished
# run on the thread) row by row and stopping at the LIMIT: a claim costs the rows it
# looks at, not the length of the queue. ``c`` is two walks merged in queue order (a
# Merge Append): the queued runs, from the partial index ``oncegraph_runs_queued`` (app,
# created_at, run_id; schema migration 10), already in that order; and the running runs
# whose lease has expired, from ``oncegraph_runs_leases`` (lease_expires_at, of running
# runs), sorted (normally none, or the few of a worker that died). One index of both
# (migration 6's ``oncegraph_runs_claimable``) made every claim walk past each running run
# of the app before the first queued one: 4.5 ms a claim with 5,000 running, 1.4 ms now.
# The expired walk compares with the time read once, as an init plan's parameter (a
# volatile call in the comparison would keep the index from being used). ``r``'s own
# conditions are repeated so that the lock re-checks them on the newest row version.
_CLAIMABLE = f"""(
        r.status = '{RunStatus.QUEUED}'
        OR (r.status = '{RunStatus.RUNNING}' AND r.lease_expires_at IS NOT NULL
            AND r.lease_expires_at < {_DB_NOW})
    )"""
_MINE = """COALESCE(r.app_id, r.workflow_name) = %(app)s
           AND (%(tenant)s::text IS NULL OR r.tenant = %(tenant)s::text)
           AND (r.graph_fingerprint = ANY(%(fingerprints)s::text[])
                OR r.workflow_version = ANY(%(versions)s::text[]))
           AND NOT (r.run_id = ANY(%(skip)s::text[]))"""
CLAIM = f"""
WITH picked AS (
    SELECT r.run_id, r.status AS was_status, r.lease_owner AS was_owner
    FROM (
        (SELECT r.run_id, r.created_at FROM oncegraph_runs r
         WHERE r.status = '{RunStatus.QUEUED}' AND {_MINE}
         ORDER BY r.created_at, r.run_id)
        UNION ALL
        (SELECT r.run_id, r.created_at FROM oncegraph_runs r
         WHERE r.status = '{RunStatus.RUNNING}' AND r.lease_expires_at < (SELECT {_DB_NOW})
           AND {_MINE}
         ORDER BY r.created_at, r.run_id)
    ) c
    JOIN oncegraph_runs r ON r.run_id = c.run_id
    WHERE {_CLAIMABLE}
    AND NOT {HELD_BY_OTHERS}
    AND NOT EXISTS (
        SELECT 1 FROM oncegraph_runs o
        WHERE o.thread_id = r.thread_id AND o.run_id <> r.run_id
          AND ((o.status IN ({_UNFINISHED}) AND o.seq < r.seq)
               OR (o.status = '{RunStatus.RUNNING}'
                   AND (o.lease_expires_at >= {_DB_NOW} OR {_HELD_O})))
    )
    ORDER BY c.created_at, c.run_id
    LIMIT %(limit)s
    FOR UPDATE OF r SKIP LOCKED
)
UPDATE oncegraph_runs u
SET status = '{RunStatus.RUNNING}', lease_owner = %(owner)s,
    lease_expires_at = {_DB_NOW} + %(lease)s, fencing_token = u.fencing_token + 1,
    updated_at = {_DB_NOW}
FROM picked WHERE u.run_id = picked.run_id
RETURNING {_RETURNING}, picked.was_status, picked.was_owner
"""

# Params: lease_seconds, run_id, lease_owner, fencing_token.
RENEW = f"""
UPDATE oncegraph_runs SET lease_expires_at = {_DB_NOW} + %s, updated_at = {_DB_NOW}
WHERE run_id = %s AND lease_owner = %s AND fencing_token = %s
  AND status = '{RunStatus.RUNNING}'
"""

# Params: run ids, their tokens, lease_seconds, lease_owner. Renews every lease held with
# its token in one statement and returns the run ids that are still this owner's: renewed,
# or ended (no longer ``running``) under the same token, which no one took from it.
RENEW_MANY = f"""
WITH held AS (
    SELECT * FROM unnest(%s::text[], %s::bigint[]) AS h(run_id, token)
), renewed AS (
    UPDATE oncegraph_runs r SET lease_expires_at = {_DB_NOW} + %s, updated_at = {_DB_NOW}
    FROM held h
    WHERE r.run_id = h.run_id AND r.fencing_token = h.token AND r.lease_owner = %s
      AND r.status = '{RunStatus.RUNNING}'
    RETURNING r.run_id
)
SELECT h.run_id FROM held h
WHERE h.run_id IN (SELECT run_id FROM renewed)
   OR EXISTS (
        SELECT 1 FROM oncegraph_runs r
        WHERE r.run_id = h.run_id AND r.fencing_token = h.token
          AND r.status <> '{RunStatus.RUNNING}'
   )
"""

# Params: run_id, lease_owner, fencing_token.
RELEASE = f"""
UPDATE oncegraph_runs
SET status = '{RunStatus.QUEUED}', lease_owner = NULL, lease_expires_at = NULL,
    fencing_token = fencing_token + 1, updated_at = {_DB_NOW}
WHERE run_id = %s AND lease_owner = %s AND fencing_token = %s
  AND status = '{RunStatus.RUNNING}'
"""


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
        found = await self._run("claim", CLAIM, params, fetch=True)
        assert isinstance(found, list)
        return [
            Claimed(
                self.store.rows.run_from_row(r[:-2]),
                r[-1] if r[-2] == RunStatus.RUNNING and r[-1] else None,
            )
            for r in found
        ]

    async def renew(self, run_id: str, owner: str, token: int, lease_seconds: float) -> bool:
        """Extend the lease; False when it is no longer ours (another claim bumped the
        token, the run was released, or it left ``running``)."""
        count = await self._run("renew", RENEW, (lease_seconds, run_id, owner, token))
        return bool(count == 1)

    async def renew_many(
        self, owner: str, held: Mapping[str, int], lease_seconds: float
    ) -> set[str]:
        """Extend every lease in ``held`` (run id -> token) in one round trip; returns the
        run ids still ``owner``'s: renewed, or ended under that token (a run whose last
        commit is written but whose task has not returned yet is not lost). A run missing
        from the answer was taken: another claim bumped its token, or it was released or
        abandoned."""
        if not held:
            return set()
        ids = list(held)
        params = (ids, [held[r] for r in ids], lease_seconds, owner)
        found = await self._run("renew", RENEW_MANY, params, fetch=True)
        return {r[0] for r in found}

    async def release(self, run_id: str, owner: str, token: int) -> bool:
        """Give a running run back to the queue; False if the lease was not ours any more."""
        return bool(await self._run("release", RELEASE, (run_id, owner, token)) == 1)

    async def _run(
        self, op: str, sql: str, params: Sequence[Any] | Mapping[str, Any], *, fetch: bool = False
    ) -> Any:
        pool = await self.store._ready()
        with _mapped(op, self.store._where):
            async with pool.connection() as conn:
                cur = await conn.execute(sql, params)
                if fetch:
                    return await cur.fetchall()
                return cur.rowcount


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
