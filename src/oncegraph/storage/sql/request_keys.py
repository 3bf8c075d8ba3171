"""The statements of the idempotency keys table (``oncegraph_requests``, schema
migration 13), written once for SQLite and PostgreSQL (``?`` placeholders; the
PostgreSQL store converts them). See :mod:`oncegraph.storage.requests` for the record
and :class:`~oncegraph.storage.protocols.IdempotencyStore` for the contract.
"""

from __future__ import annotations

REQUEST_COLUMNS = (
    "scope",
    "idem_key",
    "request_hash",
    "run_id",
    "status_code",
    "response",
    "created_at",
    "expires_at",
)
_COLS = ", ".join(REQUEST_COLUMNS)
_MARKS = ", ".join("?" for _ in REQUEST_COLUMNS)

# Claim a key: insert, or take the place of an EXPIRED record of the key (its window
# passed), in one statement, so of two requests with one key exactly one gets a row
# back (PostgreSQL's second insert waits for the first to commit, then finds the row it
# may not replace). Params: rows.request_to_params(record).
REQUEST_CLAIM = (
    f"INSERT INTO oncegraph_requests ({_COLS}) VALUES ({_MARKS}) "
    "ON CONFLICT (scope, idem_key) DO UPDATE SET "
    "request_hash = excluded.request_hash, run_id = excluded.run_id, "
    "status_code = excluded.status_code, response = excluded.response, "
    "created_at = excluded.created_at, expires_at = excluded.expires_at "
    "WHERE oncegraph_requests.expires_at <= excluded.created_at "
    "RETURNING idem_key"
)

# Params: scope, key.
REQUEST_SELECT = f"SELECT {_COLS} FROM oncegraph_requests WHERE scope = ? AND idem_key = ?"

# The first request's answer, once: only on the claim it answers (its created_at) while
# it is still in flight. Params: status_code, response, scope, key, created_at.
REQUEST_FINISH = (
    "UPDATE oncegraph_requests SET status_code = ?, response = ? "
    "WHERE scope = ? AND idem_key = ? AND created_at = ? AND status_code IS NULL"
)

# A request refused before it did anything gives its key back. Params: scope, key,
# created_at.
REQUEST_RELEASE = (
    "DELETE FROM oncegraph_requests "
    "WHERE scope = ? AND idem_key = ? AND created_at = ? AND status_code IS NULL"
)

# Params: the time (seconds); rows whose window ended by then go.
REQUEST_PRUNE = "DELETE FROM oncegraph_requests WHERE expires_at <= ?"

__all__ = [
    "REQUEST_CLAIM",
    "REQUEST_COLUMNS",
    "REQUEST_FINISH",
    "REQUEST_PRUNE",
    "REQUEST_RELEASE",
    "REQUEST_SELECT",
]
