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

The codec is written by table family (:mod:`.rows_runs`, :mod:`.rows_effects`,
:mod:`.rows_audit`, over :mod:`.rows_codec`; an effect row's checks in
:mod:`.effect_checks`); :class:`Rows` joins them, and this module is the one namespace
the stores read it from.

A row that cannot be decoded raises :class:`~oncegraph.errors.StorageError` naming the
table and key (guarantee 12: corrupt rows get a clear error, never a silent default).
"""

from __future__ import annotations

from oncegraph.errors import ConfigError, LeaseLostError, RunNotFoundError, corrupt
from oncegraph.storage.records import StepCommit
from oncegraph.storage.sql.effect_checks import (
    REPAIRABLE,
    corrupt_effect,
    effect_corruption,
    effect_problem,
)
from oncegraph.storage.sql.rows_audit import AuditRows
from oncegraph.storage.sql.rows_codec import SEALED_COLUMNS, Row, thread_from_row
from oncegraph.storage.sql.rows_effects import EffectRows
from oncegraph.storage.sql.rows_runs import RunRows


class Rows(RunRows, EffectRows, AuditRows):
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

    __slots__ = ()

    # the codec-free helpers, so a store needs one object
    thread_from_row = staticmethod(thread_from_row)


# The codec without encryption (stores use their own Rows).
PLAIN = Rows()


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


def check_run(run_id: str, found: Row | None, fence: int | None) -> None:
    """Raise unless the run exists and (with ``fence``) is still held with that token:
    ``found`` is its ``RUN_EXISTS`` row (its fencing token first), None for no run;
    ``RunNotFoundError`` / ``LeaseLostError`` say that nothing was written."""
    if found is None:
        raise RunNotFoundError(f"run {run_id!r} does not exist; nothing was written")
    if fence is not None and int(found[0]) != fence:
        raise LeaseLostError(lease_message(run_id, fence))


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
    "check_commit",
    "check_run",
    "corrupt",
    "corrupt_effect",
    "effect_cas_message",
    "effect_corruption",
    "effect_problem",
    "full_message",
    "lease_message",
    "stale_message",
    "thread_from_row",
]
