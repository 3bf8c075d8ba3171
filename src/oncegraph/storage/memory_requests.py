"""Idempotency keys of the in-memory store (``oncegraph_requests`` as rows)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from oncegraph.storage.memory_tables import Row, Tables, with_changes
from oncegraph.storage.requests import IdempotencyRecord
from oncegraph.storage.sql.request_keys import REQUEST_COLUMNS

_REQUEST_STATUS = REQUEST_COLUMNS.index("status_code")
_REQUEST_RESPONSE = REQUEST_COLUMNS.index("response")
_REQUEST_CREATED = REQUEST_COLUMNS.index("created_at")
_REQUEST_EXPIRES = REQUEST_COLUMNS.index("expires_at")


def _same_claim(row: Row, record: IdempotencyRecord) -> bool:
    """Is ``row`` the in-flight claim ``record`` made (not a later claim of its key)?"""
    return row[_REQUEST_STATUS] is None and row[_REQUEST_CREATED] == record.created_at


class RequestTables(Tables):
    """Claim, read, finish, release and prune idempotency keys."""

    # -- idempotency keys ----------------------------------------------------------------

    async def claim_request(self, record: IdempotencyRecord) -> tuple[IdempotencyRecord, bool]:
        row = self.rows.request_to_params(record)
        with self._lock:
            found = self._requests.get((record.scope, record.key))
            if found is not None and found[_REQUEST_EXPIRES] > record.created_at:
                return self.rows.request_from_row(found), False
            self._requests[(record.scope, record.key)] = row
        return self.rows.request_from_row(row), True

    async def get_request(self, scope: str, key: str) -> IdempotencyRecord | None:
        with self._lock:
            found = self._requests.get((scope, key))
        return None if found is None else self.rows.request_from_row(found)

    async def finish_request(
        self, record: IdempotencyRecord, *, status_code: int, response: Mapping[str, Any]
    ) -> bool:
        answer = self.rows.response_param(record.scope, record.key, response)
        with self._lock:
            found = self._requests.get((record.scope, record.key))
            if found is None or not _same_claim(found, record):
                return False
            self._requests[(record.scope, record.key)] = with_changes(
                found, {_REQUEST_STATUS: status_code, _REQUEST_RESPONSE: answer}
            )
            return True

    async def release_request(self, record: IdempotencyRecord) -> None:
        with self._lock:
            found = self._requests.get((record.scope, record.key))
            if found is not None and _same_claim(found, record):
                del self._requests[(record.scope, record.key)]

    async def prune_requests(self, *, before: float) -> int:
        with self._lock:
            doomed = [k for k, r in self._requests.items() if r[_REQUEST_EXPIRES] <= before]
            for k in doomed:
                del self._requests[k]
        return len(doomed)
