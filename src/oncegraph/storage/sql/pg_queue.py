"""The run queue's statements on ``oncegraph_runs``: a queued run's notice, and the claim,
renew and release of leases.

This is PostgreSQL's side of the distributed worker (:mod:`oncegraph.worker.queue` keeps
the worker's loop and says which runs an app's worker may claim): a claim is ONE
statement (``FOR UPDATE SKIP LOCKED`` and the update together), every claim bumps the
run's ``fencing_token``, lease times come from the database clock, and a run whose
holder's session is alive is never taken (see that module's docstring for the rules).
:class:`PgRunQueue` is what :meth:`PgCheckpointer.run_queue` returns.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from oncegraph.storage.records import RunStatus
from oncegraph.storage.sql import statements as S
from oncegraph.storage.sql.pg_locks import HELD_BY_OTHERS

# Workers LISTEN on this channel; a queued run is announced in the transaction that
# inserts it, so the notice is delivered exactly when the run becomes visible.
RUNS_CHANNEL = "oncegraph_runs"
RUN_INSERT_NOTIFY = (
    f"WITH ins AS ({S.RUN_INSERT} RETURNING run_id) "
    f"SELECT pg_notify('{RUNS_CHANNEL}', ins.run_id) FROM ins"
)

# Params: RUN_FENCE_STATUS's (lease_owner, status, error, updated_at, run_id, expected
# token). An answered run fenced into ``queued`` and announced by one statement: its
# row (RUN_COLUMNS), then the notice's (empty) text. The notice is delivered when the
# transaction commits, so a woken worker finds the run queued.
QUEUE_FENCE_NOTIFY = (
    f"WITH u AS ({S.RUN_FENCE_STATUS}) "
    f"SELECT u.*, pg_notify('{RUNS_CHANNEL}', u.run_id)::text FROM u"
)

# Params: channel, run_id. A run made ``queued`` by an update (an answer queued for the
# workers) is announced after its transaction, so the notice comes once it is visible.
ANNOUNCE = "SELECT pg_notify(%s, %s)"

Read = Callable[[str, str, Any], Awaitable[list[Any]]]
"""``(op, sql, params)`` -> rows, on the store's pool (driver errors mapped)."""
Write = Callable[[str, str, Any], Awaitable[int]]
"""``(op, sql, params)`` -> rows changed."""

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

# Params: run ids, their tokens, lease_owner, lease_seconds. Renews every lease held with
# its token in one statement and returns the run ids that are still this owner's: renewed,
# or ended (no longer ``running``) under the same token, which no one took from it.
#
# ``locked`` takes the rows' locks in run-id order (bytewise, ``COLLATE "C"``, the order a
# Python sort of the ids gives) before the update: a group commit (:mod:`.pg_group`)
# updates several runs of this process in one transaction, in that order too, so the two
# can never wait for each other in a cycle. An UPDATE ... FROM the ids alone locked them
# in whatever order its join produced, and a renewal and a group commit of the same runs
# deadlocked (PostgreSQL aborted one of them after its deadlock_timeout).
RENEW_MANY = f"""
WITH held AS (
    SELECT * FROM unnest(%s::text[], %s::bigint[]) AS h(run_id, token)
), locked AS (
    SELECT r.run_id FROM oncegraph_runs r JOIN held h ON r.run_id = h.run_id
    WHERE r.fencing_token = h.token AND r.lease_owner = %s
      AND r.status = '{RunStatus.RUNNING}'
    ORDER BY r.run_id COLLATE "C"
    FOR UPDATE OF r
), renewed AS (
    UPDATE oncegraph_runs r SET lease_expires_at = {_DB_NOW} + %s, updated_at = {_DB_NOW}
    FROM locked l
    WHERE r.run_id = l.run_id
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

# Params: run ids, their tokens. The runs among them that ended (are no longer
# ``running``) under the same token: no one took them.
ENDED_UNDER = f"""
SELECT r.run_id FROM oncegraph_runs r
JOIN unnest(%s::text[], %s::bigint[]) AS h(run_id, token) ON r.run_id = h.run_id
WHERE r.fencing_token = h.token AND r.status <> '{RunStatus.RUNNING}'
"""

# Params: run_id, lease_owner, fencing_token.
RELEASE = f"""
UPDATE oncegraph_runs
SET status = '{RunStatus.QUEUED}', lease_owner = NULL, lease_expires_at = NULL,
    fencing_token = fencing_token + 1, updated_at = {_DB_NOW}
WHERE run_id = %s AND lease_owner = %s AND fencing_token = %s
  AND status = '{RunStatus.RUNNING}'
"""


class PgRunQueue:
    """The queue's statements over one store's pool (:meth:`PgCheckpointer.run_queue`)."""

    __slots__ = ("_read", "_write")

    def __init__(self, read: Read, write: Write) -> None:
        self._read = read
        self._write = write

    async def claim(self, params: Mapping[str, Any]) -> list[Any]:
        """:data:`CLAIM` with its named parameters: each claimed run's row
        (:data:`~oncegraph.storage.sql.statements.RUN_COLUMNS`), then its status and
        lease owner before the claim."""
        return await self._read("claim", CLAIM, params)

    async def renew(self, run_id: str, owner: str, token: int, lease_seconds: float) -> bool:
        """Extend the lease; False when it is no longer ``owner``'s with ``token``."""
        return await self._write("renew", RENEW, (lease_seconds, run_id, owner, token)) == 1

    async def renew_many(
        self, owner: str, held: Mapping[str, int], lease_seconds: float
    ) -> set[str]:
        """Extend every lease in ``held`` (run id -> token) in one round trip; the run ids
        still ``owner``'s (renewed, or ended under that token)."""
        if not held:
            return set()
        ids = list(held)
        params = (ids, [held[r] for r in ids], owner, lease_seconds)
        ours = {r[0] for r in await self._read("renew", RENEW_MANY, params)}
        missing = [r for r in ids if r not in ours]
        if missing:
            # A run whose last commit held its row while the renewal waited for it is seen
            # by the statement's snapshot as still running (so not ended) and by its
            # re-checked lock as not running (so not renewed): ask again, in a fresh
            # snapshot, which of them ended under their token.
            params2 = (missing, [held[r] for r in missing])
            ours |= {r[0] for r in await self._read("renew", ENDED_UNDER, params2)}
        return ours

    async def release(self, run_id: str, owner: str, token: int) -> bool:
        """Give a running run back to the queue; False if the lease was not ours any more."""
        return await self._write("release", RELEASE, (run_id, owner, token)) == 1


__all__ = [
    "ANNOUNCE",
    "CLAIM",
    "ENDED_UNDER",
    "QUEUE_FENCE_NOTIFY",
    "RELEASE",
    "RENEW",
    "RENEW_MANY",
    "RUNS_CHANNEL",
    "RUN_INSERT_NOTIFY",
    "PgRunQueue",
]
