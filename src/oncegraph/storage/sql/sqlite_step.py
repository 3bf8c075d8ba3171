"""One step's rows on SQLite, inside the group's open transaction (:mod:`.sqlite_group`).

A step is written without a read: the run's fenced ``UPDATE`` also checks the thread's
version, so its row count is the fence and the CAS at once (``INSERT ... ON CONFLICT DO
NOTHING`` for a new thread); log entries go in with ``executemany``. Every refusal
(``RunNotFoundError``, ``LeaseLostError``, then ``StaleStateError``) comes before the
step has written anything, so a group needs no savepoint per step.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from oncegraph.errors import LeaseLostError, RunNotFoundError, StaleStateError, StorageError
from oncegraph.storage.records import RunStatus, StepCommit
from oncegraph.storage.sql import rows
from oncegraph.storage.sql import statements as S
from oncegraph.storage.sql.store_runs import run_update


@dataclass(frozen=True, slots=True)
class StepWrite:
    """A step commit with its parameters serialized (before any transaction opens)."""

    commit: StepCommit
    cp_params: Sequence[Any]
    log_params: Any
    run_params: Sequence[Any] | None
    effect_params: list[Any]
    intent_params: list[Any]
    run_error: str | None
    ts: float


def check_run(conn: sqlite3.Connection, run_id: str, fence: int | None) -> None:
    """In a write transaction, before any write: the run exists and (``fence``) is still
    held with that token; else ``RunNotFoundError`` / ``LeaseLostError``."""
    rows.check_run(run_id, conn.execute(S.RUN_EXISTS, (run_id,)).fetchone(), fence)


# Each run update, also checking the thread's version (its parameters, then thread_id and
# the expected version): a step's fence and compare-and-swap in one statement.
_IF_THREAD = {
    S.RUN_SET_STATUS: S.RUN_SET_STATUS + S.IF_THREAD_AT,
    S.RUN_TOUCH_FENCED: S.RUN_TOUCH_FENCED + S.IF_THREAD_AT,
    S.RUN_SET_STATUS_FENCED: S.RUN_SET_STATUS_FENCED + S.IF_THREAD_AT,
}


def apply_commit(conn: sqlite3.Connection, work: StepWrite) -> int:
    """One step's rows in the open transaction. Checks first: it refuses
    (``RunNotFoundError``, ``LeaseLostError``, then ``StaleStateError``) before it has
    written anything (the first write is the statement that checks), so a group needs
    no savepoint per step (:mod:`.sqlite_group`); any other failure comes after writes
    and rolls the group back. Returns the number of planned intents inserted."""
    commit = work.commit
    execute = conn.execute
    touches_run = commit.run_status is not None or commit.fence is not None
    if touches_run and work.run_params is None and commit.expected_version > 0:
        _step_on_run(conn, work)
    else:
        _step_on_thread(conn, work, touches_run)
    execute(S.CHECKPOINT_INSERT, work.cp_params)
    if work.log_params:
        conn.executemany(S.LOG_INSERT, work.log_params)
    inserted = 0
    if work.intent_params:  # ON CONFLICT DO NOTHING: rowcount sums the rows inserted
        inserted = conn.executemany(S.EFFECT_INTENT_INSERT, work.intent_params).rowcount
    if work.effect_params:
        conn.executemany(S.EFFECT_UPSERT_RESULT, work.effect_params)
    if commit.clear_task_writes_of is not None:
        execute(S.TASK_WRITES_DELETE, (commit.thread_id, commit.clear_task_writes_of))
    return inserted


def _step_on_run(conn: sqlite3.Connection, work: StepWrite) -> None:
    """A step of a run that exists, on a thread that exists (most steps): the run's
    update checks its fence AND the thread's version, one statement that writes
    nothing unless both hold; then the thread's update, which cannot miss. Zero rows:
    one read names the refusal (no run, a lost fence, else a lost CAS)."""
    commit, cp, ts = work.commit, work.commit.checkpoint, work.ts
    thread = (commit.thread_id, commit.expected_version)
    error = work.run_error
    sql, params = run_update(cp.run_id, commit.run_status, error, commit.fence, ts)
    if conn.execute(_IF_THREAD[sql], (*params, *thread)).rowcount != 1:  # a refusal
        check_run(conn, cp.run_id, commit.fence)
        raise StaleStateError(rows.stale_message(commit))
    new = (commit.expected_version + 1, cp.checkpoint_id, ts)
    if conn.execute(S.THREAD_CAS, (*new, *thread)).rowcount != 1:  # after a write
        raise StorageError(f"thread {commit.thread_id!r} changed under the write lock")


def _step_on_thread(conn: sqlite3.Connection, work: StepWrite, touches_run: bool) -> None:
    """Any other step (a new thread, a new run, a step that leaves its run alone):
    the checks first (the run's, then the thread's CAS, its first write), then the
    run's insert or update."""
    commit, cp, ts = work.commit, work.commit.checkpoint, work.ts
    execute = conn.execute
    if touches_run and work.run_params is None:
        check_run(conn, cp.run_id, commit.fence)
    if commit.expected_version == 0:
        cur = execute(S.THREAD_INSERT, (commit.thread_id, 1, cp.checkpoint_id, ts))
    else:
        cur = execute(
            S.THREAD_CAS,
            (
                commit.expected_version + 1,
                cp.checkpoint_id,
                ts,
                commit.thread_id,
                commit.expected_version,
            ),
        )
    if cur.rowcount != 1:
        raise StaleStateError(rows.stale_message(commit))
    if work.run_params is not None:
        execute(S.RUN_INSERT, work.run_params)
    if touches_run:
        try:
            _update_run_in_tx(
                conn,
                cp.run_id,
                commit.run_status,
                work.run_error,
                commit.fence,
                ts,
            )
        except (RunNotFoundError, LeaseLostError) as exc:  # after writes: not a refusal
            raise StorageError(f"the run changed under the write lock: {exc}") from exc


def _update_run_in_tx(
    conn: sqlite3.Connection,
    run_id: str,
    status: RunStatus | None,
    error: str | None,
    fence: int | None,
    ts: float,
) -> None:
    """Status/fence update inside an open transaction; raises on zero rows."""
    if conn.execute(*run_update(run_id, status, error, fence, ts)).rowcount == 1:
        return
    check_run(conn, run_id, fence)  # no such run, or the token moved on
    assert fence is not None  # an unfenced update of an existing run changes its row
    raise LeaseLostError(rows.lease_message(run_id, fence))


__all__ = ["StepWrite", "apply_commit", "check_run"]
