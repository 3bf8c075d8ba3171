"""Statements of threads, checkpoints, the append-only logs, runs (and their listing
plans) and task writes.

Written for SQLite and PostgreSQL alike with ``?`` placeholders (the contract: :mod:`.statements`).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from oncegraph.storage.sql.statements_columns import (
    CHECKPOINT_COLUMNS,
    LOG_COLUMNS,
    RUN_COLUMNS,
    TASK_WRITE_COLUMNS,
    THREAD_COLUMNS,
    cols,
    insert_into,
    marks,
)

# -- threads ------------------------------------------------------------------------

# expected_version == 0: create the thread at version 1. Params: thread_id, version,
# head_checkpoint_id, updated_at. rowcount 0 => the thread exists => StaleStateError.
THREAD_INSERT = (
    f"INSERT INTO oncegraph_threads ({cols(THREAD_COLUMNS)}) VALUES ({marks(THREAD_COLUMNS)}) "
    "ON CONFLICT (thread_id) DO NOTHING"
)

# Params: new version, head_checkpoint_id, updated_at, thread_id, expected version.
# rowcount 0 => another writer was first => StaleStateError.
THREAD_CAS = (
    "UPDATE oncegraph_threads SET version = ?, head_checkpoint_id = ?, updated_at = ? "
    "WHERE thread_id = ? AND version = ?"
)

THREAD_SELECT = f"SELECT {cols(THREAD_COLUMNS)} FROM oncegraph_threads WHERE thread_id = ?"

# Params: thread_id, thread_id. ONE row: the thread's columns (NULLs when it has no row)
# then its latest run's (NULLs when it has none): what starting a run on a thread reads
# first, in one statement and one snapshot. The latest run is the one the database
# placed last in the thread (``seq``, given by the insert: :data:`THREAD_ORDER`), never
# the one whose submitter's clock said latest.
THREAD_OPENING = (
    f"SELECT {cols(THREAD_COLUMNS, 't.')}, {cols(RUN_COLUMNS, 'r.')} "
    "FROM (SELECT CAST(? AS TEXT) AS thread_id) AS q "
    "LEFT JOIN oncegraph_threads t ON t.thread_id = q.thread_id "
    "LEFT JOIN oncegraph_runs r ON r.run_id = ("
    "SELECT l.run_id FROM oncegraph_runs l WHERE l.thread_id = ? "
    "ORDER BY l.seq DESC LIMIT 1)"
)

# Params: run_id. The run's columns then its thread's (NULLs when the thread has no row
# yet: a queued run that never started); no row when the run does not exist.
RUN_OPENING = (
    f"SELECT {cols(RUN_COLUMNS, 'r.')}, {cols(THREAD_COLUMNS, 't.')} "
    "FROM oncegraph_runs r LEFT JOIN oncegraph_threads t ON t.thread_id = r.thread_id "
    "WHERE r.run_id = ?"
)

# -- checkpoints --------------------------------------------------------------------

CHECKPOINT_INSERT = insert_into("oncegraph_checkpoints", CHECKPOINT_COLUMNS)

CHECKPOINT_SELECT = (
    f"SELECT {cols(CHECKPOINT_COLUMNS)} FROM oncegraph_checkpoints "
    "WHERE thread_id = ? AND checkpoint_id = ?"
)

# Params: thread_id. The head is the checkpoint the thread row points at.
CHECKPOINT_SELECT_HEAD = (
    f"SELECT {cols(CHECKPOINT_COLUMNS, 'c.')} FROM oncegraph_threads t "
    "JOIN oncegraph_checkpoints c "
    "ON c.thread_id = t.thread_id AND c.checkpoint_id = t.head_checkpoint_id "
    "WHERE t.thread_id = ?"
)

# Newest first: a thread's checkpoint versions are unique and increasing (the CAS).
# Params: thread_id, before_version (NO_LIMIT for all), limit (NO_LIMIT for all).
CHECKPOINT_LIST = (
    f"SELECT {cols(CHECKPOINT_COLUMNS)} FROM oncegraph_checkpoints "
    "WHERE thread_id = ? AND version < ? ORDER BY version DESC LIMIT ?"
)

# Params: thread_id, run_id, before_version, limit.
CHECKPOINT_LIST_BY_RUN = (
    f"SELECT {cols(CHECKPOINT_COLUMNS)} FROM oncegraph_checkpoints "
    "WHERE thread_id = ? AND run_id = ? AND version < ? ORDER BY version DESC LIMIT ?"
)

# -- append-only logs ---------------------------------------------------------------

LOG_INSERT = insert_into("oncegraph_log", LOG_COLUMNS)

# Params: thread_id, channel, end (exclusive).
LOG_SELECT = (
    "SELECT seq, value FROM oncegraph_log WHERE thread_id = ? AND channel = ? AND seq < ? "
    "ORDER BY seq"
)

# -- runs ---------------------------------------------------------------------------

RUN_INSERT = insert_into("oncegraph_runs", RUN_COLUMNS)

RUN_SELECT = f"SELECT {cols(RUN_COLUMNS)} FROM oncegraph_runs WHERE run_id = ?"

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
    f"RETURNING {cols(RUN_COLUMNS)}"
)
# The same, setting status and error too. Params: lease_owner, status, error, updated_at,
# run_id, expected fencing_token.
RUN_FENCE_STATUS = (
    "UPDATE oncegraph_runs SET fencing_token = fencing_token + 1, lease_owner = ?, "
    "lease_expires_at = NULL, status = ?, error = ?, updated_at = ? "
    f"WHERE run_id = ? AND fencing_token = ? RETURNING {cols(RUN_COLUMNS)}"
)

# Appended to a run update (RUN_SET_STATUS, RUN_TOUCH_FENCED, RUN_SET_STATUS_FENCED) in a
# step commit: the run's write, its fence and the thread's compare-and-swap are checked by
# one statement, which writes nothing unless all hold (the thread's own update then cannot
# miss). Params: the run update's, then thread_id, expected version.
IF_THREAD_AT = " AND EXISTS (SELECT 1 FROM oncegraph_threads WHERE thread_id = ? AND version = ?)"

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
BEFORE_RUN_IN_THREAD = " AND seq < (SELECT b.seq FROM oncegraph_runs b WHERE b.run_id = ?)"

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
    selected = cols(RUN_COLUMNS)
    if by_thread:  # a thread's runs: in the order the database placed them
        before = BEFORE_RUN_IN_THREAD if by_before else ""
        rest = (" AND tenant = ?" if by_tenant else "") + before
        parent = " AND parent_run_id = ?" if by_parent else ""
        statuses = _status_in(n_statuses)
        app = f" AND {RUN_APP} = ?" if by_app else ""
        return (
            f"SELECT {selected} FROM oncegraph_runs WHERE thread_id = ?{parent}{statuses}{app}"
            f"{rest} {THREAD_ORDER} LIMIT ?"
        )
    # every arm's last filters: the tenant's, and the position listed after
    rest = (" AND tenant = ?" if by_tenant else "") + (BEFORE_RUN if by_before else "")
    if by_parent:
        statuses = _status_in(n_statuses)
        app = f" AND {RUN_APP} = ?" if by_app else ""
        return (
            f"SELECT {selected} FROM oncegraph_runs WHERE parent_run_id = ?{statuses}{app}{rest} "
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
        return f"SELECT {selected} FROM oncegraph_runs{clause} {order}"
    return (
        " UNION ALL ".join(
            f"SELECT {selected} FROM (SELECT {selected} FROM oncegraph_runs WHERE {arm}{rest} "
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
    f"INSERT INTO oncegraph_task_writes ({cols(TASK_WRITE_COLUMNS)}) "
    f"VALUES ({marks(TASK_WRITE_COLUMNS)}) "
    "ON CONFLICT (thread_id, checkpoint_id, task, kind, idx) "
    "DO UPDATE SET value = excluded.value, created_at = excluded.created_at"
)

# A task write that lands only while the run is held with the writer's token. Params:
# rows.task_write_to_params(write), run_id, fencing_token. rowcount 0 => fenced out.
TASK_WRITE_UPSERT_FENCED = (
    f"INSERT INTO oncegraph_task_writes ({cols(TASK_WRITE_COLUMNS)}) "
    f"SELECT {marks(TASK_WRITE_COLUMNS)} WHERE EXISTS (SELECT 1 FROM oncegraph_runs "
    "WHERE run_id = ? AND fencing_token = ?) "
    "ON CONFLICT (thread_id, checkpoint_id, task, kind, idx) "
    "DO UPDATE SET value = excluded.value, created_at = excluded.created_at"
)

# Params: thread_id, checkpoint_id.
TASK_WRITES_SELECT = (
    f"SELECT {cols(TASK_WRITE_COLUMNS)} FROM oncegraph_task_writes "
    "WHERE thread_id = ? AND checkpoint_id = ? ORDER BY task, kind, idx"
)

# Params: thread_id, checkpoint_id.
TASK_WRITES_DELETE = "DELETE FROM oncegraph_task_writes WHERE thread_id = ? AND checkpoint_id = ?"
