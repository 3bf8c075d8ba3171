"""Records <-> database rows, for every SQL dialect (and the in-memory store).

A row is a tuple in the column order of :mod:`oncegraph.storage.sql.statements`
(``*_COLUMNS``); ``X_to_params`` builds the INSERT parameters and ``X_from_row`` reads
a SELECT row back, so ``X_from_row(X_to_params(r))`` equals ``r`` up to JSON
normalization (tuples become lists, non-str keys become str). JSON columns are written
with :func:`oncegraph._json.dumps_str` and read with :func:`oncegraph._json.loads`;
a nullable JSON column stores SQL NULL for ``None``. State (checkpoint values, log
entries, a step's ``writes`` task writes, a run's input) arrives encoded by the state
schema and is written with :func:`oncegraph._json.dumps_state_str`, which refuses a
value JSON would not give back as itself, naming the field. Decoding always builds fresh
objects, so a returned value never aliases stored data.

A row that cannot be decoded raises :class:`~oncegraph.errors.StorageError` naming the
table and key (guarantee 12: corrupt rows get a clear error, never a silent default).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import orjson

from oncegraph._json import dumps_state_str, dumps_str, loads
from oncegraph.errors import (
    ConfigError,
    CorruptRecordError,
    EncryptionKeyError,
    InvalidUpdateError,
    OnceGraphError,
    corrupt,
)
from oncegraph.storage.encryption import BOUND, EncryptionKeys, open_plain, place
from oncegraph.storage.encryption import PREFIX as SEALED
from oncegraph.storage.records import (
    Attempt,
    AuditRecord,
    CheckpointRecord,
    EffectClass,
    EffectPayload,
    EffectRecord,
    EffectStatus,
    LogEntry,
    RunRecord,
    RunStatus,
    StepCommit,
    TaskWrite,
    ThreadRecord,
    WriteKind,
    error_text,
)
from oncegraph.storage.requests import IdempotencyRecord
from oncegraph.storage.sql.statements import THREAD_COLUMNS

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


def _decode(table: str, row: Row, build: Callable[[Row], _R]) -> _R:
    try:
        return build(row)
    except (EncryptionKeyError, _BadColumn):
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


# -- the codec of one store ------------------------------------------------------------


def _same(text: str, place: str | None = None) -> str:
    return text


_RUNS = "oncegraph_runs"
_CHECKPOINTS = "oncegraph_checkpoints"
_LOG = "oncegraph_log"
_TASK_WRITES = "oncegraph_task_writes"
_EFFECTS = "oncegraph_effects"
_AUDIT = "oncegraph_audit"
_REQUESTS = "oncegraph_requests"

#: The sealed columns of each table, and the columns of its row key (in the order
#: :func:`~oncegraph.storage.encryption.place` binds them): what ``oncegraph db encrypt``
#: walks. Every other column is stored in clear.
SEALED_COLUMNS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    _RUNS: (("run_id",), ("input", "error")),
    _CHECKPOINTS: (("thread_id", "checkpoint_id"), ("channel_values", "metadata")),
    _LOG: (("thread_id", "channel", "seq"), ("value",)),
    _TASK_WRITES: (("thread_id", "checkpoint_id", "task", "kind", "idx"), ("value",)),
    _EFFECTS: (
        ("effect_id",),
        ("request", "recipient", "attempts", "provider_reference", "result", "error"),
    ),
    _AUDIT: (("audit_id",), ("reason", "details")),
    _REQUESTS: (("scope", "idem_key"), ("response",)),
}


class Rows:
    """Records <-> rows for one store, with its encryption at rest (if any).

    The payload columns (:data:`SEALED_COLUMNS`: checkpoint values and metadata, log
    values, task write values, a run's input and error, an effect's request, recipient,
    result, provider reference, error and attempts, audit reasons and details, stored
    answers to idempotent requests) are sealed on the way in, bound to their table,
    column and row key, and opened on the way out
    (:class:`~oncegraph.storage.encryption.EncryptionKeys`); every other column is as
    without encryption. Without keys a sealed value is an
    :class:`~oncegraph.errors.EncryptionKeyError` naming the fix; with keys a clear
    value in a sealed column is a
    :class:`~oncegraph.errors.PlaintextError` naming ``oncegraph db
    encrypt``.
    """

    __slots__ = ("_open", "_seal", "encryption")

    def __init__(self, encryption: EncryptionKeys | None = None) -> None:
        self.encryption = encryption
        self._seal: Callable[[str, str], str] = _same if encryption is None else encryption.seal
        self._open: Callable[[str, str], str] = (
            open_plain if encryption is None else encryption.open
        )

    # the codec-free helpers, so a store needs one object
    thread_from_row = staticmethod(thread_from_row)

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

    # -- runs -------------------------------------------------------------------------

    def error_param(self, run_id: str, error: str | None) -> str | None:
        """A run's error as stored: :func:`~oncegraph.storage.records.error_text`, sealed
        when encrypting (an error message may quote a payload)."""
        text = error_text(error)
        return None if text is None else self._seal(text, self._at(_RUNS, "error", run_id))

    def run_to_params(self, run: RunRecord) -> tuple[Any, ...]:
        return (
            run.run_id,
            run.thread_id,
            str(run.status),
            run.workflow_name,
            run.workflow_version,
            run.state_schema_version,
            run.graph_fingerprint,
            run.parent_run_id,
            run.parent_checkpoint_id,
            run.launch_reason,
            run.mode,
            None
            if run.input is None
            else self._seal(dumps_state_str(run.input), self._at(_RUNS, "input", run.run_id)),
            dumps_str(run.config),
            self.error_param(run.run_id, run.error),
            run.lease_owner,
            run.lease_expires_at,
            run.fencing_token,
            run.created_at,
            run.updated_at,
            run.app_id,
            run.tenant,
        )

    def _run(self, row: Row) -> RunRecord:
        return RunRecord(
            run_id=row[0],
            thread_id=row[1],
            status=RunStatus(row[2]),
            workflow_name=row[3],
            workflow_version=row[4],
            state_schema_version=int(row[5]),
            graph_fingerprint=row[6],
            parent_run_id=row[7],
            parent_checkpoint_id=row[8],
            launch_reason=row[9],
            mode=row[10],
            input=self._opt_loads(row[11], self._at(_RUNS, "input", row[0])),
            config=loads(row[12]),
            error=self._open_text(row[13], self._at(_RUNS, "error", row[0])),
            lease_owner=row[14],
            lease_expires_at=row[15],
            fencing_token=int(row[16]),
            created_at=row[17],
            updated_at=row[18],
            app_id=row[19],
            tenant=row[20],
        )

    def run_from_row(self, row: Row) -> RunRecord:
        return _decode("oncegraph_runs", row, self._run)

    def thread_opening_from_row(
        self, row: Row | None
    ) -> tuple[ThreadRecord | None, RunRecord | None]:
        """A ``THREAD_OPENING`` row: (the thread, its latest run), each None when absent
        (its key column is NULL)."""
        if row is None:  # the statement always answers one row; a store may not
            return None, None
        n = len(THREAD_COLUMNS)
        thread = None if row[0] is None else thread_from_row(row[:n])
        run = None if row[n] is None else self.run_from_row(row[n:])
        return thread, run

    def run_opening_from_row(self, row: Row | None) -> tuple[RunRecord | None, ThreadRecord | None]:
        """A ``RUN_OPENING`` row: (the run, its thread), None where absent."""
        if row is None:
            return None, None
        n = len(row) - len(THREAD_COLUMNS)
        thread = None if row[n] is None else thread_from_row(row[n:])
        return self.run_from_row(row[:n]), thread

    # -- checkpoints ------------------------------------------------------------------

    def checkpoint_to_params(self, cp: CheckpointRecord) -> tuple[Any, ...]:
        return (
            cp.checkpoint_id,
            cp.thread_id,
            cp.run_id,
            cp.step,
            cp.version,
            cp.parent_checkpoint_id,
            self._seal(
                dumps_state_str(cp.values),
                self._at(_CHECKPOINTS, "channel_values", cp.thread_id, cp.checkpoint_id),
            ),
            dumps_str(cp.logs),
            dumps_str(list(cp.next)),
            self._json(
                cp.metadata, self._at(_CHECKPOINTS, "metadata", cp.thread_id, cp.checkpoint_id)
            ),
            cp.created_at,
        )

    def _checkpoint(self, row: Row) -> CheckpointRecord:
        values = self._loads(row[6], self._at(_CHECKPOINTS, "channel_values", row[1], row[0]))
        logs, nxt = loads(row[7]), loads(row[8])
        metadata = self._loads(row[9], self._at(_CHECKPOINTS, "metadata", row[1], row[0]))
        if not isinstance(values, dict):
            raise TypeError(f"channel_values is a {type(values).__name__}, not an object")
        if not isinstance(logs, dict) or not all(
            isinstance(k, str) and type(v) is int and v >= 0 for k, v in logs.items()
        ):
            raise TypeError(f"logs must map channel names to entry counts; got {logs!r}")
        if not isinstance(nxt, list) or not all(isinstance(n, str) for n in nxt):
            raise TypeError(f"next_nodes must be a list of node names; got {nxt!r}")
        if not isinstance(metadata, dict):
            raise TypeError(f"metadata is a {type(metadata).__name__}, not an object")
        return CheckpointRecord(
            checkpoint_id=row[0],
            thread_id=row[1],
            run_id=row[2],
            step=int(row[3]),
            version=int(row[4]),
            parent_checkpoint_id=row[5],
            values=values,
            logs=logs,
            next=tuple(nxt),
            metadata=metadata,
            created_at=row[10],
        )

    def checkpoint_from_row(self, row: Row) -> CheckpointRecord:
        return _decode("oncegraph_checkpoints", row, self._checkpoint)

    # -- logs -------------------------------------------------------------------------

    def log_params(self, thread_id: str, entries: Sequence[LogEntry]) -> list[tuple[Any, ...]]:
        """Parameters for ``executemany(LOG_INSERT, ...)``."""
        return [
            (
                thread_id,
                e.channel,
                e.seq,
                self._seal(
                    dumps_state_str(e.value, field=e.channel),
                    self._at(_LOG, "value", thread_id, e.channel, e.seq),
                ),
            )
            for e in entries
        ]

    def log_values(self, thread_id: str, channel: str, found: Sequence[Row]) -> list[Any]:
        """The values of ``SELECT seq, value`` log rows; a corrupt entry is named."""
        out = []
        if self.encryption is None:  # the common case, without a call per entry to open it
            try:
                return [
                    orjson.loads(value)
                    if type(value) is str and not value.startswith((BOUND, SEALED))
                    else self._loads(value, "")
                    for _, value in found
                ]
            except ValueError:
                pass  # a corrupt entry: found again below, by its number
        for seq, value in found:
            try:
                out.append(self._loads(value, self._at(_LOG, "value", thread_id, channel, seq)))
            except ValueError as exc:
                raise corrupt(
                    "oncegraph_log", f"{channel}#{seq}", str(exc), thread_id=thread_id
                ) from exc
        return out

    # -- task writes ------------------------------------------------------------------

    def task_write_to_params(self, write: TaskWrite) -> tuple[Any, ...]:
        return (
            write.thread_id,
            write.checkpoint_id,
            write.task,
            write.kind,
            write.idx,
            self._seal(
                _task_write_json(write),
                self._at(
                    _TASK_WRITES,
                    "value",
                    write.thread_id,
                    write.checkpoint_id,
                    write.task,
                    write.kind,
                    write.idx,
                ),
            ),
            write.created_at,
        )

    def _task_write(self, row: Row) -> TaskWrite:
        return TaskWrite(
            thread_id=row[0],
            checkpoint_id=row[1],
            task=row[2],
            kind=WriteKind(row[3]),
            idx=int(row[4]),
            value=self._loads(
                row[5], self._at(_TASK_WRITES, "value", row[0], row[1], row[2], row[3], int(row[4]))
            ),
            created_at=row[6],
        )

    def task_write_from_row(self, row: Row) -> TaskWrite:
        return _decode("oncegraph_task_writes", row, self._task_write)

    # -- effects ----------------------------------------------------------------------

    def effect_to_params(self, effect: EffectRecord) -> tuple[Any, ...]:
        return (
            effect.effect_id,
            effect.effect_type,
            str(effect.effect_class),
            effect.command_id,
            effect.run_id,
            effect.thread_id,
            effect.node,
            effect.request_hash,
            str(effect.status),
            effect.checkpoint_id,
            self._opt_json(effect.request, self._at(_EFFECTS, "request", effect.effect_id)),
            self._opt_text(effect.recipient, self._at(_EFFECTS, "recipient", effect.effect_id)),
            *self._effect_outcome(effect),
            effect.created_at,
            effect.updated_at,
            effect.row_version,
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
            self._seal(_attempts_json(effect.attempts), self._at(_EFFECTS, "attempts", key)),
            self._opt_text(
                effect.provider_reference, self._at(_EFFECTS, "provider_reference", key)
            ),
            self._opt_json(effect.result, self._at(_EFFECTS, "result", key)),
            self._opt_text(effect.error, self._at(_EFFECTS, "error", key)),
        )

    def _effect(self, row: Row, unread: frozenset[str] = frozenset()) -> EffectRecord:
        """The record of an effect row, every column checked (:func:`effect_problem`);
        a column that no writer could have written raises :class:`_BadColumn`.
        ``unread``: outcome columns (of :data:`REPAIRABLE`) taken as unknown instead of
        read, for :meth:`effect_from_row`'s salvage."""
        column = "effect_class"  # the column being read, named if it fails
        try:
            effect_class = EffectClass(row[2])
            column = "status"
            status = EffectStatus.PENDING if unread else EffectStatus(row[8])
            key = row[0]
            column = "request"
            request = self._opt_loads(row[10], self._at(_EFFECTS, column, key))
            column = "recipient"
            recipient = self._open_text(row[11], self._at(_EFFECTS, column, key))
            column = "attempts"
            opened = None if unread else self._open_text(row[12], self._at(_EFFECTS, column, key))
            attempts = () if unread else _attempts(opened)
            column = "provider_reference"
            where = self._at(_EFFECTS, column, key)
            reference = None if unread else self._open_text(row[13], where)
            column = "result"
            result = None if unread else self._opt_loads(row[14], self._at(_EFFECTS, column, key))
            column = "error"
            error = None if unread else self._open_text(row[15], self._at(_EFFECTS, column, key))
        except (ValueError, TypeError, IndexError, KeyError, AttributeError) as exc:
            raise _BadColumn(column, f"{type(exc).__name__}: {exc}") from exc
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
            raise _BadColumn(*problem)
        return record

    def effect_from_row(self, row: Row) -> EffectRecord:
        """The record of an effect row; a row that fails any check of
        :func:`effect_problem` is a :class:`~oncegraph.errors.CorruptRecordError` naming
        its column (:func:`corrupt_effect`), raised before anyone can act on it."""
        try:
            return self._effect(row)
        except EncryptionKeyError:
            raise  # a missing key names its own fix; the row is not corrupt
        except _BadColumn as bad:
            salvage = None
            if bad.column in REPAIRABLE:
                try:
                    salvage = self._effect(row, unread=REPAIRABLE)
                except (_BadColumn, OnceGraphError):
                    salvage = None
            raise corrupt_effect(row, bad.column, bad.detail, salvage) from bad
        except IndexError as exc:  # a row of the wrong width: no column to name
            raise corrupt_effect(row, "", f"{type(exc).__name__}: {exc}", None) from exc

    def _payload(self, row: Row) -> EffectPayload:
        column = "request"
        try:
            request = self._opt_loads(row[2], self._at(_EFFECTS, column, row[0]))
            column = "result"
            return EffectPayload(
                row[1], request, self._opt_loads(row[3], self._at(_EFFECTS, column, row[0]))
            )
        except (ValueError, TypeError) as exc:
            raise _BadColumn(column, f"{type(exc).__name__}: {exc}") from exc

    def payload_from_row(self, row: Row) -> EffectPayload:
        """An :class:`EffectPayload` from ``effect_id, effect_type, request, result``; a
        column that cannot be read is named (:func:`effect_corruption`)."""
        try:
            return _decode("oncegraph_effects", row, self._payload)
        except _BadColumn as bad:
            raise effect_corruption(row[0], bad.column, bad.detail, effect_type=row[1]) from bad

    # -- the audit log ----------------------------------------------------------------

    def audit_to_params(self, record: AuditRecord) -> tuple[Any, ...]:
        return (
            record.audit_id,
            record.at,
            record.actor,
            record.action,
            record.target_kind,
            record.target_id,
            record.run_id,
            record.thread_id,
            self._opt_text(record.reason, self._at(_AUDIT, "reason", record.audit_id)),
            self._json(record.details, self._at(_AUDIT, "details", record.audit_id)),
        )

    def _audit(self, row: Row) -> AuditRecord:
        return AuditRecord(
            audit_id=row[0],
            at=row[1],
            actor=row[2],
            action=row[3],
            target_kind=row[4],
            target_id=row[5],
            run_id=row[6],
            thread_id=row[7],
            reason=self._open_text(row[8], self._at(_AUDIT, "reason", row[0])),
            details=self._loads(row[9], self._at(_AUDIT, "details", row[0])),
        )

    def audit_from_row(self, row: Row) -> AuditRecord:
        return _decode("oncegraph_audit", row, self._audit)

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
        return self._opt_json(response, self._at(_REQUESTS, "response", scope, key))

    def _request(self, row: Row) -> IdempotencyRecord:
        response = self._opt_loads(row[5], self._at(_REQUESTS, "response", row[0], row[1]))
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
        return _decode("oncegraph_requests", row, self._request)


