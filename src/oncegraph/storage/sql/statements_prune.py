"""Statements of retention (prune).

Written for SQLite and PostgreSQL alike with ``?`` placeholders (the contract: :mod:`.statements`).
"""

from __future__ import annotations

from functools import lru_cache

# -- retention (prune) --------------------------------------------------------------
#
# A prune runs one transaction per thread and never writes oncegraph_threads (the CAS
# token): it only reads the thread's version and head. Checkpoint versions of a thread
# are 1..version with the head at ``version``, so "the newest N" are those with
# ``version > thread.version - N``; the head is also excluded by id, for robustness.

# Threads in id order, a page at a time. Params: limit / after, limit.
THREAD_IDS_FIRST = "SELECT thread_id FROM oncegraph_threads ORDER BY thread_id LIMIT ?"
THREAD_IDS_AFTER = (
    "SELECT thread_id FROM oncegraph_threads WHERE thread_id > ? ORDER BY thread_id LIMIT ?"
)


@lru_cache(maxsize=8)
def checkpoint_prune(n_keep_statuses: int) -> str:
    """``DELETE`` of a thread's prunable checkpoints, ``RETURNING checkpoint_id``.

    Deletes checkpoints older than the newest ``keep`` that are not the head and whose
    run is not in one of the kept (unfinished) statuses. A missing thread row deletes
    nothing (the version comparison is NULL). Params: thread_id, thread_id, keep,
    thread_id, then ``n_keep_statuses`` run statuses.
    """
    marks = ", ".join("?" for _ in range(n_keep_statuses))
    return (
        "DELETE FROM oncegraph_checkpoints WHERE thread_id = ? "
        "AND version <= (SELECT version FROM oncegraph_threads WHERE thread_id = ?) - ? "
        "AND checkpoint_id NOT IN (SELECT head_checkpoint_id FROM oncegraph_threads "
        "WHERE thread_id = ? AND head_checkpoint_id IS NOT NULL) "
        "AND NOT EXISTS (SELECT 1 FROM oncegraph_runs r "
        f"WHERE r.run_id = oncegraph_checkpoints.run_id AND r.status IN ({marks})) "
        "RETURNING checkpoint_id"
    )


# The fold of a run's call that ended under durability="exit": its checkpoints on the
# thread after the version the call started from, but the head. Params: thread_id,
# run_id, after_version, thread_id.
CHECKPOINT_FOLD = (
    "DELETE FROM oncegraph_checkpoints WHERE thread_id = ? AND run_id = ? AND version > ? "
    "AND checkpoint_id NOT IN (SELECT head_checkpoint_id FROM oncegraph_threads "
    "WHERE thread_id = ? AND head_checkpoint_id IS NOT NULL) "
    "RETURNING checkpoint_id"
)


@lru_cache(maxsize=8)
def effect_prune(n_effect_statuses: int, n_run_statuses: int) -> str:
    """``DELETE`` of a thread's finished effect records last updated before a cutoff,
    whose run exists and has one of the given (finished) statuses.

    Params: thread_id, cutoff (``updated_at <`` it), ``n_effect_statuses`` effect
    statuses, then ``n_run_statuses`` run statuses.
    """
    effect_marks = ", ".join("?" for _ in range(n_effect_statuses))
    run_marks = ", ".join("?" for _ in range(n_run_statuses))
    return (
        "DELETE FROM oncegraph_effects WHERE thread_id = ? AND updated_at < ? "
        f"AND status IN ({effect_marks}) "
        "AND EXISTS (SELECT 1 FROM oncegraph_runs r "
        f"WHERE r.run_id = oncegraph_effects.run_id AND r.status IN ({run_marks}))"
    )


# -- deleting a thread (LangGraph's delete_thread) --------------------------------------
#
# What LangGraph's saver holds of a thread goes: its row, checkpoints, channel logs and
# task writes, and those of its subgraphs' threads (the threads holding checkpoints of its
# runs). Runs, effect records and the audit log stay. Params: thread_id.

THREAD_DELETE = "DELETE FROM oncegraph_threads WHERE thread_id = ?"
CHECKPOINTS_DELETE_THREAD = "DELETE FROM oncegraph_checkpoints WHERE thread_id = ?"
LOG_DELETE_THREAD = "DELETE FROM oncegraph_log WHERE thread_id = ?"
TASK_WRITES_DELETE_THREAD = "DELETE FROM oncegraph_task_writes WHERE thread_id = ?"

# The other threads holding checkpoints of the thread's runs (its subgraphs'). Params:
# thread_id, thread_id.
THREAD_CHILDREN = (
    "SELECT DISTINCT c.thread_id FROM oncegraph_checkpoints c "
    "JOIN oncegraph_runs r ON r.run_id = c.run_id "
    "WHERE r.thread_id = ? AND c.thread_id <> ?"
)


@lru_cache(maxsize=8)
def thread_unfinished(n_statuses: int) -> str:
    """``SELECT run_id, status`` of one run of a thread in one of the given (unfinished)
    statuses. Params: thread_id, then ``n_statuses`` run statuses."""
    marks = ", ".join("?" for _ in range(n_statuses))
    return (
        "SELECT run_id, status FROM oncegraph_runs "
        f"WHERE thread_id = ? AND status IN ({marks}) ORDER BY run_id LIMIT 1"
    )
