"""Statements of the audit log (append-only: there is no UPDATE or DELETE of it
anywhere): inserts, the chain's reads, and its listings.

Written for SQLite and PostgreSQL alike with ``?`` placeholders (the contract: :mod:`.statements`).
"""

from __future__ import annotations

from functools import lru_cache

from oncegraph.storage.queries import AuditQuery
from oncegraph.storage.sql.statements_columns import AUDIT_COLUMNS, cols, insert_into, where

# -- the audit log (append-only: there is no UPDATE or DELETE of it anywhere) ---------

AUDIT_INSERT = insert_into("oncegraph_audit", AUDIT_COLUMNS)
# Params: rows.audit_to_params(record), chain_seq, chain_mac (oncegraph.storage.auditchain).
AUDIT_CHAINED_INSERT = insert_into("oncegraph_audit", (*AUDIT_COLUMNS, "chain_seq", "chain_mac"))
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
    f"SELECT {cols(AUDIT_COLUMNS)}, chain_seq, chain_mac FROM oncegraph_audit "
    "WHERE chain_seq > ? ORDER BY chain_seq LIMIT ?"
)


def audit_query(q: AuditQuery) -> tuple[str, list[object]]:
    """The statement of the audit records ``q`` lists and its parameters (``q.before``:
    an ``at``, or a record's ``(at, audit_id)``)."""
    position = q.before if isinstance(q.before, tuple) else (q.before,)
    filters = (q.run_id, q.thread_id, q.target_id, *position, q.app_id, q.tenant)
    params: list[object] = [f for f in filters if f is not None]
    by = (q.run_id is not None, q.thread_id is not None, q.target_id is not None)
    cursor = "record" if isinstance(q.before, tuple) else "at" if q.before is not None else ""
    sql = _audit_list(by, cursor, q.app_id is not None, q.tenant is not None)
    return sql, [*params, max(q.limit, 0)]


@lru_cache(maxsize=32)
def _audit_list(by: tuple[bool, bool, bool], cursor: str, by_app: bool, by_tenant: bool) -> str:
    """``SELECT`` of audit records, newest first. ``by``: filtered by run, thread, target.
    Params: ``run_id``, ``thread_id``, ``target_id`` (each if filtered), the cursor (with
    ``cursor`` ``"at"`` an ``at``: the records older; ``"record"`` a record's ``at`` and
    ``audit_id``: the records listed after it, ties in time too; ``""`` none), the app and
    the tenant whose records they are (each if ``by_app`` / ``by_tenant``), then limit.

    A record is an app's (and a tenant's) unless its run is another's: records with no
    run, or whose run this database does not hold, are everyone's (as
    :meth:`Scope.admits` is asked of the run, and nothing when there is none).
    """
    other = " OR ".join(c for c, on in ((_OTHER_APP, by_app), (_OTHER_TENANT, by_tenant)) if on)
    by_run, by_thread, by_target = by
    clause = where(
        ("run_id = ?", by_run),
        ("thread_id = ?", by_thread),
        ("target_id = ?", by_target),
        ("(at, audit_id) < (?, ?)" if cursor == "record" else "at < ?", cursor),
        (
            "NOT EXISTS (SELECT 1 FROM oncegraph_runs r WHERE r.run_id = oncegraph_audit.run_id "
            f"AND ({other}))",
            by_app or by_tenant,
        ),
    )
    return (
        f"SELECT {cols(AUDIT_COLUMNS)} FROM oncegraph_audit{clause} "
        "ORDER BY at DESC, audit_id DESC LIMIT ?"
    )


# A run that is not the app's, or not the tenant's (a run with no tenant is none's).
_OTHER_APP = "COALESCE(r.app_id, r.workflow_name) <> ?"
_OTHER_TENANT = "r.tenant IS NULL OR r.tenant <> ?"