def _task_write_json(write: TaskWrite) -> str:
    """A step's ``writes`` are state updates (strict JSON); interrupts and answers are not."""
    if write.kind != "writes":
        return dumps_str(write.value)
    try:
        return dumps_state_str(write.value)
    except InvalidUpdateError:
        update = write.value.get("update") if isinstance(write.value, Mapping) else None
        if isinstance(update, Mapping):
            dumps_state_str(update)  # raises again, naming the state field
        raise


def _attempts_json(attempts: Sequence[Attempt]) -> str:
    return dumps_str(
        [
            {
                "number": a.number,
                "started_at": a.started_at,
                "ended_at": a.ended_at,
                "outcome": a.outcome,
                "error": a.error,
            }
            for a in attempts
        ]
    )


def _attempts(text: Any) -> tuple[Attempt, ...]:
    """An effect's attempts as the ledger writes them: a list of objects numbered 1, 2,
    ... in order, each with its start time (and, once ended, its end time and outcome)."""
    found = loads(text)
    if not isinstance(found, list):
        raise TypeError(f"attempts must be a list of objects; got {found!r}")
    out = []
    for number, a in enumerate(found, 1):
        if not isinstance(a, dict):
            raise TypeError(f"attempts must be a list of objects; got {found!r}")
        if type(a.get("number")) is not int or a["number"] != number:
            raise ValueError(f"attempt {number} of {len(found)} is numbered {a.get('number')!r}")
        started: Any = a.get("started_at")
        ended: Any = a.get("ended_at")
        outcome, error = a.get("outcome"), a.get("error")
        if not _is_time(started):
            raise ValueError(f"attempt {number} has no start time (started_at {started!r})")
        if ended is not None and not _is_time(ended):
            raise ValueError(f"attempt {number} has an unreadable ended_at {ended!r}")
        for name, value in (("outcome", outcome), ("error", error)):
            if value is not None and type(value) is not str:
                raise ValueError(f"attempt {number} has a {name} that is not text: {value!r}")
        out.append(Attempt(number, started, ended, outcome, error))
    return tuple(out)


