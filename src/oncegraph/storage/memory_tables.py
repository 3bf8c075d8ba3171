"""The in-memory store's tables (:mod:`oncegraph.storage.memory`): the rows the SQL
stores would keep, the positions of their columns, and the state every part of the
store shares under its one lock."""

from __future__ import annotations

import secrets
import threading
from typing import Any

from oncegraph.storage import auditchain as chain
from oncegraph.storage.encryption import EncryptionKeys
from oncegraph.storage.records import (
    PRUNABLE_EFFECT_RUN_STATUSES,
    PRUNABLE_EFFECT_STATUSES,
    UNFINISHED_STATUSES,
)
from oncegraph.storage.sql import rows
from oncegraph.storage.sql import statements as S

RUN_STATUS = S.RUN_COLUMNS.index("status")
RUN_ERROR = S.RUN_COLUMNS.index("error")
RUN_FENCE = S.RUN_COLUMNS.index("fencing_token")
RUN_OWNER = S.RUN_COLUMNS.index("lease_owner")
RUN_EXPIRES = S.RUN_COLUMNS.index("lease_expires_at")
RUN_UPDATED = S.RUN_COLUMNS.index("updated_at")
RUN_CREATED = S.RUN_COLUMNS.index("created_at")
RUN_THREAD = S.RUN_COLUMNS.index("thread_id")
RUN_APP = S.RUN_COLUMNS.index("app_id")
RUN_WORKFLOW = S.RUN_COLUMNS.index("workflow_name")
RUN_PARENT = S.RUN_COLUMNS.index("parent_run_id")
RUN_TENANT = S.RUN_COLUMNS.index("tenant")
CP_RUN = S.CHECKPOINT_COLUMNS.index("run_id")
CP_VERSION = S.CHECKPOINT_COLUMNS.index("version")
EFFECT_MUTABLE = tuple(S.EFFECT_COLUMNS.index(c) for c in S.EFFECT_MUTABLE_COLUMNS)
EFFECT_RUN = S.EFFECT_COLUMNS.index("run_id")
EFFECT_THREAD = S.EFFECT_COLUMNS.index("thread_id")
EFFECT_TYPE = S.EFFECT_COLUMNS.index("effect_type")
EFFECT_REQUEST = S.EFFECT_COLUMNS.index("request")
EFFECT_RESULT = S.EFFECT_COLUMNS.index("result")
EFFECT_STATUS = S.EFFECT_COLUMNS.index("status")
EFFECT_CREATED = S.EFFECT_COLUMNS.index("created_at")
EFFECT_UPDATED = S.EFFECT_COLUMNS.index("updated_at")
EFFECT_VERSION = S.EFFECT_COLUMNS.index("row_version")
KEEP_RUN_STATUSES = frozenset(str(s) for s in UNFINISHED_STATUSES)
PRUNE_EFFECT_STATUSES = frozenset(str(s) for s in PRUNABLE_EFFECT_STATUSES)
PRUNE_EFFECT_RUN_STATUSES = frozenset(str(s) for s in PRUNABLE_EFFECT_RUN_STATUSES)

Row = tuple[Any, ...]


def with_changes(row: Row, changes: dict[int, Any]) -> Row:
    return tuple(changes.get(i, v) for i, v in enumerate(row))


def run_order(row: Row) -> tuple[Any, ...]:
    """(created_at, run_id): runs are listed newest first in this order, reversed."""
    return (row[RUN_CREATED], row[0])


def audit_before(row: Row, before: float | tuple[float, str]) -> bool:
    """Is the audit ``row`` listed after ``before`` (an ``at``, or ``(at, audit_id)``)?"""
    return (row[1], row[0]) < before if isinstance(before, tuple) else row[1] < before


def owned(row: Row, app_id: str | None, tenant: str | None) -> bool:
    """Does the run ``row`` belong to ``app_id`` and ``tenant`` (None: any)?"""
    app = row[RUN_APP] if row[RUN_APP] is not None else row[RUN_WORKFLOW]
    return (app_id is None or app == app_id) and (tenant is None or row[RUN_TENANT] == tenant)


def fence_of(run: Row | None) -> tuple[int] | None:
    """A run row as the ``RUN_EXISTS`` statement reads it (its fencing token)."""
    return None if run is None else (run[RUN_FENCE],)


class Tables:
    """The store's rows and its lock (every method of a part of the store that reads
    or writes them holds the lock)."""

    def __init__(self, *, encryption: EncryptionKeys | None = None) -> None:
        self.rows = rows.Rows(encryption)  # the row codec (encryption here is for tests)
        self._lock = threading.Lock()
        self._threads: dict[str, Row] = {}
        self._runs: dict[str, Row] = {}
        # run ids by thread, in insertion order (a run's thread never changes, and runs are
        # never deleted): listing a thread's runs reads its runs, not every run
        self._thread_runs: dict[str, list[str]] = {}
        # each thread's latest run: the one this store placed last in the thread (its
        # insertion order, never a submitter's clock), what starting a run reads
        self._latest_run: dict[str, str] = {}
        self._checkpoints: dict[tuple[str, str], Row] = {}
        self._logs: dict[tuple[str, str], dict[int, str]] = {}
        self._task_writes: dict[tuple[str, str], dict[tuple[str, str, int], Row]] = {}
        self._effects: dict[str, Row] = {}
        self._held: set[str] = set()
        self._audit: dict[str, Row] = {}
        self._requests: dict[tuple[str, str], Row] = {}  # idempotency keys by (scope, key)
        # The key of the ledger's request hashes: random per store (the store lives in one
        # process, so every writer of it shares the key).
        self._hash_key = secrets.token_bytes(32)
        # The audit chain (oncegraph.storage.auditchain): (number, MAC, audit id) in order.
        self._audit_chain: list[tuple[int, str, str]] = []
        self._chain_db_key = secrets.token_bytes(32)
        self._chain_key = chain.chain_key(self._chain_db_key, self.rows.encryption)
