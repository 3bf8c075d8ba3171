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
  silent may still have a call in flight, so its run is not taken (law 13). A ``running``
  run that never had a lease was started in-process by ``invoke`` and is its caller's to
  continue. ``interrupted``,
  ``needs_review``, ``failed``, ``completed`` and ``abandoned`` runs are never claimed:
  an interrupt waits for its answer and a parked run for an operator. ``failed`` runs
  are NOT retried automatically either: a node raised, and re-running it on a timer
  would repeat the failure (and its model calls) forever; an operator continues it
  (``invoke(None, config)``) or abandons it.
* **One run per thread at a time, first in first out.** A run is claimable only if its
  thread has no OLDER unfinished run (``queued``, ``running``, ``interrupted``,
  ``needs_review``, ``failed``): a second submit on a busy thread waits behind the
  first and is claimed once the first completes or is abandoned.
* **Lease times come from the database clock** (``clock_timestamp()``), so workers on
  machines with skewed clocks agree on when a lease has expired.
* ``release`` is for a clean shutdown: the run goes back to ``queued`` with its lease
  cleared and its token bumped (anything still in flight under the old token is fenced
  off). A run that had already started continues from its head when claimed again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from oncegraph.errors import StorageError
from oncegraph.storage.records import RunRecord, RunStatus
from oncegraph.storage.sql import statements as S
from oncegraph.storage.sql.pg_locks import HELD_BY_OTHERS
from oncegraph.storage.sql.postgres import PgCheckpointer, _mapped

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

# Params: lease_owner, lease_seconds, limit.
CLAIM = f"""
WITH picked AS (
    SELECT r.run_id FROM oncegraph_runs r
    WHERE (
        r.status = '{RunStatus.QUEUED}'
        OR (r.status = '{RunStatus.RUNNING}' AND r.lease_expires_at IS NOT NULL
            AND r.lease_expires_at < {_DB_NOW})
    )
    AND NOT {HELD_BY_OTHERS}
    AND NOT EXISTS (
        SELECT 1 FROM oncegraph_runs o
        WHERE o.thread_id = r.thread_id
          AND o.status IN ({_UNFINISHED})
          AND (o.created_at < r.created_at
               OR (o.created_at = r.created_at AND o.run_id < r.run_id))
    )
    ORDER BY r.created_at, r.run_id
    LIMIT %s
    FOR UPDATE OF r SKIP LOCKED
)
UPDATE oncegraph_runs u
SET status = '{RunStatus.RUNNING}', lease_owner = %s,
    lease_expires_at = {_DB_NOW} + %s, fencing_token = u.fencing_token + 1,
    updated_at = {_DB_NOW}
FROM picked WHERE u.run_id = picked.run_id
RETURNING {_RETURNING}
"""

# Params: lease_seconds, run_id, lease_owner, fencing_token.
RENEW = f"""
UPDATE oncegraph_runs SET lease_expires_at = {_DB_NOW} + %s, updated_at = {_DB_NOW}
WHERE run_id = %s AND lease_owner = %s AND fencing_token = %s
  AND status = '{RunStatus.RUNNING}'
"""

# Params: run_id, lease_owner, fencing_token.
RELEASE = f"""
UPDATE oncegraph_runs
SET status = '{RunStatus.QUEUED}', lease_owner = NULL, lease_expires_at = NULL,
    fencing_token = fencing_token + 1, updated_at = {_DB_NOW}
WHERE run_id = %s AND lease_owner = %s AND fencing_token = %s
  AND status = '{RunStatus.RUNNING}'
"""


class RunQueue:
    """Claim/renew/release over a :class:`PgCheckpointer`'s pool (this loop's pool).

    Lease owners are free-form strings (``host:pid:uuid`` by default in the worker);
    a lease is held by the pair (owner, fencing token).
    """

    def __init__(self, store: PgCheckpointer) -> None:
        if not isinstance(store, PgCheckpointer):
            raise StorageError(
                "workers need PostgreSQL: compile the app with "
                f"checkpointer=PgCheckpointer(dsn), not {type(store).__name__}"
            )
        self.store = store

    async def claim(self, owner: str, lease_seconds: float, limit: int) -> list[RunRecord]:
        """Claim up to ``limit`` runs for ``owner``; each comes back with its new token."""
        if limit <= 0:
            return []
        found = await self._run("claim", CLAIM, (limit, owner, lease_seconds), fetch=True)
        assert isinstance(found, list)
        return [self.store.rows.run_from_row(r) for r in found]

    async def renew(self, run_id: str, owner: str, token: int, lease_seconds: float) -> bool:
        """Extend the lease; False when it is no longer ours (another claim bumped the
        token, the run was released, or it left ``running``)."""
        count = await self._run("renew", RENEW, (lease_seconds, run_id, owner, token))
        return bool(count == 1)

    async def release(self, run_id: str, owner: str, token: int) -> bool:
        """Give a running run back to the queue; False if the lease was not ours any more."""
        return bool(await self._run("release", RELEASE, (run_id, owner, token)) == 1)

    async def _run(self, op: str, sql: str, params: Sequence[Any], *, fetch: bool = False) -> Any:
        pool = await self.store._ready()
        with _mapped(op, self.store._where):
            async with pool.connection() as conn:
                cur = await conn.execute(sql, params)
                if fetch:
                    return await cur.fetchall()
                return cur.rowcount


__all__ = ["CLAIM", "RELEASE", "RENEW", "RunQueue"]