def _is_time(value: Any) -> bool:
    return type(value) in (int, float) and math.isfinite(value)


# -- effect rows: what a stored effect must look like ---------------------------------

_EFFECT_TABLE = "oncegraph_effects"
_EFFECT_IDS = ("effect_id", "effect_type", "command_id", "run_id", "thread_id", "node")
_EFFECT_TEXTS = ("request_hash", "checkpoint_id", "recipient", "provider_reference", "error")
_OUTCOME_TEXTS = frozenset({"provider_reference", "error"})

#: The columns of an effect row that say what came of it (as opposed to what it is): an
#: operator who checked at the recipient replaces them with ``resolve_effect``.
REPAIRABLE = frozenset(
    {"status", "attempts", "provider_reference", "result", "error", "updated_at"}
)


class _BadColumn(ValueError):
    """Raised while reading a row: ``column`` holds what no writer of it writes."""

    def __init__(self, column: str, detail: str) -> None:
        super().__init__(f"{column}: {detail}")
        self.column = column
        self.detail = detail


def effect_problem(record: EffectRecord, *, outcome: bool = True) -> tuple[str, str] | None:
    """What makes ``record`` (as read from a row) one the ledger never writes: ``(column,
    detail)``, or None. Each column must hold its type (ids are non-empty text; times
    are finite numbers; ``row_version`` an integer >= 0, 0 being a row written before
    rows had versions), and the row must agree with itself: an effect without attempts
    is only ever a pending ``write`` intent planned with its step (row version 1,
    nothing attempted yet), so an attempted effect whose attempts are gone is damage,
    not a fresh intent a resume could send as if nothing had happened. ``outcome=False``
    skips the outcome columns (:data:`REPAIRABLE`)."""
    for name in _EFFECT_IDS:
        value = getattr(record, name)
        if type(value) is not str or not value:
            return name, f"must be non-empty text; holds {value!r}"
    for name in _EFFECT_TEXTS:
        value = getattr(record, name)
        if (outcome or name not in _OUTCOME_TEXTS) and value is not None and type(value) is not str:
            return name, f"must be text; holds {value!r}"
    if not record.request_hash:
        return "request_hash", "is empty"
    if type(record.row_version) is not int or record.row_version < 0:
        # (0: a row written before effect rows had versions, read as it was then)
        return "row_version", f"must be an integer >= 0; holds {record.row_version!r}"
    if not _is_time(record.created_at):
        return "created_at", f"must be a time in seconds; holds {record.created_at!r}"
    if not outcome:
        return None
    if not _is_time(record.updated_at):
        return "updated_at", f"must be a time in seconds; holds {record.updated_at!r}"
    if not record.attempts:
        if record.status is not EffectStatus.PENDING:
            return "attempts", f"a {record.status} effect must have at least one attempt; has none"
        if record.effect_class is not EffectClass.WRITE or record.row_version != 1:
            return "attempts", (
                f"a pending {record.effect_class} effect at row version {record.row_version} "
                "has no attempts; only a write intent planned with its step (row version 1) "
                "has none, so its attempts were lost"
            )
    return None


