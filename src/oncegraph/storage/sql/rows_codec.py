"""The codec every table's rows share: sealing and opening payload columns, JSON in and
out, and decoding a row into its record with a clear error naming the table and key
(guarantee 12: corrupt rows get a clear error, never a silent default).

:class:`Codec` is the base of :class:`~oncegraph.storage.sql.rows.Rows`, whose table
families are written in :mod:`.rows_runs`, :mod:`.rows_effects` and :mod:`.rows_audit`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from oncegraph._json import dumps_str, loads
from oncegraph.errors import EncryptionKeyError, corrupt
from oncegraph.storage.encryption import EncryptionKeys, open_plain, place
from oncegraph.storage.records import ThreadRecord

Row = Sequence[Any]
_R = TypeVar("_R")


# Where each table's thread and run ids sit in its rows (for error messages).
_IDS = {
    "oncegraph_runs": (1, 0),
    "oncegraph_checkpoints": (1, 2),
    "oncegraph_task_writes": (0, None),
    "oncegraph_effects": (5, 4),
    "oncegraph_audit": (7, 6),
    "oncegraph_requests": (None, 3),
}


class BadColumn(ValueError):
    """Raised while reading a row: ``column`` holds what no writer of it writes."""

    def __init__(self, column: str, detail: str) -> None:
        super().__init__(f"{column}: {detail}")
        self.column = column
        self.detail = detail


def decode(table: str, row: Row, build: Callable[[Row], _R]) -> _R:
    try:
        return build(row)
    except (EncryptionKeyError, BadColumn):
        raise  # a missing key names its own fix; a named column is told by the caller
    except (ValueError, TypeError, IndexError, KeyError, AttributeError) as exc:
        key = row[0] if row else "?"
        thread_at, run_at = _IDS.get(table, (None, None))

        def at(index: int | None) -> Any:
            return row[index] if index is not None and len(row) > index else None

        raise corrupt(
            table, key, f"{type(exc).__name__}: {exc}", thread_id=at(thread_at), run_id=at(run_at)
        ) from exc


# -- threads ------------------------------------------------------------------------


def thread_from_row(row: Row) -> ThreadRecord:
    return ThreadRecord(
        thread_id=row[0], version=int(row[1]), head_checkpoint_id=row[2], updated_at=row[3]
    )


# -- a record's columns -----------------------------------------------------------------


class Layout(Generic[_R]):
    """A table whose columns, in their stored order, are its record's fields in theirs
    (checked when made), so a record's values are a row's parameters and a row's values
    build its record, by position. ``written``: the columns stored otherwise than the
    record holds them, whose values :meth:`params` is given, in this order; ``read``: the
    columns converted on the way back, whose values :meth:`record` is given.

    Both run for every row a step writes or reads, so they are compiled once, from the
    field names alone, into the tuple a hand-written mapping would build."""

    __slots__ = ("params", "record")

    params: Callable[..., tuple[Any, ...]]
    """``params(record, *written)``: ``record``'s row parameters."""
    record: Callable[..., _R]
    """``record(row, *read)``: the record of ``row`` (its first columns, when it has more)."""

    def __init__(
        self,
        record: type[_R],
        columns: Sequence[str],
        *,
        written: Sequence[str] = (),
        read: Sequence[str] = (),
    ) -> None:
        fields = tuple(f.name for f in dataclasses.fields(record))  # type: ignore[arg-type]
        if fields != tuple(columns):
            raise TypeError(f"{record.__name__}'s fields are not its columns: {fields}")
        unknown = sorted({*written, *read} - set(fields))
        if unknown:
            raise TypeError(f"{record.__name__} has no columns {unknown}")
        given = {c: f"written_{i}" for i, c in enumerate(written)}
        out = ", ".join(given.get(f, f"record.{f}") for f in fields)
        taken = {c: f"read_{i}" for i, c in enumerate(read)}
        into = ", ".join(taken.get(f, f"row[{i}]") for i, f in enumerate(fields))
        scope: dict[str, Any] = {"build": record}
        exec(  # the text is built from the field names alone
            f"def params(record, {''.join(v + ', ' for v in given.values())}):\n"
            f"    return ({out},)\n"
            f"def record(row, {''.join(v + ', ' for v in taken.values())}):\n"
            f"    return build({into})\n",
            scope,
        )
        self.params = scope["params"]
        self.record = scope["record"]


# -- the codec of one store ------------------------------------------------------------


def _same(text: str, place: str | None = None) -> str:
    return text


# The tables whose rows hold sealed columns, by name.
RUNS = "oncegraph_runs"
CHECKPOINTS = "oncegraph_checkpoints"
LOG = "oncegraph_log"
TASK_WRITES = "oncegraph_task_writes"
EFFECTS = "oncegraph_effects"
AUDIT = "oncegraph_audit"
REQUESTS = "oncegraph_requests"

#: The sealed columns of each table, and the columns of its row key (in the order
#: :func:`~oncegraph.storage.encryption.place` binds them): what ``oncegraph db encrypt``
#: walks. Every other column is stored in clear.
SEALED_COLUMNS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    RUNS: (("run_id",), ("input", "error")),
    CHECKPOINTS: (("thread_id", "checkpoint_id"), ("channel_values", "metadata")),
    LOG: (("thread_id", "channel", "seq"), ("value",)),
    TASK_WRITES: (("thread_id", "checkpoint_id", "task", "kind", "idx"), ("value",)),
    EFFECTS: (
        ("effect_id",),
        ("request", "recipient", "attempts", "provider_reference", "result", "error"),
    ),
    AUDIT: (("audit_id",), ("reason", "details")),
    REQUESTS: (("scope", "idem_key"), ("response",)),
}


class Codec:
    """The helpers of :class:`~oncegraph.storage.sql.rows.Rows` that every table family
    uses (see its docstring for what is sealed)."""

    __slots__ = ("_open", "_seal", "encryption")

    def __init__(self, encryption: EncryptionKeys | None = None) -> None:
        self.encryption = encryption
        self._seal: Callable[[str, str], str] = _same if encryption is None else encryption.seal
        self._open: Callable[[str, str], str] = (
            open_plain if encryption is None else encryption.open
        )

    def _at(self, table: str, column: str, *key: Any) -> str:
        """Where a value is stored (:func:`~oncegraph.storage.encryption.place`), the
        associated data it is sealed with; "" without encryption (nothing binds it)."""
        return "" if self.encryption is None else place(table, column, *key)

    def _json(self, value: Any, where: str) -> str:
        return self._seal(dumps_str(value), where)

    def _opt_json(self, value: Any, where: str) -> str | None:
        return None if value is None else self._seal(dumps_str(value), where)

    def _loads(self, text: Any, where: str) -> Any:
        return loads(self._open(text, where) if isinstance(text, str) else text)

    def _opt_loads(self, text: Any, where: str) -> Any:
        return None if text is None else self._loads(text, where)

    def _opt_text(self, text: str | None, where: str) -> str | None:
        return None if text is None else self._seal(text, where)

    def _open_text(self, text: Any, where: str) -> Any:
        return self._open(text, where) if isinstance(text, str) else text


__all__ = [
    "AUDIT",
    "CHECKPOINTS",
    "EFFECTS",
    "LOG",
    "REQUESTS",
    "RUNS",
    "SEALED_COLUMNS",
    "TASK_WRITES",
    "BadColumn",
    "Codec",
    "Layout",
    "Row",
    "decode",
    "thread_from_row",
]
