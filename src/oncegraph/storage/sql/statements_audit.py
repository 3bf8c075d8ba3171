"""Statements of the audit log (append-only: there is no UPDATE or DELETE of it
anywhere): inserts, the chain's reads, and its listings.

Written with ``?`` placeholders, accepted by SQLite and PostgreSQL alike; the
contract they keep is stated in :mod:`oncegraph.storage.sql.statements`.
"""

from __future__ import annotations

from functools import lru_cache

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
    other = " OR ".join(c for c, on in ((_OTHER_APP, by_app), (_OTHER_TENANT, by_tenant)) if on)
    clause = where(
        ("run_id = ?", by_run),
        ("thread_id = ?", by_thread),
        ("target_id = ?", by_target),
        ("(at, audit_id) < (?, ?)" if after_record else "at < ?", before),
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