def corrupt_effect(
    row: Row, column: str, detail: str, salvage: EffectRecord | None = None
) -> CorruptRecordError:
    """The error for an effect row that fails its checks (guarantee 12: fail closed)
    (:func:`effect_corruption`); ``salvage``: the row read without its outcome columns,
    when only those are damaged."""

    def at(index: int) -> Any:
        return row[index] if len(row) > index else None

    return effect_corruption(
        at(0),
        column,
        detail,
        effect_type=at(1),
        thread_id=at(5),
        run_id=at(4),
        recipient=at(11) if salvage is None else salvage.recipient,
        salvage=salvage,
    )


def effect_corruption(
    effect_id: Any,
    column: str,
    detail: str,
    *,
    effect_type: Any = None,
    thread_id: Any = None,
    run_id: Any = None,
    recipient: Any = None,
    salvage: EffectRecord | None = None,
) -> CorruptRecordError:
    """The error for a damaged effect: names the effect, its tool, thread and run, the
    column, says that nothing was called or changed, and what to do. With ``salvage``
    (only the outcome columns are damaged) an operator who checked at the recipient can
    resolve the effect, which replaces them; otherwise only a restore can help."""
    where = [f"effect {effect_id!r}"]
    if isinstance(effect_type, str) and effect_type:
        where.append(f"tool {effect_type!r}")
    for label, value in (("thread", thread_id), ("run", run_id)):
        if value is not None:
            where.append(f"{label} {value!r}")
    part = f", column {column}" if column else ""
    if salvage is not None:
        to = recipient if isinstance(recipient, str) and recipient else "the recipient"
        fix = (
            f"Restore the row from a backup; or check at {to} whether the effect happened "
            f"and record what you found with app.resolve_effect({effect_id!r}, 'done' | "
            f"'not_done', ...) (on the command line: oncegraph resolve {effect_id} --outcome "
            "done|not_done --reason ...), which replaces the damaged outcome and is kept in "
            "the audit log; then continue the run"
        )
    else:
        fix = (
            "Restore the row from a backup (or repair it by hand; `oncegraph db verify` "
            "checks the schema); an operator cannot resolve an effect whose "
            f"{column or 'row'} cannot be trusted"
        )
    return CorruptRecordError(
        f"corrupt row in {_EFFECT_TABLE} ({', '.join(where)}){part}: {detail}. The row was "
        "left untouched and nothing was re-executed: no tool was called for this effect. "
        f"{fix}.",
        table=_EFFECT_TABLE,
        key=effect_id,
        column=column,
        salvage=salvage,
    )


