"""The ledger port of the one SQL store: effects, the audit log and idempotency keys,
written once over :class:`~oncegraph.storage.sql.store_port.SqlPort`.

A driver error while reading or beginning an effect is a
:class:`~oncegraph.errors.LedgerUnavailableError` on every dialect (risky tools then do
not run); a lost compare-and-swap of an effect is a
:class:`~oncegraph.errors.StaleStateError` naming the stored row version.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from oncegraph.errors import LedgerUnavailableError, StaleStateError, StorageError
from oncegraph.storage import auditchain as chain
from oncegraph.storage.queries import AuditQuery, EffectQuery, PayloadQuery
from oncegraph.storage.records import AuditRecord, EffectPayload, EffectRecord
from oncegraph.storage.requests import IdempotencyRecord
from oncegraph.storage.sql import request_keys as R
from oncegraph.storage.sql import rows
from oncegraph.storage.sql import statements as S
from oncegraph.storage.sql.store_port import FirstWrite, SqlPort


class LedgerMethods(SqlPort):
    """:class:`~oncegraph.storage.protocols.EffectStore`, the audit log and requests."""

    # -- effects -----------------------------------------------------------------------

    async def begin_effect(
        self, record: EffectRecord, *, fence: int | None = None
    ) -> tuple[EffectRecord, bool]:
        params = self.rows.effect_to_params(record)
        fenced = None if fence is None else (record.run_id, fence)
        first = FirstWrite(S.EFFECT_INSERT, params, S.EFFECT_SELECT, (record.effect_id,), fenced)
        inserted, row = await self._first_writer("begin_effect", first, LedgerUnavailableError)
        if inserted:
            return self.rows.effect_from_row(params), True
        if row is None:  # pragma: no cover - effects are never deleted while in a run
            raise LedgerUnavailableError(
                f"effect {record.effect_id} conflicted on insert but cannot be read back"
            )
        return self.rows.effect_from_row(row), False

    async def get_effect(self, effect_id: str) -> EffectRecord | None:
        row = await self._fetchone(
            "get_effect", S.EFFECT_SELECT, (effect_id,), LedgerUnavailableError
        )
        return None if row is None else self.rows.effect_from_row(row)

    async def save_effect(
        self, record: EffectRecord, *, fence: int | None = None, audit: AuditRecord | None = None
    ) -> None:
        expected = record.row_version - 1
        params: tuple[Any, ...]
        if expected == 0:  # never begun: insert it (or update a row that was never written)
            sql, params = S.EFFECT_UPSERT_FIRST, tuple(self.rows.effect_to_params(record))
        else:
            sql, params = S.EFFECT_UPDATE_CAS, (*self.rows.effect_update_params(record), expected)
        fenced = None if fence is None else (record.run_id, fence)
        if await self._write("save_effect", sql, params, fence=fenced, audit=audit) == 1:
            return
        stored = await self._fetchone("save_effect", S.EFFECT_SELECT, (record.effect_id,))
        version = "none" if stored is None else self.rows.effect_from_row(stored).row_version
        stale = rows.effect_cas_message(record.effect_id, expected)
        raise StaleStateError(f"{stale} (stored row version: {version})")

    async def _list_effects(self, q: EffectQuery) -> list[EffectRecord]:
        found = await self._ledger_listing("list_effects", S.effect_query(q))
        return [self.rows.effect_from_row(r) for r in found]

    async def _list_effect_payloads(self, q: PayloadQuery) -> list[EffectPayload]:
        found = await self._ledger_listing("list_effect_payloads", S.payload_query(q))
        return [self.rows.payload_from_row(r) for r in found]

    async def _ledger_listing(self, op: str, listing: tuple[str, list[Any]] | None) -> list[Any]:
        """The rows of a ledger listing's statement (none for a listing of nothing); a
        driver error is a ``LedgerUnavailableError``."""
        if listing is None:
            return []
        return await self._fetchall(op, *listing, LedgerUnavailableError)

    # -- the audit log -----------------------------------------------------------------

    async def append_audit(self, record: AuditRecord) -> None:
        key = await self._chain_key()
        duplicate = f"audit record {record.audit_id!r} already exists; nothing was written"
        async with self._transaction("append_audit", duplicate=duplicate, chained=True) as tx:
            await self._append_audit_in_tx(tx, record, key)

    async def verify_audit(self, *, page: int = 1000) -> chain.ChainReport:
        """Check the audit chain (:func:`oncegraph.storage.auditchain.verify`)."""
        db_key = await self._audit_db_key()
        row = await self._fetchone("verify_audit", S.AUDIT_UNCHAINED, ())
        latest = await self._fetchone("verify_audit", S.AUDIT_LATEST_UNCHAINED, ())
        found: list[chain.Chained] = []
        after = 0
        while True:
            batch = await self._fetchall("verify_audit", S.AUDIT_CHAIN_PAGE, (after, page))
            found.extend(self.rows.chained_audit(r) for r in batch)
            if len(batch) < page:
                break
            after = int(batch[-1][-2])
        return chain.verify(
            found,
            db_key=db_key,
            encryption=self.rows.encryption,
            unchained=int(row[0]),
            latest_unchained=None if latest is None else (latest[0], float(latest[1])),
        )

    async def _list_audit(self, q: AuditQuery) -> list[AuditRecord]:
        sql, params = S.audit_query(q)
        found = await self._fetchall("list_audit", sql, params)
        return [self.rows.audit_from_row(r) for r in found]

    # -- idempotency keys --------------------------------------------------------------

    async def claim_request(self, record: IdempotencyRecord) -> tuple[IdempotencyRecord, bool]:
        params = self.rows.request_to_params(record)
        first = FirstWrite(R.REQUEST_CLAIM, params, R.REQUEST_SELECT, params[:2])
        inserted, row = await self._first_writer("claim_request", first)
        if inserted:
            return self.rows.request_from_row(params), True
        if row is None:  # pragma: no cover - the conflict row is only deleted when expired
            raise StorageError(f"idempotency key {record.key!r} conflicted but cannot be read")
        return self.rows.request_from_row(row), False

    async def get_request(self, scope: str, key: str) -> IdempotencyRecord | None:
        row = await self._fetchone("get_request", R.REQUEST_SELECT, (scope, key))
        return None if row is None else self.rows.request_from_row(row)

    async def finish_request(
        self, record: IdempotencyRecord, *, status_code: int, response: Mapping[str, Any]
    ) -> bool:
        params = (
            status_code,
            self.rows.response_param(record.scope, record.key, response),
            record.scope,
            record.key,
            record.created_at,
        )
        return await self._write("finish_request", R.REQUEST_FINISH, params) == 1

    async def release_request(self, record: IdempotencyRecord) -> None:
        params = (record.scope, record.key, record.created_at)
        await self._write("release_request", R.REQUEST_RELEASE, params)

    async def prune_requests(self, *, before: float) -> int:
        return max(await self._write("prune_requests", R.REQUEST_PRUNE, (before,)), 0)


__all__ = ["LedgerMethods"]
