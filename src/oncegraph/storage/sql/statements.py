"""SQL statement text shared by every SQL dialect (SQLite, PostgreSQL).

Written once with ``?`` placeholders; a dialect that needs ``%s`` converts the text
mechanically (:func:`to_format_params`). Nothing here is dialect-specific: every
statement is accepted by SQLite >= 3.35 and PostgreSQL >= 12 (``ON CONFLICT``,
``RETURNING``).

Column orders are a contract with :mod:`oncegraph.storage.sql.rows`: for each table,
the ``*_COLUMNS`` tuple is both the INSERT parameter order and the SELECT row order,
so ``rows.X_to_params(record)`` feeds the insert and ``rows.X_from_row(row)`` reads a
select back.

Invariants the callers keep:

* The thread version is a compare-and-swap token: :data:`THREAD_CAS` and
  :data:`THREAD_INSERT` each affect exactly one row when the writer is current and
  zero rows when it lost (``rowcount == 0`` means ``StaleStateError``). No read is
  needed before a commit.
* A fenced run update (``*_FENCED``) affects zero rows when the fencing token moved
  on; the caller then reads :data:`RUN_EXISTS` (cold path) to tell
  ``RunNotFoundError`` from ``LeaseLostError``.
* :data:`EFFECT_INSERT` never overwrites: the first writer wins and a conflicting
  insert returns no row; :data:`EFFECT_UPSERT_RESULT` and :data:`EFFECT_UPDATE` never
  touch ``request_hash``, ``request`` or the identity columns.
* Fenced statements (``*_FENCED``) write only while the run's ``fencing_token`` is the
  writer's; zero rows means "fenced out or changed": the caller reads to tell which.
* An effect row changes by compare-and-set on ``row_version``
  (:data:`EFFECT_UPDATE_CAS`), so two writers can never both start attempt k.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

# -- column orders (INSERT parameter order == SELECT row order) ----------------------

THREAD_COLUMNS = ("thread_id", "version", "head_checkpoint_id", "updated_at")

RUN_COLUMNS = (
    "run_id",
    "thread_id",
    "status",
    "workflow_name",
    "workflow_version",
    "state_schema_version",
    "graph_fingerprint",
    "parent_run_id",
    "parent_checkpoint_id",
    "launch_reason",
    "mode",
    "input",
    "config",
    "error",
    "lease_owner",
    "lease_expires_at",
    "fencing_token",
    "created_at",
    "updated_at",
    "app_id",
    "tenant",
)

CHECKPOINT_COLUMNS = (
    "checkpoint_id",
    "thread_id",
    "run_id",
    "step",
    "version",
    "parent_checkpoint_id",
    "channel_values",
    "logs",
    "next_nodes",
    "metadata",
    "created_at",
)

LOG_COLUMNS = ("thread_id", "channel", "seq", "value")

TASK_WRITE_COLUMNS = ("thread_id", "checkpoint_id", "task", "kind", "idx", "value", "created_at")

EFFECT_COLUMNS = (
    "effect_id",
    "effect_type",
    "effect_class",
    "command_id",
    "run_id",
    "thread_id",
    "node",
    "request_hash",
    "status",
    "checkpoint_id",
    "request",
    "recipient",
    "attempts",
    "provider_reference",
    "result",
    "error",
    "created_at",
    "updated_at",
    "row_version",
)

AUDIT_COLUMNS = (
    "audit_id",
    "at",
    "actor",
    "action",
    "target_kind",
    "target_id",
    "run_id",
    "thread_id",
    "reason",
    "details",
)

# Columns an effect result may change (guarantee 3); identity and request are fixed at insert.
EFFECT_MUTABLE_COLUMNS = (
    "status",
    "attempts",
    "provider_reference",
    "result",
    "error",
    "updated_at",
    "row_version",
)


def _cols(columns: tuple[str, ...], prefix: str = "") -> str:
    return ", ".join(prefix + c for c in columns)


def _marks(columns: tuple[str, ...]) -> str:
    return ", ".join("?" for _ in columns)


def _insert(table: str, columns: tuple[str, ...]) -> str:
    return f"INSERT INTO {table} ({_cols(columns)}) VALUES ({_marks(columns)})"


# A LIMIT that means "all rows" in both dialects (PostgreSQL rejects negative limits).
NO_LIMIT = 2**62

# -- threads ------------------------------------------------------------------------

# expected_version == 0: create the thread at version 1. Params: thread_id, version,
# head_checkpoint_id, updated_at. rowcount 0 => the thread exists => StaleStateError.
THREAD_INSERT = (
    f"INSERT INTO oncegraph_threads ({_cols(THREAD_COLUMNS)}) VALUES ({_marks(THREAD_COLUMNS)}) "
    "ON CONFLICT (thread_id) DO NOTHING"
)

# Params: new version, head_checkpoint_id, updated_at, thread_id, expected version.
# rowcount 0 => another writer was first => StaleStateError.
THREAD_CAS = (
    "UPDATE oncegraph_threads SET version = ?, head_checkpoint_id = ?, updated_at = ? "
    "WHERE thread_id = ? AND version = ?"
)

THREAD_SELECT = f"SELECT {_cols(THREAD_COLUMNS)} FROM oncegraph_threads WHERE thread_id = ?"

# Params: thread_id, thread_id. ONE row: the thread's columns (NULLs when it has no row)
# then its latest run's (NULLs when it has none): what starting a run on a thread reads
# first, in one statement and one snapshot. The latest run is the one the database
# placed last in the thread (``seq``, given by the insert: :data:`THREAD_ORDER`), never
# the one whose submitter's clock said latest.
THREAD_OPENING = (
    f"SELECT {_cols(THREAD_COLUMNS, 't.')}, {_cols(RUN_COLUMNS, 'r.')} "
    "FROM (SELECT CAST(? AS TEXT) AS thread_id) AS q "
    "LEFT JOIN oncegraph_threads t ON t.thread_id = q.thread_id "
    "LEFT JOIN oncegraph_runs r ON r.run_id = ("
    "SELECT l.run_id FROM oncegraph_runs l WHERE l.thread_id = ? "
    "ORDER BY l.seq DESC LIMIT 1)"
)

# Params: run_id. The run's columns then its thread's (NULLs when the thread has no row
# yet: a queued run that never started); no row when the run does not exist.
RUN_OPENING = (
    f"SELECT {_cols(RUN_COLUMNS, 'r.')}, {_cols(THREAD_COLUMNS, 't.')} "
    "FROM oncegraph_runs r LEFT JOIN oncegraph_threads t ON t.thread_id = r.thread_id "
    "WHERE r.run_id = ?"
)

# -- checkpoints --------------------------------------------------------------------

CHECKPOINT_INSERT = _insert("oncegraph_checkpoints", CHECKPOINT_COLUMNS)

CHECKPOINT_SELECT = (
    f"SELECT {_cols(CHECKPOINT_COLUMNS)} FROM oncegraph_checkpoints "
    "WHERE thread_id = ? AND checkpoint_id = ?"
)

# Params: thread_id. The head is the checkpoint the thread row points at.
CHECKPOINT_SELECT_HEAD = (
    f"SELECT {_cols(CHECKPOINT_COLUMNS, 'c.')} FROM oncegraph_threads t "
    "JOIN oncegraph_checkpoints c "
    "ON c.thread_id = t.thread_id AND c.checkpoint_id = t.head_checkpoint_id "
    "WHERE t.thread_id = ?"
)

# Newest first: a thread's checkpoint versions are unique and increasing (the CAS).
# Params: thread_id, before_version (NO_LIMIT for all), limit (NO_LIMIT for all).
CHECKPOINT_LIST = (
    f"SELECT {_cols(CHECKPOINT_COLUMNS)} FROM oncegraph_checkpoints "
    "WHERE thread_id = ? AND version < ? ORDER BY version DESC LIMIT ?"
)

# Params: thread_id, run_id, before_version, limit.
CHECKPOINT_LIST_BY_RUN = (
    f"SELECT {_cols(CHECKPOINT_COLUMNS)} FROM oncegraph_checkpoints "
    "WHERE thread_id = ? AND run_id = ? AND version < ? ORDER BY version DESC LIMIT ?"
)

# -- append-only logs ---------------------------------------------------------------

LOG_INSERT = _insert("oncegraph_log", LOG_COLUMNS)

# Params: thread_id, channel, end (exclusive).
LOG_SELECT = (
    "SELECT seq, value FROM oncegraph_log WHERE thread_id = ? AND channel = ? AND seq < ? "
    "ORDER BY seq"
)

# -- runs ---------------------------------------------------------------------------

RUN_INSERT = _insert("oncegraph_runs", RUN_COLUMNS)

RUN_SELECT = f"SELECT {_cols(RUN_COLUMNS)} FROM oncegraph_runs WHERE run_id = ?"

RUN_EXISTS = "SELECT fencing_token FROM oncegraph_runs WHERE run_id = ?"

# Params: status, error, updated_at, run_id.
RUN_SET_STATUS = "UPDATE oncegraph_runs SET status = ?, error = ?, updated_at = ? WHERE run_id = ?"

# Params: status, error, updated_at, run_id, fencing_token.
RUN_SET_STATUS_FENCED = (
    "UPDATE oncegraph_runs SET status = ?, error = ?, updated_at = ? "
    "WHERE run_id = ? AND fencing_token = ?"
)

# A fence check without a status change. Params: updated_at, run_id, fencing_token.
RUN_TOUCH_FENCED = "UPDATE oncegraph_runs SET updated_at = ? WHERE run_id = ? AND fencing_token = ?"

# A run taken over by a new holder: the token is bumped, the lease is the new holder's
# (no expiry: a direct caller's liveness is its lock), the status optionally set.
# Params: lease_owner, updated_at, run_id, expected fencing_token.
RUN_FENCE = (
    "UPDATE oncegraph_runs SET fencing_token = fencing_token + 1, lease_owner = ?, "
    "lease_expires_at = NULL, updated_at = ? WHERE run_id = ? AND fencing_token = ? "
    f"RETURNING {_cols(RUN_COLUMNS)}"
)
# The same, setting status and error too. Params: lease_owner, status, error, updated_at,
# run_id, expected fencing_token.
RUN_FENCE_STATUS = (
    "UPDATE oncegraph_runs SET fencing_token = fencing_token + 1, lease_owner = ?, "
    "lease_expires_at = NULL, status = ?, error = ?, updated_at = ? "
    f"WHERE run_id = ? AND fencing_token = ? RETURNING {_cols(RUN_COLUMNS)}"
)

# Appended to a run update (RUN_SET_STATUS, RUN_TOUCH_FENCED, RUN_SET_STATUS_FENCED) in a
# step commit: the run's write, its fence and the thread's compare-and-swap are checked by
# one statement, which writes nothing unless all hold (the thread's own update then cannot
# miss). Params: the run update's, then thread_id, expected version.
IF_THREAD_AT = (
    " AND EXISTS (SELECT 1 FROM oncegraph_threads WHERE thread_id = ? AND version = ?)"
)

# Lease columns (for workers). Params: lease_owner, lease_expires_at, updated_at,
# run_id, expected fencing_token; the token is bumped by one on success.
RUN_TAKE_LEASE = (
    "UPDATE oncegraph_runs SET lease_owner = ?, lease_expires_at = ?, "
    "fencing_token = fencing_token + 1, updated_at = ? WHERE run_id = ? AND fencing_token = ?"
)

# Params: lease_expires_at, updated_at, run_id, fencing_token.
RUN_RENEW_LEASE = (
    "UPDATE oncegraph_runs SET lease_expires_at = ?, updated_at = ? "
    "WHERE run_id = ? AND fencing_token = ?"
)


# A thread's runs in the order the database placed them (schema migration 14: ``seq``
# is set by the insert, from a sequence or the thread's largest, never by a client's
# clock), newest first; ``seq`` is not one of RUN_COLUMNS: no caller writes it.
THREAD_ORDER = "ORDER BY seq DESC"

# Runs of a thread listed after a page's last run (its run_id), in THREAD_ORDER.
BEFORE_RUN_IN_THREAD = (
    " AND seq < (SELECT b.seq FROM oncegraph_runs b WHERE b.run_id = ?)"
)

# A run's app: a row an older oncegraph wrote (app_id NULL) belongs to its workflow_name.
RUN_APP = "COALESCE(app_id, workflow_name)"


# The apps that have runs (non-NULL app_id), in order: a walk of
# ``oncegraph_runs_app_created`` that jumps from one app to the next (one index probe an
# app), not a read of the runs. Params: how many at most (the walk stops there).
RUN_APPS = (
    "WITH RECURSIVE apps(app) AS ("
    "SELECT MIN(app_id) FROM oncegraph_runs UNION ALL "
    "SELECT (SELECT MIN(app_id) FROM oncegraph_runs WHERE app_id > apps.app) "
    "FROM apps WHERE apps.app IS NOT NULL) "
    "SELECT app FROM apps WHERE app IS NOT NULL LIMIT ?"
)

# Whether any run has no app_id (an older oncegraph wrote it; one row or none). None is
# written since, so a database without them never has one: its listings skip the arm
# that reads them (a planner may walk a whole index for an arm that finds nothing).
RUN_LEGACY = "SELECT 1 FROM oncegraph_runs WHERE app_id IS NULL LIMIT 1"

# Params: the statuses, then the limit (RARE_STATUS). How many of the runs of these
# statuses, counted up to the limit from their index: SQLite keeps no statistics of a
# status's runs, so a listing of an app's runs of a rare status (needs_review) would
# walk all the app's runs; with fewer than RARE_STATUS of them it walks theirs instead.
RARE_STATUS = 1_000


def status_count(n_statuses: int) -> str:
    marks = ", ".join("?" for _ in range(n_statuses))
    return (
        f"SELECT count(*) FROM (SELECT 1 FROM oncegraph_runs WHERE status IN ({marks}) "
        "LIMIT ?) AS found"
    )


# Runs listed after a page's last run, newest first: params its created_at, its run_id.
BEFORE_RUN = " AND (created_at, run_id) < (?, ?)"

# A listing of every app's runs is read app by app up to this many apps (RUN_APPS, then
# one arm an app in run_list); with more, the runs are read and sorted whole.
APP_ARMS_MAX = 64


@lru_cache(maxsize=64)
def run_list(
    *,
    by_thread: bool,
    n_statuses: int,
    by_app: bool = False,
    by_tenant: bool = False,
    n_apps: int = 0,
    by_status: bool = False,
    legacy: bool = True,
    by_parent: bool = False,
    by_before: bool = False,
) -> str:
    """``SELECT`` of runs, newest first (``created_at``, then ``run_id``, descending;
    a thread's runs in the order the database placed them, :data:`THREAD_ORDER`); its
    parameters in order: :func:`run_list_params`.

    By thread, the thread's index finds its few runs (``before``: by the page's last run's
    id, whose place in the thread it reads); by parent (``parent_run_id``: a
    run's replays and branches), the parents' index (migration 12) finds them; the other
    filters filter them.
    Otherwise it is a merge of arms, each read newest first from an index in that order
    and cut at the limit, so a listing reads about the rows it returns, not all runs:

    * by app: the app's runs (``oncegraph_runs_app_created``, schema migration 9) and
      the runs an older oncegraph wrote with no app_id whose workflow_name is the app
      (:data:`RUN_APP`), which the same index holds under NULL (``legacy``: the caller
      found such runs with :data:`RUN_LEGACY`; a database that has none never will);
    * of every app with statuses, or by app ``by_status`` (statuses rarer than the app's
      runs: the caller knows, see :data:`RARE_STATUS`): one arm a status, read from
      ``oncegraph_runs_status_created`` (migration 11), the app a filter;
    * of every app, without: given ``n_apps`` (the apps :data:`RUN_APPS` found, at most
      :data:`APP_ARMS_MAX`), one arm an app and one for the runs with no app_id; with
      none (more apps than that), the runs are read and sorted whole.

    ``by_before``: only runs listed after a given one (a page's last), by ``(created_at,
    run_id) < (?, ?)`` in every arm: a range on each index after its equalities, so the
    next page starts where the last ended instead of reading past it.
    """
    order = "ORDER BY created_at DESC, run_id DESC LIMIT ?"
    cols = _cols(RUN_COLUMNS)
    if by_thread:  # a thread's runs: in the order the database placed them
        before = BEFORE_RUN_IN_THREAD if by_before else ""
        rest = (" AND tenant = ?" if by_tenant else "") + before
        parent = " AND parent_run_id = ?" if by_parent else ""
        statuses = _status_in(n_statuses)
        app = f" AND {RUN_APP} = ?" if by_app else ""
        return (
            f"SELECT {cols} FROM oncegraph_runs WHERE thread_id = ?{parent}{statuses}{app}"
            f"{rest} {THREAD_ORDER} LIMIT ?"
        )
    # every arm's last filters: the tenant's, and the position listed after
    rest = (" AND tenant = ?" if by_tenant else "") + (BEFORE_RUN if by_before else "")
    if by_parent:
        statuses = _status_in(n_statuses)
        app = f" AND {RUN_APP} = ?" if by_app else ""
        return (
            f"SELECT {cols} FROM oncegraph_runs WHERE parent_run_id = ?{statuses}{app}{rest} "
            f"{order}"
        )
    # The runs with no app_id in the index's order: ``app_id IS NULL`` is no equality to
    # a planner, so without app_id in the ORDER BY it reads all of them and sorts.
    legacy_order = f"ORDER BY app_id DESC, {order.removeprefix('ORDER BY ')}"
    arms: list[tuple[str, str]]
    if by_app and not (by_status and n_statuses):
        statuses = _status_in(n_statuses)
        arms = [(f"app_id = ?{statuses}", order)]
        if legacy:
            arms.append((f"app_id IS NULL AND workflow_name = ?{statuses}", legacy_order))
    elif n_statuses:
        app = f" AND {RUN_APP} = ?" if by_app else ""
        arms = [(f"status = ?{app}", order)] * n_statuses
    elif n_apps:
        arms = [("app_id = ?", order)] * n_apps + [("app_id IS NULL", legacy_order)] * legacy
    else:
        clause = f" WHERE {rest.removeprefix(' AND ')}" if rest else ""
        return f"SELECT {cols} FROM oncegraph_runs{clause} {order}"
    return (
        " UNION ALL ".join(
            f"SELECT {cols} FROM (SELECT {cols} FROM oncegraph_runs WHERE {arm}{rest} "
            f"{arm_order}) AS arm{i}"
            for i, (arm, arm_order) in enumerate(arms)
        )
        + f" {order}"
    )


def _status_in(n: int) -> str:
    return f" AND status IN ({', '.join('?' for _ in range(n))})" if n else ""


def run_list_params(
    *,
    thread_id: str | None,
    statuses: Sequence[str],
    app_id: str | None,
    tenant: str | None,
    limit: int,
    apps: Sequence[str] = (),
    by_status: bool = False,
    legacy: bool = True,
    parent_run_id: str | None = None,
    before: tuple[float, str] | None = None,
) -> list[Any]:
    """The parameters of :func:`run_list` for these filters (``statuses`` empty: any;
    ``apps``: what :data:`RUN_APPS` read, for a listing of every app's runs;
    ``by_status`` as there; ``before``: the ``(created_at, run_id)`` runs are listed
    after)."""
    limit = max(limit, 0)
    if thread_id is not None:  # in the thread's order: a page's last run by its id
        after = [] if before is None else [before[1]]
        return [
            thread_id,
            *([] if parent_run_id is None else [parent_run_id]),
            *statuses,
            *([] if app_id is None else [app_id]),
            *([] if tenant is None else [tenant]),
            *after,
            limit,
        ]
    # each arm's last: the tenant, the position listed after, the limit
    tail = [*([] if tenant is None else [tenant]), *(before or ()), limit]
    if thread_id is not None or parent_run_id is not None:
        found = [f for f in (thread_id, parent_run_id) if f is not None]
        return [*found, *statuses, *([] if app_id is None else [app_id]), *tail]
    if by_status and statuses:
        app = [] if app_id is None else [app_id]
        return [p for s in statuses for p in (s, *app, *tail)] + [limit]
    if app_id is not None:
        arm = [app_id, *statuses, *tail]
        return [*arm, *(arm if legacy else []), limit]
    if statuses:
        return [p for s in statuses for p in (s, *tail)] + [limit]
    if apps:
        return [p for app in apps for p in (app, *tail)] + [*(tail if legacy else []), limit]
    return tail


# -- task writes --------------------------------------------------------------------

TASK_WRITE_UPSERT = (
    f"INSERT INTO oncegraph_task_writes ({_cols(TASK_WRITE_COLUMNS)}) "
    f"VALUES ({_marks(TASK_WRITE_COLUMNS)}) "
    "ON CONFLICT (thread_id, checkpoint_id, task, kind, idx) "
    "DO UPDATE SET value = excluded.value, created_at = excluded.created_at"
)

# A task write that lands only while the run is held with the writer's token. Params:
# rows.task_write_to_params(write), run_id, fencing_token. rowcount 0 => fenced out.
TASK_WRITE_UPSERT_FENCED = (
    f"INSERT INTO oncegraph_task_writes ({_cols(TASK_WRITE_COLUMNS)}) "
    f"SELECT {_marks(TASK_WRITE_COLUMNS)} WHERE EXISTS (SELECT 1 FROM oncegraph_runs "
    "WHERE run_id = ? AND fencing_token = ?) "
    "ON CONFLICT (thread_id, checkpoint_id, task, kind, idx) "
    "DO UPDATE SET value = excluded.value, created_at = excluded.created_at"
)

# Params: thread_id, checkpoint_id.
TASK_WRITES_SELECT = (
    f"SELECT {_cols(TASK_WRITE_COLUMNS)} FROM oncegraph_task_writes "
    "WHERE thread_id = ? AND checkpoint_id = ? ORDER BY task, kind, idx"
)

# Params: thread_id, checkpoint_id.
TASK_WRITES_DELETE = "DELETE FROM oncegraph_task_writes WHERE thread_id = ? AND checkpoint_id = ?"

# -- effects (the ledger) -----------------------------------------------------------

# First writer wins: returns one row (effect_id) when this call inserted, none when
# the effect already existed; then read it with EFFECT_SELECT in the same transaction.
# ON CONFLICT without a target: it covers every unique index the table has (effect_id;
# before schema migration 7 also (effect_type, effect_id), which a racing insert could
# hit first), so one statement serves a database at either version.
EFFECT_INSERT = (
    f"INSERT INTO oncegraph_effects ({_cols(EFFECT_COLUMNS)}) VALUES ({_marks(EFFECT_COLUMNS)}) "
    "ON CONFLICT DO NOTHING RETURNING effect_id"
)

# A planned intent written with the checkpoint that decided it (StepCommit.intents): the
# first writer wins and an existing record is never touched. Params:
# rows.effect_to_params(record).
EFFECT_INTENT_INSERT = (
    f"INSERT INTO oncegraph_effects ({_cols(EFFECT_COLUMNS)}) VALUES ({_marks(EFFECT_COLUMNS)}) "
    "ON CONFLICT DO NOTHING"
)

# The same, only while the run is held with the writer's token. Params:
# rows.effect_to_params(record), run_id, fencing_token.
EFFECT_INSERT_FENCED = (
    f"INSERT INTO oncegraph_effects ({_cols(EFFECT_COLUMNS)}) SELECT {_marks(EFFECT_COLUMNS)} "
    "WHERE EXISTS (SELECT 1 FROM oncegraph_runs WHERE run_id = ? AND fencing_token = ?) "
    "ON CONFLICT DO NOTHING RETURNING effect_id"
)

# Compare-and-set of an effect row: only from the row version the writer read, and (if
# fenced) only while the run is held with its token. Params:
# rows.effect_update_params(record) (mutable columns with the NEW row_version, effect_id),
# expected row_version. rowcount 0 => stale or missing.
EFFECT_UPDATE_CAS = (
    "UPDATE oncegraph_effects SET "
    + ", ".join(f"{c} = ?" for c in EFFECT_MUTABLE_COLUMNS)
    + " WHERE effect_id = ? AND row_version = ?"
)
# The same, fenced. Params: as EFFECT_UPDATE_CAS, then run_id, fencing_token.
EFFECT_UPDATE_CAS_FENCED = (
    EFFECT_UPDATE_CAS
    + " AND EXISTS (SELECT 1 FROM oncegraph_runs WHERE run_id = ? AND fencing_token = ?)"
)

# Save a result (save_effect and effects folded into a StepCommit): inserts the whole
# record if it was never begun (a result is never dropped), else updates only the
# mutable columns. Params: rows.effect_to_params(record).
EFFECT_UPSERT_RESULT = (
    f"INSERT INTO oncegraph_effects ({_cols(EFFECT_COLUMNS)}) VALUES ({_marks(EFFECT_COLUMNS)}) "
    "ON CONFLICT (effect_id) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in EFFECT_MUTABLE_COLUMNS)
)

# The first write of an effect that was never begun (row_version 0 -> 1): inserts it, or
# updates a row no one has written since it was created by an older oncegraph.
# Params: rows.effect_to_params(record).
EFFECT_UPSERT_FIRST = EFFECT_UPSERT_RESULT + " WHERE oncegraph_effects.row_version = 0"
# The same, fenced. Params: rows.effect_to_params(record), run_id, fencing_token.
EFFECT_UPSERT_FIRST_FENCED = (
    f"INSERT INTO oncegraph_effects ({_cols(EFFECT_COLUMNS)}) SELECT {_marks(EFFECT_COLUMNS)} "
    "WHERE EXISTS (SELECT 1 FROM oncegraph_runs WHERE run_id = ? AND fencing_token = ?) "
    "ON CONFLICT (effect_id) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in EFFECT_MUTABLE_COLUMNS)
    + " WHERE oncegraph_effects.row_version = 0"
)

# Params: rows.effect_update_params(record) = mutable columns..., effect_id.
EFFECT_UPDATE = (
    "UPDATE oncegraph_effects SET "
    + ", ".join(f"{c} = ?" for c in EFFECT_MUTABLE_COLUMNS)
    + " WHERE effect_id = ?"
)

EFFECT_SELECT = f"SELECT {_cols(EFFECT_COLUMNS)} FROM oncegraph_effects WHERE effect_id = ?"


@lru_cache(maxsize=64)
def effect_list(
    *,
    by_run: bool,
    by_thread: bool,
    n_statuses: int,
    by_app: bool = False,
    by_tenant: bool = False,
) -> str:
    """``SELECT`` of effects in creation order (``created_at``, then ``effect_id``).

    Params: ``run_id`` if ``by_run``, ``thread_id`` if ``by_thread``, then statuses, then
    the run's ``app_id`` if ``by_app`` and its ``tenant`` if ``by_tenant``, then limit
    (``NO_LIMIT`` for all) and offset.
    """
    where = []
    if by_run:
        where.append("run_id = ?")
    if by_thread:
        where.append("thread_id = ?")
    if n_statuses:
        where.append(f"status IN ({', '.join('?' for _ in range(n_statuses))})")
    if by_app or by_tenant:
        owner = ["r.run_id = oncegraph_effects.run_id"]
        if by_app:
            owner.append("COALESCE(r.app_id, r.workflow_name) = ?")
        if by_tenant:
            owner.append("r.tenant = ?")
        where.append(f"EXISTS (SELECT 1 FROM oncegraph_runs r WHERE {' AND '.join(owner)})")
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    return (
        f"SELECT {_cols(EFFECT_COLUMNS)} FROM oncegraph_effects{clause} "
        "ORDER BY created_at, effect_id LIMIT ? OFFSET ?"
    )


@lru_cache(maxsize=32)
def effect_payloads(*, by_run: bool, by_thread: bool, results: bool, n_threads: int = 0) -> str:
    """``SELECT effect_id, effect_type, request, result`` of effects in creation order
    (``result`` NULL unless ``results``): what masking learns secrets from, without
    decoding the rest of each record. Params: ``run_id`` if ``by_run``, ``thread_id`` if
    ``by_thread``, then ``n_threads`` thread ids (the effects of any of them)."""
    where = [w for w, on in (("run_id = ?", by_run), ("thread_id = ?", by_thread)) if on]
    if n_threads:
        where.append(f"thread_id IN ({', '.join('?' for _ in range(n_threads))})")
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    result = "result" if results else "NULL"
    return (
        f"SELECT effect_id, effect_type, request, {result} FROM oncegraph_effects{clause} "
        "ORDER BY created_at, effect_id"
    )


# -- the audit log (append-only: there is no UPDATE or DELETE of it anywhere) ---------

AUDIT_INSERT = _insert("oncegraph_audit", AUDIT_COLUMNS)
# Params: rows.audit_to_params(record), chain_seq, chain_mac (oncegraph.storage.auditchain).
AUDIT_CHAINED_INSERT = _insert("oncegraph_audit", (*AUDIT_COLUMNS, "chain_seq", "chain_mac"))
# The last link of the chain (read in the appending transaction).
AUDIT_CHAIN_HEAD = (
    "SELECT chain_seq, chain_mac FROM oncegraph_audit WHERE chain_seq IS NOT NULL "
    "ORDER BY chain_seq DESC LIMIT 1"
)
AUDIT_UNCHAINED = "SELECT COUNT(*) FROM oncegraph_audit WHERE chain_seq IS NULL"
# The newest record without a link (only records older than the chain may lack one).
AUDIT_LATEST_UNCHAINED = (
    "SELECT audit_id, at FROM oncegraph_audit WHERE chain_seq IS NULL "
    "ORDER BY at DESC, audit_id DESC LIMIT 1"
)
# A page of the chain in order. Params: after (chain_seq), limit.
AUDIT_CHAIN_PAGE = (
    f"SELECT {_cols(AUDIT_COLUMNS)}, chain_seq, chain_mac FROM oncegraph_audit "
    "WHERE chain_seq > ? ORDER BY chain_seq LIMIT ?"
)


@lru_cache(maxsize=32)
def audit_list(
    *,
    by_run: bool,
    by_thread: bool,
    by_target: bool,
    before: bool,
    by_app: bool = False,
    by_tenant: bool = False,
    after_record: bool = False,
) -> str:
    """``SELECT`` of audit records, newest first. Params: ``run_id``, ``thread_id``,
    ``target_id`` (each if filtered), ``before`` (an ``at`` cursor; with ``after_record``
    a record's ``at`` and ``audit_id``: the records listed after it, ties in time too),
    the app and the tenant whose records they are (each if ``by_app`` / ``by_tenant``),
    then limit.

    A record is an app's (and a tenant's) unless its run is another's: records with no
    run, or whose run this database does not hold, are everyone's (as
    :meth:`Scope.admits` is asked of the run, and nothing when there is none).
    """
    where = []
    if by_run:
        where.append("run_id = ?")
    if by_thread:
        where.append("thread_id = ?")
    if by_target:
        where.append("target_id = ?")
    if before:
        where.append("(at, audit_id) < (?, ?)" if after_record else "at < ?")
    if by_app or by_tenant:
        other = [c for c, on in ((_OTHER_APP, by_app), (_OTHER_TENANT, by_tenant)) if on]
        where.append(
            "NOT EXISTS (SELECT 1 FROM oncegraph_runs r WHERE r.run_id = oncegraph_audit.run_id "
            f"AND ({' OR '.join(other)}))"
        )
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    return (
        f"SELECT {_cols(AUDIT_COLUMNS)} FROM oncegraph_audit{clause} "
        "ORDER BY at DESC, audit_id DESC LIMIT ?"
    )


# A run that is not the app's, or not the tenant's (a run with no tenant is none's).
_OTHER_APP = "COALESCE(r.app_id, r.workflow_name) <> ?"
_OTHER_TENANT = "r.tenant IS NULL OR r.tenant <> ?"


def audit_query(
    run_id: str | None,
    thread_id: str | None,
    target_id: str | None,
    before: float | tuple[float, str] | None,
    limit: int,
    app_id: str | None = None,
    tenant: str | None = None,
) -> tuple[str, list[object]]:
    """The :func:`audit_list` statement for these filters, and its parameters
    (``before``: an ``at``, or a record's ``(at, audit_id)``)."""
    position = before if isinstance(before, tuple) else (before,)
    filters: list[object] = [
        f for f in (run_id, thread_id, target_id, *position, app_id, tenant) if f is not None
    ]
    sql = audit_list(
        by_run=run_id is not None,
        by_thread=thread_id is not None,
        by_target=target_id is not None,
        before=before is not None,
        by_app=app_id is not None,
        by_tenant=tenant is not None,
        after_record=isinstance(before, tuple),
    )
    return sql, [*filters, max(limit, 0)]


# -- retention (prune) --------------------------------------------------------------
#
# A prune runs one transaction per thread and never writes oncegraph_threads (the CAS
# token): it only reads the thread's version and head. Checkpoint versions of a thread
# are 1..version with the head at ``version``, so "the newest N" are those with
# ``version > thread.version - N``; the head is also excluded by id, for robustness.

# Threads in id order, a page at a time. Params: limit / after, limit.
THREAD_IDS_FIRST = "SELECT thread_id FROM oncegraph_threads ORDER BY thread_id LIMIT ?"
THREAD_IDS_AFTER = (
    "SELECT thread_id FROM oncegraph_threads WHERE thread_id > ? ORDER BY thread_id LIMIT ?"
)


@lru_cache(maxsize=8)
def checkpoint_prune(n_keep_statuses: int) -> str:
    """``DELETE`` of a thread's prunable checkpoints, ``RETURNING checkpoint_id``.

    Deletes checkpoints older than the newest ``keep`` that are not the head and whose
    run is not in one of the kept (unfinished) statuses. A missing thread row deletes
    nothing (the version comparison is NULL). Params: thread_id, thread_id, keep,
    thread_id, then ``n_keep_statuses`` run statuses.
    """
    marks = ", ".join("?" for _ in range(n_keep_statuses))
    return (
        "DELETE FROM oncegraph_checkpoints WHERE thread_id = ? "
        "AND version <= (SELECT version FROM oncegraph_threads WHERE thread_id = ?) - ? "
        "AND checkpoint_id NOT IN (SELECT head_checkpoint_id FROM oncegraph_threads "
        "WHERE thread_id = ? AND head_checkpoint_id IS NOT NULL) "
        "AND NOT EXISTS (SELECT 1 FROM oncegraph_runs r "
        f"WHERE r.run_id = oncegraph_checkpoints.run_id AND r.status IN ({marks})) "
        "RETURNING checkpoint_id"
    )


@lru_cache(maxsize=8)
def effect_prune(n_effect_statuses: int, n_run_statuses: int) -> str:
    """``DELETE`` of a thread's finished effect records last updated before a cutoff,
    whose run exists and has one of the given (finished) statuses.

    Params: thread_id, cutoff (``updated_at <`` it), ``n_effect_statuses`` effect
    statuses, then ``n_run_statuses`` run statuses.
    """
    effect_marks = ", ".join("?" for _ in range(n_effect_statuses))
    run_marks = ", ".join("?" for _ in range(n_run_statuses))
    return (
        "DELETE FROM oncegraph_effects WHERE thread_id = ? AND updated_at < ? "
        f"AND status IN ({effect_marks}) "
        "AND EXISTS (SELECT 1 FROM oncegraph_runs r "
        f"WHERE r.run_id = oncegraph_effects.run_id AND r.status IN ({run_marks}))"
    )


# -- dialect helper -----------------------------------------------------------------


def to_format_params(sql: str) -> str:
    """``?`` placeholders -> ``%s`` (psycopg). The statements here contain no literal
    ``?`` or ``%`` characters, so the conversion is purely mechanical."""
    return sql.replace("%", "%%").replace("?", "%s")


__all__ = [
    "APP_ARMS_MAX",
    "AUDIT_CHAINED_INSERT",
    "AUDIT_CHAIN_HEAD",
    "AUDIT_CHAIN_PAGE",
    "AUDIT_COLUMNS",
    "AUDIT_INSERT",
    "AUDIT_LATEST_UNCHAINED",
    "AUDIT_UNCHAINED",
    "CHECKPOINT_COLUMNS",
    "CHECKPOINT_INSERT",
    "CHECKPOINT_LIST",
    "CHECKPOINT_LIST_BY_RUN",
    "CHECKPOINT_SELECT",
    "CHECKPOINT_SELECT_HEAD",
    "EFFECT_COLUMNS",
    "EFFECT_INSERT",
    "EFFECT_INSERT_FENCED",
    "EFFECT_INTENT_INSERT",
    "EFFECT_MUTABLE_COLUMNS",
    "EFFECT_SELECT",
    "EFFECT_UPDATE",
    "EFFECT_UPDATE_CAS",
    "EFFECT_UPDATE_CAS_FENCED",
    "EFFECT_UPSERT_FIRST",
    "EFFECT_UPSERT_FIRST_FENCED",
    "EFFECT_UPSERT_RESULT",
    "IF_THREAD_AT",
    "LOG_COLUMNS",
    "LOG_INSERT",
    "LOG_SELECT",
    "NO_LIMIT",
    "RARE_STATUS",
    "RUN_APPS",
    "RUN_COLUMNS",
    "RUN_EXISTS",
    "RUN_FENCE",
    "RUN_FENCE_STATUS",
    "RUN_INSERT",
    "RUN_LEGACY",
    "RUN_RENEW_LEASE",
    "RUN_SELECT",
    "RUN_SET_STATUS",
    "RUN_SET_STATUS_FENCED",
    "RUN_TAKE_LEASE",
    "RUN_TOUCH_FENCED",
    "TASK_WRITES_DELETE",
    "TASK_WRITES_SELECT",
    "TASK_WRITE_COLUMNS",
    "TASK_WRITE_UPSERT",
    "TASK_WRITE_UPSERT_FENCED",
    "THREAD_CAS",
    "THREAD_COLUMNS",
    "THREAD_IDS_AFTER",
    "THREAD_IDS_FIRST",
    "THREAD_INSERT",
    "THREAD_SELECT",
    "audit_list",
    "audit_query",
    "checkpoint_prune",
    "effect_list",
    "effect_prune",
    "run_list",
    "run_list_params",
    "status_count",
    "to_format_params",
]