# The codec without encryption, and its methods as functions (stores use their own Rows).
PLAIN = Rows()
run_to_params = PLAIN.run_to_params
run_from_row = PLAIN.run_from_row
checkpoint_to_params = PLAIN.checkpoint_to_params
checkpoint_from_row = PLAIN.checkpoint_from_row
log_params = PLAIN.log_params
log_values = PLAIN.log_values
task_write_to_params = PLAIN.task_write_to_params
task_write_from_row = PLAIN.task_write_from_row
effect_to_params = PLAIN.effect_to_params
effect_update_params = PLAIN.effect_update_params
effect_from_row = PLAIN.effect_from_row
audit_to_params = PLAIN.audit_to_params
audit_from_row = PLAIN.audit_from_row


# -- commit checks and messages (shared by every store) -----------------------------


def check_commit(commit: StepCommit) -> None:
    """Reject a malformed :class:`StepCommit` before any transaction starts.

    The checkpoint must belong to the commit's thread and carry the version the commit
    creates (``expected_version + 1``); a folded effect must be of the same thread.
    """
    cp = commit.checkpoint
    if cp.thread_id != commit.thread_id:
        raise ConfigError(
            f"StepCommit for thread {commit.thread_id!r} carries a checkpoint of thread "
            f"{cp.thread_id!r}; build the checkpoint for the thread being committed"
        )
    if commit.expected_version < 0 or cp.version != commit.expected_version + 1:
        raise ConfigError(
            f"StepCommit expects thread version {commit.expected_version}, so its checkpoint "
            f"must have version {commit.expected_version + 1}, not {cp.version}"
        )


