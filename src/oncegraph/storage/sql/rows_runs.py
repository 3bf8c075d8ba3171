"""Records <-> rows of the run tables: runs (and the thread openings read with them),
checkpoints, the append-only logs and task writes (see :mod:`.rows` for the contract)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from oncegraph._json import dumps_state_str, dumps_str, loads
from oncegraph.errors import InvalidUpdateError, corrupt
from oncegraph.storage.encryption import BOUND
from oncegraph.storage.encryption import PREFIX as SEALED
from oncegraph.storage.records import (
    CheckpointRecord,
    LogEntry,
    RunRecord,
    RunStatus,
    TaskWrite,
    ThreadRecord,
    WriteKind,
    error_text,
)
from oncegraph.storage.sql.rows_codec import (
    CHECKPOINTS,
    LOG,
    RUNS,
    TASK_WRITES,
    Codec,
    Layout,
    Row,
    decode,
    thread_from_row,
)
from oncegraph.storage.sql.statements import RUN_COLUMNS, TASK_WRITE_COLUMNS, THREAD_COLUMNS

_RUN = Layout(
    RunRecord,
    RUN_COLUMNS,
    written=("status", "input", "config", "error"),
    read=("status", "state_schema_version", "input", "config", "error", "fencing_token"),
)
_TASK_WRITE = Layout(
    TaskWrite, TASK_WRITE_COLUMNS, written=("value",), read=("kind", "idx", "value")
)


class RunRows(Codec):
    """Runs, thread openings, checkpoints, logs and task writes."""

    __slots__ = ()

    # -- runs -------------------------------------------------------------------------

    def error_param(self, run_id: str, error: str | None) -> str | None:
        """A run's error as stored: :func:`~oncegraph.storage.records.error_text`, sealed
        when encrypting (an error message may quote a payload)."""
        text = error_text(error)
        return None if text is None else self._seal(text, self._at(RUNS, "error", run_id))

    def run_to_params(self, run: RunRecord) -> tuple[Any, ...]:
        key = run.run_id
        return _RUN.params(
            run,
            str(run.status),
            None
            if run.input is None
            else self._seal(dumps_state_str(run.input), self._at(RUNS, "input", key)),
            dumps_str(run.config),
            self.error_param(key, run.error),
        )

    def _run(self, row: Row) -> RunRecord:
        key = row[0]
        return _RUN.record(
            row,
            RunStatus(row[2]),
            int(row[5]),
            self._opt_loads(row[11], self._at(RUNS, "input", key)),
            loads(row[12]),
            self._open_text(row[13], self._at(RUNS, "error", key)),
            int(row[16]),
        )

    def run_from_row(self, row: Row) -> RunRecord:
        return decode("oncegraph_runs", row, self._run)

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
                self._at(CHECKPOINTS, "channel_values", cp.thread_id, cp.checkpoint_id),
            ),
            dumps_str(cp.logs),
            dumps_str(list(cp.next)),
            self._json(
                cp.metadata, self._at(CHECKPOINTS, "metadata", cp.thread_id, cp.checkpoint_id)
            ),
            cp.created_at,
        )

    def _checkpoint(self, row: Row) -> CheckpointRecord:
        values = self._loads(row[6], self._at(CHECKPOINTS, "channel_values", row[1], row[0]))
        logs, nxt = loads(row[7]), loads(row[8])
        metadata = self._loads(row[9], self._at(CHECKPOINTS, "metadata", row[1], row[0]))
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
        return decode("oncegraph_checkpoints", row, self._checkpoint)

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
                    self._at(LOG, "value", thread_id, e.channel, e.seq),
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
                out.append(self._loads(value, self._at(LOG, "value", thread_id, channel, seq)))
            except ValueError as exc:
                raise corrupt(
                    "oncegraph_log", f"{channel}#{seq}", str(exc), thread_id=thread_id
                ) from exc
        return out

    # -- task writes ------------------------------------------------------------------

    def task_write_to_params(self, write: TaskWrite) -> tuple[Any, ...]:
        key = (write.thread_id, write.checkpoint_id, write.task, write.kind, write.idx)
        return _TASK_WRITE.params(
            write, self._seal(_task_write_json(write), self._at(TASK_WRITES, "value", *key))
        )

    def _task_write(self, row: Row) -> TaskWrite:
        kind, idx = WriteKind(row[3]), int(row[4])
        where = self._at(TASK_WRITES, "value", row[0], row[1], row[2], row[3], idx)
        return _TASK_WRITE.record(row, kind, idx, self._loads(row[5], where))

    def task_write_from_row(self, row: Row) -> TaskWrite:
        return decode("oncegraph_task_writes", row, self._task_write)


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


__all__ = [
    "RunRows",
]
