"""Records <-> rows of the audit log (``oncegraph_audit``) and of idempotency keys
(``oncegraph_requests``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from oncegraph.storage.records import AUDIT_FIELDS, AuditRecord, audit_values
from oncegraph.storage.requests import IdempotencyRecord
from oncegraph.storage.sql.rows_codec import AUDIT, REQUESTS, Codec, Row, decode

# The audit columns read back as they are (the last two, reason and details, are sealed).
_AS_STORED = AUDIT_FIELDS[:-2]


class AuditRows(Codec):
    """Audit records and idempotency keys."""

    __slots__ = ()

    def audit_to_params(self, record: AuditRecord) -> tuple[Any, ...]:
        *head, reason, details = audit_values(record)
        return (
            *head,
            self._opt_text(reason, self._at(AUDIT, "reason", record.audit_id)),
            self._json(details, self._at(AUDIT, "details", record.audit_id)),
        )

    def _audit(self, row: Row) -> AuditRecord:
        return AuditRecord(
            **dict(zip(_AS_STORED, row, strict=False)),
            reason=self._open_text(row[8], self._at(AUDIT, "reason", row[0])),
            details=self._loads(row[9], self._at(AUDIT, "details", row[0])),
        )

    def audit_from_row(self, row: Row) -> AuditRecord:
        return decode("oncegraph_audit", row, self._audit)

    def chained_audit(self, row: Row) -> Any:
        """An :data:`~oncegraph.storage.auditchain.Chained` from an ``AUDIT_CHAIN_PAGE``
        row (the audit columns, then ``chain_seq``, ``chain_mac``)."""
        seq, mac = row[-2], row[-1]
        record = row[:-2]
        return (
            None if seq is None else int(seq),
            mac,
            lambda: self.audit_from_row(record),
            record[0],
        )

    # -- idempotency keys (oncegraph_requests) --------------------------------------------

    def request_to_params(self, record: IdempotencyRecord) -> tuple[Any, ...]:
        """In :data:`oncegraph.storage.sql.requests.REQUEST_COLUMNS` order; the answer is
        sealed when encrypting (it shows what the caller was shown: a run's input)."""
        return (
            record.scope,
            record.key,
            record.request_hash,
            record.run_id,
            record.status_code,
            self.response_param(record.scope, record.key, record.response),
            record.created_at,
            record.expires_at,
        )

    def response_param(
        self, scope: str, key: str, response: Mapping[str, Any] | None
    ) -> str | None:
        """A finished request's answer as stored (sealed when encrypting)."""
        return self._opt_json(response, self._at(REQUESTS, "response", scope, key))

    def _request(self, row: Row) -> IdempotencyRecord:
        response = self._opt_loads(row[5], self._at(REQUESTS, "response", row[0], row[1]))
        if response is not None and not isinstance(response, Mapping):
            raise TypeError(f"response must be a JSON object; got {type(response).__name__}")
        return IdempotencyRecord(
            scope=row[0],
            key=row[1],
            request_hash=row[2],
            run_id=row[3],
            status_code=None if row[4] is None else int(row[4]),
            response=response,
            created_at=float(row[6]),
            expires_at=float(row[7]),
        )

    def request_from_row(self, row: Row) -> IdempotencyRecord:
        return decode("oncegraph_requests", row, self._request)


__all__ = [
    "AuditRows",
]