def stale_message(commit: StepCommit) -> str:
    return (
        f"thread {commit.thread_id!r} is no longer at version {commit.expected_version}: "
        "another writer committed first; nothing was written. Reload the thread's head "
        "and retry from there."
    )


def lease_message(run_id: str, fence: int) -> str:
    return (
        f"run {run_id!r} is no longer held with fencing token {fence}: another process or "
        "an operator took it over; nothing was written. Stop working on this run."
    )


def full_message(commit: StepCommit, cause: str) -> str:
    """What a step commit that failed on a full disk means, for the person who meets it:
    the transaction was rolled back, so nothing of the step is stored; whether the run
    exists, which of its tools ran (their results are not recorded) and which did not,
    and what to do. ``cause`` says what is full (the store's own words)."""
    run_id = commit.checkpoint.run_id
    said = [f"{cause}. The step was not recorded: nothing of it was written"]
    if commit.new_run is not None and commit.new_run.run_id == run_id:
        said.append(
            f"Run {run_id!r} was not started: no record of it exists, and none of its nodes "
            "or tools ran. Free space, then start it again with the same input"
        )
        return ". ".join(said) + "."
    if commit.effects:
        ran = ", ".join(sorted({e.effect_type for e in commit.effects}))
        said.append(
            f"The tool calls of this step ({ran}) DID run, but their results are not "
            "recorded: resuming treats each as an unknown outcome, handled by its class (a "
            "write tool is called again with the same idempotency key; an irreversible one "
            "is reconciled, or the run is parked for review)"
        )
    if commit.intents:
        planned = ", ".join(sorted({e.effect_type for e in commit.intents}))
        said.append(f"The tool calls this step decided ({planned}) did NOT run")
    said.append(
        f"No node or tool after it ran. Run {run_id!r} can be resumed from its last recorded "
        "step once there is space: free space, then continue it (invoke(None, config) or "
        "app.resume(run_id, ...))"
    )
    return ". ".join(said) + "."


def effect_cas_message(effect_id: str, expected: int) -> str:
    return (
        f"effect {effect_id} changed since it was read (row version {expected}): another "
        "writer was first; nothing was written and nothing was sent."
    )


__all__ = [
    "PLAIN",
    "REPAIRABLE",
    "SEALED_COLUMNS",
    "Row",
    "Rows",
    "audit_from_row",
    "audit_to_params",
    "check_commit",
    "checkpoint_from_row",
    "checkpoint_to_params",
    "corrupt",
    "corrupt_effect",
    "effect_cas_message",
    "effect_corruption",
    "effect_from_row",
    "effect_problem",
    "effect_to_params",
    "effect_update_params",
    "full_message",
    "lease_message",
    "log_params",
    "log_values",
    "run_from_row",
    "run_to_params",
    "stale_message",
    "task_write_from_row",
    "task_write_to_params",
    "thread_from_row",
]
