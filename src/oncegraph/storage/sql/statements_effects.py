"""Statements of the effect ledger (``oncegraph_effects``): first writer wins,
compare-and-set updates, fenced writes, listings and payloads.

Written for SQLite and PostgreSQL alike with ``?`` placeholders (the contract: :mod:`.statements`).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from oncegraph.storage.queries import EffectQuery, PayloadQuery
from oncegraph.storage.sql.statements_columns import (
    EFFECT_COLUMNS,
    EFFECT_MUTABLE_COLUMNS,
    NO_LIMIT,
    any_of,
    cols,
    marks,
    where,
)

# -- effects (the ledger) -----------------------------------------------------------

# First writer wins: returns one row (effect_id) when this call inserted, none when
# the effect already existed; then read it with EFFECT_SELECT in the same transaction.
# ON CONFLICT without a target: it covers every unique index the table has (effect_id;
# before schema migration 7 also (effect_type, effect_id), which a racing insert could
# hit first), so one statement serves a database at either version.
EFFECT_INSERT = (
    f"INSERT INTO oncegraph_effects ({cols(EFFECT_COLUMNS)}) VALUES ({marks(EFFECT_COLUMNS)}) "
    "ON CONFLICT DO NOTHING RETURNING effect_id"
)

# A planned intent written with the checkpoint that decided it (StepCommit.intents): the
# first writer wins and an existing record is never touched. Params:
# rows.effect_to_params(record).
EFFECT_INTENT_INSERT = (
    f"INSERT INTO oncegraph_effects ({cols(EFFECT_COLUMNS)}) VALUES ({marks(EFFECT_COLUMNS)}) "
    "ON CONFLICT DO NOTHING"
)

# The same, only while the run is held with the writer's token. Params:
# rows.effect_to_params(record), run_id, fencing_token.
EFFECT_INSERT_FENCED = (
    f"INSERT INTO oncegraph_effects ({cols(EFFECT_COLUMNS)}) SELECT {marks(EFFECT_COLUMNS)} "
    "WHERE EXISTS (SELECT 1 FROM oncegraph_runs WHERE run_id = ? AND fencing_token = ?) "
    "ON CONFLICT DO NOTHING RETURNING effect_id"
)

# Compare-and-set of an effect row: only from the row version the writer read, and (if
# fenced) only while the run is held with its token. Params:
# rows.effect_update_params(record) (mutable columns with the NEW row_version, effect_id),
# expected row_version. rowcount 0 => stale or missing.
EFFECT_UPDATE_CAS = (
    "UPDATE oncegraph_effects SET "
    + ", ".join(f"{c} = ?" for c in EFFECT_MUTABLE_COLUMNS)
    + " WHERE effect_id = ? AND row_version = ?"
)
# The same, fenced. Params: as EFFECT_UPDATE_CAS, then run_id, fencing_token.
EFFECT_UPDATE_CAS_FENCED = (
    EFFECT_UPDATE_CAS
    + " AND EXISTS (SELECT 1 FROM oncegraph_runs WHERE run_id = ? AND fencing_token = ?)"
)

# Save a result (save_effect and effects folded into a StepCommit): inserts the whole
# record if it was never begun (a result is never dropped), else updates only the
# mutable columns. Params: rows.effect_to_params(record).
EFFECT_UPSERT_RESULT = (
    f"INSERT INTO oncegraph_effects ({cols(EFFECT_COLUMNS)}) VALUES ({marks(EFFECT_COLUMNS)}) "
    "ON CONFLICT (effect_id) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in EFFECT_MUTABLE_COLUMNS)
)

# The first write of an effect that was never begun (row_version 0 -> 1): inserts it, or
# updates a row no one has written since it was created by an older oncegraph.
# Params: rows.effect_to_params(record).
EFFECT_UPSERT_FIRST = EFFECT_UPSERT_RESULT + " WHERE oncegraph_effects.row_version = 0"
# The same, fenced. Params: rows.effect_to_params(record), run_id, fencing_token.
EFFECT_UPSERT_FIRST_FENCED = (
    f"INSERT INTO oncegraph_effects ({cols(EFFECT_COLUMNS)}) SELECT {marks(EFFECT_COLUMNS)} "
    "WHERE EXISTS (SELECT 1 FROM oncegraph_runs WHERE run_id = ? AND fencing_token = ?) "
    "ON CONFLICT (effect_id) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in EFFECT_MUTABLE_COLUMNS)
    + " WHERE oncegraph_effects.row_version = 0"
)

# Params: rows.effect_update_params(record) = mutable columns..., effect_id.
EFFECT_UPDATE = (
    "UPDATE oncegraph_effects SET "
    + ", ".join(f"{c} = ?" for c in EFFECT_MUTABLE_COLUMNS)
    + " WHERE effect_id = ?"
)

EFFECT_SELECT = f"SELECT {cols(EFFECT_COLUMNS)} FROM oncegraph_effects WHERE effect_id = ?"


def effect_query(q: EffectQuery) -> tuple[str, list[Any]] | None:
    """The statement of the effects ``q`` lists and its parameters, or None when it lists
    none (``statuses`` given and empty)."""
    wanted = [str(s) for s in q.statuses] if q.statuses is not None else []
    if q.statuses is not None and not wanted:
        return None
    filters = (q.run_id, q.thread_id, *wanted, q.app_id, q.tenant)
    params: list[Any] = [p for p in filters if p is not None]
    params += [NO_LIMIT if q.limit is None else max(q.limit, 0), max(q.offset, 0)]
    by_run, by_thread = q.run_id is not None, q.thread_id is not None
    by_app, by_tenant = q.app_id is not None, q.tenant is not None
    return _effect_list(by_run, by_thread, len(wanted), by_app, by_tenant), params


@lru_cache(maxsize=64)
def _effect_list(by_run: bool, by_thread: bool, n: int, by_app: bool, by_tenant: bool) -> str:
    """``SELECT`` of effects in creation order (``created_at``, then ``effect_id``).

    Params: ``run_id`` if ``by_run``, ``thread_id`` if ``by_thread``, then ``n`` statuses,
    then the run's ``app_id`` if ``by_app`` and its ``tenant`` if ``by_tenant``, then limit
    (``NO_LIMIT`` for all) and offset.
    """
    owner = where(
        ("r.run_id = oncegraph_effects.run_id", True),
        ("COALESCE(r.app_id, r.workflow_name) = ?", by_app),
        ("r.tenant = ?", by_tenant),
    )
    clause = where(
        ("run_id = ?", by_run),
        ("thread_id = ?", by_thread),
        (any_of("status", n), n),
        (f"EXISTS (SELECT 1 FROM oncegraph_runs r{owner})", by_app or by_tenant),
    )
    return (
        f"SELECT {cols(EFFECT_COLUMNS)} FROM oncegraph_effects{clause} "
        "ORDER BY created_at, effect_id LIMIT ? OFFSET ?"
    )


def payload_query(q: PayloadQuery) -> tuple[str, list[Any]] | None:
    """The statement of the effect payloads ``q`` lists and its parameters, or None when
    it lists none (``thread_ids`` given and empty)."""
    if q.thread_ids is not None and not q.thread_ids:
        return None
    params: list[Any] = [p for p in (q.run_id, q.thread_id) if p is not None]
    params += q.thread_ids or ()
    by_run, by_thread = q.run_id is not None, q.thread_id is not None
    return _effect_payloads(by_run, by_thread, q.results, len(q.thread_ids or ())), params


@lru_cache(maxsize=32)
def _effect_payloads(by_run: bool, by_thread: bool, results: bool, n_threads: int) -> str:
    """``SELECT effect_id, effect_type, request, result`` of effects in creation order
    (``result`` NULL unless ``results``): what masking learns secrets from, without
    decoding the rest of each record. Params: ``run_id`` if ``by_run``, ``thread_id`` if
    ``by_thread``, then ``n_threads`` thread ids (the effects of any of them)."""
    clause = where(
        ("run_id = ?", by_run),
        ("thread_id = ?", by_thread),
        (any_of("thread_id", n_threads), n_threads),
    )
    result = "result" if results else "NULL"
    return (
        f"SELECT effect_id, effect_type, request, {result} FROM oncegraph_effects{clause} "
        "ORDER BY created_at, effect_id"
    )
