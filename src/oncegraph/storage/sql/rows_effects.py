"""Records <-> rows of the effect ledger (``oncegraph_effects``): every column checked
on the way out (:mod:`.effect_checks`)."""

from __future__ import annotations

from typing import Any

from oncegraph.errors import EncryptionKeyError, OnceGraphError
from oncegraph.storage.records import EffectClass, EffectPayload, EffectRecord, EffectStatus
from oncegraph.storage.sql.effect_checks import (
    REPAIRABLE,
    attempts_from_json,
    attempts_json,
    corrupt_effect,
    effect_corruption,
    effect_problem,
)
from oncegraph.storage.sql.rows_codec import EFFECTS, BadColumn, Codec, Layout, Row, decode
from oncegraph.storage.sql.statements import EFFECT_COLUMNS

_OUTCOME = ("attempts", "provider_reference", "result", "error")  # as _effect_outcome gives them
_EFFECT = Layout(
    EffectRecord,
    EFFECT_COLUMNS,
    written=("effect_class", "status", "request", "recipient", *_OUTCOME),
)


class EffectRows(Codec):
    """Effects and their payloads."""

    __slots__ = ()

    def effect_to_params(self, effect: EffectRecord) -> tuple[Any, ...]:
        key = effect.effect_id
        return _EFFECT.params(
            effect,
            str(effect.effect_class),
            str(effect.status),
            self._opt_json(effect.request, self._at(EFFECTS, "request", key)),
            self._opt_text(effect.recipient, self._at(EFFECTS, "recipient", key)),
            *self._effect_outcome(effect),
        )

    def effect_update_params(self, effect: EffectRecord) -> tuple[Any, ...]:
        """Parameters for ``EFFECT_UPDATE``: the mutable columns, then ``effect_id``."""
        return (
            str(effect.status),
            *self._effect_outcome(effect),
            effect.updated_at,
            effect.row_version,
            effect.effect_id,
        )

    def _effect_outcome(self, effect: EffectRecord) -> tuple[Any, ...]:
        """``attempts, provider_reference, result, error`` as stored."""
        key = effect.effect_id
        return (
            self._seal(attempts_json(effect.attempts), self._at(EFFECTS, "attempts", key)),
            self._opt_text(effect.provider_reference, self._at(EFFECTS, "provider_reference", key)),
            self._opt_json(effect.result, self._at(EFFECTS, "result", key)),
            self._opt_text(effect.error, self._at(EFFECTS, "error", key)),
        )

    def _effect(self, row: Row, unread: frozenset[str] = frozenset()) -> EffectRecord:
        """The record of an effect row, every column checked (:func:`effect_problem`);
        a column that no writer could have written raises :class:`BadColumn`.
        ``unread``: outcome columns (of :data:`REPAIRABLE`) taken as unknown instead of
        read, for :meth:`effect_from_row`'s salvage."""
        column = "effect_class"  # the column being read, named if it fails
        try:
            effect_class = EffectClass(row[2])
            column = "status"
            status = EffectStatus.PENDING if unread else EffectStatus(row[8])
            key = row[0]
            column = "request"
            request = self._opt_loads(row[10], self._at(EFFECTS, column, key))
            column = "recipient"
            recipient = self._open_text(row[11], self._at(EFFECTS, column, key))
            column = "attempts"
            opened = None if unread else self._open_text(row[12], self._at(EFFECTS, column, key))
            attempts = () if unread else attempts_from_json(opened)
            column = "provider_reference"
            where = self._at(EFFECTS, column, key)
            reference = None if unread else self._open_text(row[13], where)
            column = "result"
            result = None if unread else self._opt_loads(row[14], self._at(EFFECTS, column, key))
            column = "error"
            error = None if unread else self._open_text(row[15], self._at(EFFECTS, column, key))
        except (ValueError, TypeError, IndexError, KeyError, AttributeError) as exc:
            raise BadColumn(column, f"{type(exc).__name__}: {exc}") from exc
        record = EffectRecord(
            effect_id=row[0],
            effect_type=row[1],
            effect_class=effect_class,
            command_id=row[3],
            run_id=row[4],
            thread_id=row[5],
            node=row[6],
            request_hash=row[7],
            status=status,
            checkpoint_id=row[9],
            request=request,
            recipient=recipient,
            attempts=attempts,
            provider_reference=reference,
            result=result,
            error=error,
            created_at=row[16],
            updated_at=row[16] if unread else row[17],
            row_version=row[18],
        )
        problem = effect_problem(record, outcome=not unread)
        if problem is not None:
            raise BadColumn(*problem)
        return record

    def effect_from_row(self, row: Row) -> EffectRecord:
        """The record of an effect row; a row that fails any check of
        :func:`effect_problem` is a :class:`~oncegraph.errors.CorruptRecordError` naming
        its column (:func:`corrupt_effect`), raised before anyone can act on it."""
        try:
            return self._effect(row)
        except EncryptionKeyError:
            raise  # a missing key names its own fix; the row is not corrupt
        except BadColumn as bad:
            salvage = None
            if bad.column in REPAIRABLE:
                try:
                    salvage = self._effect(row, unread=REPAIRABLE)
                except (BadColumn, OnceGraphError):
                    salvage = None
            raise corrupt_effect(row, bad.column, bad.detail, salvage) from bad
        except IndexError as exc:  # a row of the wrong width: no column to name
            raise corrupt_effect(row, "", f"{type(exc).__name__}: {exc}", None) from exc

    def _payload(self, row: Row) -> EffectPayload:
        column = "request"
        try:
            request = self._opt_loads(row[2], self._at(EFFECTS, column, row[0]))
            column = "result"
            return EffectPayload(
                row[1], request, self._opt_loads(row[3], self._at(EFFECTS, column, row[0]))
            )
        except (ValueError, TypeError) as exc:
            raise BadColumn(column, f"{type(exc).__name__}: {exc}") from exc

    def payload_from_row(self, row: Row) -> EffectPayload:
        """An :class:`EffectPayload` from ``effect_id, effect_type, request, result``; a
        column that cannot be read is named (:func:`effect_corruption`)."""
        try:
            return decode("oncegraph_effects", row, self._payload)
        except BadColumn as bad:
            raise effect_corruption(row[0], bad.column, bad.detail, effect_type=row[1]) from bad


__all__ = [
    "EffectRows",
]
