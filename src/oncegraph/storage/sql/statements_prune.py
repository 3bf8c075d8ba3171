"""Statements of retention (prune).

Written with ``?`` placeholders, accepted by SQLite and PostgreSQL alike; the
contract they keep is stated in :mod:`oncegraph.storage.sql.statements`.
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
