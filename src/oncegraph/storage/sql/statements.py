"""SQL statement text shared by every SQL dialect (SQLite, PostgreSQL).

Written once with ``?`` placeholders; a dialect that needs ``%s`` converts the text
mechanically (:func:`to_format_params`). Nothing here is dialect-specific: every
statement is accepted by SQLite >= 3.35 and PostgreSQL >= 12 (``ON CONFLICT``,
``RETURNING``).

The text is written by table family (:mod:`.statements_columns`,
:mod:`.statements_runs`, :mod:`.statements_effects`, :mod:`.statements_audit`,
:mod:`.statements_prune`); this module is the one namespace the stores read it from.

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

from oncegraph.storage.sql.statements_audit import (
    AUDIT_CHAIN_HEAD,
    AUDIT_CHAIN_PAGE,
    AUDIT_CHAINED_INSERT,
    AUDIT_INSERT,
    AUDIT_LATEST_UNCHAINED,
    AUDIT_UNCHAINED,
    audit_query,
)
from oncegraph.storage.sql.statements_columns import (
    AUDIT_COLUMNS,
    CHECKPOINT_COLUMNS,
    EFFECT_COLUMNS,
    EFFECT_MUTABLE_COLUMNS,
    LOG_COLUMNS,
    NO_LIMIT,
    RUN_COLUMNS,
    TASK_WRITE_COLUMNS,
    THREAD_COLUMNS,
)
from oncegraph.storage.sql.statements_effects import (
    EFFECT_INSERT,
    EFFECT_INSERT_FENCED,
    EFFECT_INTENT_INSERT,
    EFFECT_SELECT,
    EFFECT_UPDATE,
    EFFECT_UPDATE_CAS,
    EFFECT_UPDATE_CAS_FENCED,
    EFFECT_UPSERT_FIRST,
    EFFECT_UPSERT_FIRST_FENCED,
    EFFECT_UPSERT_RESULT,
    effect_query,
    payload_query,
)
from oncegraph.storage.sql.statements_prune import (
    CHECKPOINT_FOLD,
    CHECKPOINTS_DELETE_THREAD,
    LOG_DELETE_THREAD,
    TASK_WRITES_DELETE_THREAD,
    THREAD_CHILDREN,
    THREAD_DELETE,
    THREAD_IDS_AFTER,
    THREAD_IDS_FIRST,
    checkpoint_prune,
    effect_prune,
    thread_unfinished,
)
from oncegraph.storage.sql.statements_runs import (
    APP_ARMS_MAX,
    BEFORE_RUN,
    BEFORE_RUN_IN_THREAD,
    CHECKPOINT_INSERT,
    CHECKPOINT_LIST,
    CHECKPOINT_LIST_BY_RUN,
    CHECKPOINT_SELECT,
    CHECKPOINT_SELECT_HEAD,
    IF_THREAD_AT,
    LOG_INSERT,
    LOG_SELECT,
    RARE_STATUS,
    RUN_APP,
    RUN_APPS,
    RUN_EXISTS,
    RUN_FENCE,
    RUN_FENCE_STATUS,
    RUN_INSERT,
    RUN_LEGACY,
    RUN_OPENING,
    RUN_RENEW_LEASE,
    RUN_SELECT,
    RUN_SET_STATUS,
    RUN_SET_STATUS_FENCED,
    RUN_TAKE_LEASE,
    RUN_TOUCH_FENCED,
    TASK_WRITE_UPSERT,
    TASK_WRITE_UPSERT_FENCED,
    TASK_WRITES_DELETE,
    TASK_WRITES_SELECT,
    THREAD_CAS,
    THREAD_INSERT,
    THREAD_OPENING,
    THREAD_ORDER,
    THREAD_SELECT,
    run_list,
    run_list_params,
    status_count,
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
    "BEFORE_RUN",
    "BEFORE_RUN_IN_THREAD",
    "CHECKPOINTS_DELETE_THREAD",
    "CHECKPOINT_COLUMNS",
    "CHECKPOINT_FOLD",
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
    "LOG_DELETE_THREAD",
    "LOG_INSERT",
    "LOG_SELECT",
    "NO_LIMIT",
    "RARE_STATUS",
    "RUN_APP",
    "RUN_APPS",
    "RUN_COLUMNS",
    "RUN_EXISTS",
    "RUN_FENCE",
    "RUN_FENCE_STATUS",
    "RUN_INSERT",
    "RUN_LEGACY",
    "RUN_OPENING",
    "RUN_RENEW_LEASE",
    "RUN_SELECT",
    "RUN_SET_STATUS",
    "RUN_SET_STATUS_FENCED",
    "RUN_TAKE_LEASE",
    "RUN_TOUCH_FENCED",
    "TASK_WRITES_DELETE",
    "TASK_WRITES_DELETE_THREAD",
    "TASK_WRITES_SELECT",
    "TASK_WRITE_COLUMNS",
    "TASK_WRITE_UPSERT",
    "TASK_WRITE_UPSERT_FENCED",
    "THREAD_CAS",
    "THREAD_CHILDREN",
    "THREAD_COLUMNS",
    "THREAD_DELETE",
    "THREAD_IDS_AFTER",
    "THREAD_IDS_FIRST",
    "THREAD_INSERT",
    "THREAD_OPENING",
    "THREAD_ORDER",
    "THREAD_SELECT",
    "audit_query",
    "checkpoint_prune",
    "effect_prune",
    "effect_query",
    "payload_query",
    "run_list",
    "run_list_params",
    "status_count",
    "thread_unfinished",
    "to_format_params",
]
