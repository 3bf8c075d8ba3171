"""A found effect record must be the record of the call that finds it (guarantee 12).

The row decoder checks each column of an effect row on its own
(:func:`oncegraph.storage.sql.rows.effect_problem`). What only the ledger can check is
checked here, on every path that acts on a record it found (a resume deciding from it,
a planned intent read back, an evidence replay serving its result, an operator's
resolve, check or redelivery):

* the stored request still hashes to the stored ``request_hash`` under the store's key
  (:mod:`oncegraph.ledger.keys`): a request changed at rest would otherwise be sent by a
  redelivery, and a damaged hash would be reported as another caller's request;
* the row's tool and command are the ones its effect id was made from.

A record that fails is a :class:`~oncegraph.errors.CorruptRecordError` naming the
column; the caller calls nothing and writes nothing.
"""

from __future__ import annotations

from oncegraph.errors import CorruptRecordError
from oncegraph.ledger.keys import same_request
from oncegraph.storage.records import EffectRecord
from oncegraph.storage.sql.rows import effect_corruption

__all__ = ["check_found"]


def _corrupt(record: EffectRecord, column: str, detail: str) -> CorruptRecordError:
    return effect_corruption(
        record.effect_id,
        column,
        detail,
        effect_type=record.effect_type,
        thread_id=record.thread_id,
        run_id=record.run_id,
        recipient=record.recipient,
    )


def check_found(
    record: EffectRecord,
    key: bytes | None,
    *,
    effect_type: str | None = None,
    command_id: str | None = None,
    call_hash: str | None = None,
) -> None:
    """Raise :class:`CorruptRecordError` unless ``record`` agrees with itself and with
    the call that looked it up (``effect_type``, ``command_id`` and the call's request
    hash ``call_hash``, where known). A request that differs from the call's while the
    record is whole is not damage: the caller's :class:`RequestMismatchError` says so."""
    if effect_type is not None and record.effect_type != effect_type:
        raise _corrupt(
            record,
            "effect_type",
            f"holds {record.effect_type!r}, but its effect id was made for {effect_type!r}",
        )
    if command_id is not None and record.command_id != command_id:
        raise _corrupt(
            record,
            "command_id",
            f"holds {record.command_id!r}, but its effect id was made for {command_id!r}",
        )
    if same_request(record.request_hash, record.request, key):
        return
    if call_hash is not None and call_hash == record.request_hash:
        column, detail = "request", "the stored request no longer matches its request_hash"
    elif call_hash is not None and same_request(call_hash, record.request, key):
        column, detail = "request_hash", "does not match the stored request (or this call's)"
    else:
        column, detail = "request", "the stored request and its request_hash do not match"
    raise _corrupt(record, column, detail)
