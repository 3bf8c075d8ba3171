"""An in-process :class:`~oncegraph.storage.protocols.Checkpointer` (tests, notebooks).

Same semantics as the SQL stores, by construction: it keeps exactly the rows the SQL
stores would keep (built by :mod:`oncegraph.storage.sql.rows`, JSON columns as text)
and decodes them again on every read. So values are JSON-normalized and copied on the
way in and out (a caller mutating a dict it passed or got back never changes the
store), an unserializable value fails the same way, and orderings match the SQL
``ORDER BY`` clauses of :mod:`oncegraph.storage.sql.statements`.

Atomicity: :meth:`commit` checks everything (CAS, fence, duplicate keys, JSON) and
builds every row before it changes anything, all under one lock, so a failed commit
writes nothing. The lock is a :class:`threading.Lock` (never held across an await), so
the store is usable from several event loops and threads. Nothing is durable.

Run liveness locks (:meth:`lock_run`) live in the store object: the store exists in one
process only, so they die with it.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from oncegraph.errors import (
    LeaseLostError,
    RunNotFoundError,
    StaleStateError,
    StorageError,
)
from oncegraph.storage import auditchain as chain
from oncegraph.storage.encryption import EncryptionKeys
from oncegraph.storage.lifecycle import Closing
from oncegraph.storage.records import (
    PRUNABLE_EFFECT_RUN_STATUSES,
    PRUNABLE_EFFECT_STATUSES,
    UNFINISHED_STATUSES,
    AuditRecord,
    CheckpointRecord,
    EffectPayload,
    EffectRecord,
    EffectStatus,
    PruneReport,
    RunRecord,
    RunStatus,
    StepCommit,
    TaskWrite,
    ThreadRecord,
    now,
    prune_effects_cutoff,
)
from oncegraph.storage.requests import IdempotencyRecord
from oncegraph.storage.sql import rows
from oncegraph.storage.sql import statements as S
from oncegraph.storage.sql.request_keys import REQUEST_COLUMNS

_RUN_STATUS = S.RUN_COLUMNS.index("status")
_RUN_ERROR = S.RUN_COLUMNS.index("error")
_RUN_FENCE = S.RUN_COLUMNS.index("fencing_token")
_RUN_OWNER = S.RUN_COLUMNS.index("lease_owner")
_RUN_EXPIRES = S.RUN_COLUMNS.index("lease_expires_at")
_RUN_UPDATED = S.RUN_COLUMNS.index("updated_at")
_RUN_CREATED = S.RUN_COLUMNS.index("created_at")
_RUN_THREAD = S.RUN_COLUMNS.index("thread_id")
_RUN_APP = S.RUN_COLUMNS.index("app_id")
_RUN_WORKFLOW = S.RUN_COLUMNS.index("workflow_name")
_RUN_PARENT = S.RUN_COLUMNS.index("parent_run_id")
_RUN_TENANT = S.RUN_COLUMNS.index("tenant")
_CP_RUN = S.CHECKPOINT_COLUMNS.index("run_id")
_CP_VERSION = S.CHECKPOINT_COLUMNS.index("version")
_EFFECT_MUTABLE = tuple(S.EFFECT_COLUMNS.index(c) for c in S.EFFECT_MUTABLE_COLUMNS)
_EFFECT_RUN = S.EFFECT_COLUMNS.index("run_id")
_EFFECT_THREAD = S.EFFECT_COLUMNS.index("thread_id")
_EFFECT_TYPE = S.EFFECT_COLUMNS.index("effect_type")
_EFFECT_REQUEST = S.EFFECT_COLUMNS.index("request")
_EFFECT_RESULT = S.EFFECT_COLUMNS.index("result")
_EFFECT_STATUS = S.EFFECT_COLUMNS.index("status")
_EFFECT_CREATED = S.EFFECT_COLUMNS.index("created_at")
_EFFECT_UPDATED = S.EFFECT_COLUMNS.index("updated_at")
_EFFECT_VERSION = S.EFFECT_COLUMNS.index("row_version")
_KEEP_RUN_STATUSES = frozenset(str(s) for s in UNFINISHED_STATUSES)
_PRUNE_EFFECT_STATUSES = frozenset(str(s) for s in PRUNABLE_EFFECT_STATUSES)
_PRUNE_EFFECT_RUN_STATUSES = frozenset(str(s) for s in PRUNABLE_EFFECT_RUN_STATUSES)

Row = tuple[Any, ...]


def _with(row: Row, changes: dict[int, Any]) -> Row:
    return tuple(changes.get(i, v) for i, v in enumerate(row))


def _run_order(row: Row) -> tuple[Any, ...]:
    """(created_at, run_id): runs are listed newest first in this order, reversed."""
    return (row[_RUN_CREATED], row[0])


def _audit_before(row: Row, before: float | tuple[float, str]) -> bool:
    """Is the audit ``row`` listed after ``before`` (an ``at``, or ``(at, audit_id)``)?"""
    return (row[1], row[0]) < before if isinstance(before, tuple) else row[1] < before


def _owned(row: Row, app_id: str | None, tenant: str | None) -> bool:
    """Does the run ``row`` belong to ``app_id`` and ``tenant`` (None: any)?"""
    app = row[_RUN_APP] if row[_RUN_APP] is not None else row[_RUN_WORKFLOW]
    return (app_id is None or app == app_id) and (tenant is None or row[_RUN_TENANT] == tenant)


class InMemoryCheckpointer(Closing):
    """Threads, runs, checkpoints, logs, task writes and the effect ledger in memory."""

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

    async def request_hash_key(self) -> bytes:
        """The key of the ledger's request hashes (:mod:`oncegraph.ledger.keys`)."""
        return self._hash_key

    def __repr__(self) -> str:
        return f"InMemoryCheckpointer(threads={len(self._threads)}, runs={len(self._runs)})"

    async def setup(self) -> None:
        """Nothing to create; idempotent."""

    async def aclose(self) -> None:
        """Nothing to release; the data stays (the store may be set up again)."""

    # -- checkpoints ------------------------------------------------------------------

    async def commit(self, commit: StepCommit) -> int:
        rows.check_commit(commit)
        cp = commit.checkpoint
        # Build every row first: a JSON error must leave the store untouched.
        cp_row = self.rows.checkpoint_to_params(cp)
        log_rows = self.rows.log_params(commit.thread_id, commit.log)
        run_row = self.rows.run_to_params(commit.new_run) if commit.new_run else None
        effect_rows = [self.rows.effect_to_params(e) for e in commit.effects]
        intent_rows = [self.rows.effect_to_params(e) for e in commit.intents]
        ts = now()
        with self._lock:
            thread = self._threads.get(commit.thread_id)
            current = 0 if thread is None else int(thread[1])
            if current != commit.expected_version:
                raise StaleStateError(rows.stale_message(commit))
            if run_row is not None and run_row[0] in self._runs:
                raise StorageError(f"run {run_row[0]!r} already exists; nothing was written")
            run_id = cp.run_id
            if run_row is not None and run_row[0] == run_id:
                existing_run: Row | None = run_row
            else:
                existing_run = self._runs.get(run_id)
            if commit.fence is not None or commit.run_status is not None:
                rows.check_run(run_id, _fence_of(existing_run), commit.fence)
            if (commit.thread_id, cp.checkpoint_id) in self._checkpoints:
                raise StorageError(
                    f"checkpoint {cp.checkpoint_id!r} already exists; nothing was written"
                )
            seen: set[tuple[str, int]] = set()
            for _, channel, seq, _value in log_rows:
                if (channel, seq) in seen or seq in self._logs.get((commit.thread_id, channel), {}):
                    raise StorageError(
                        f"log entry {channel!r}#{seq} of thread {commit.thread_id!r} already "
                        "exists (log entries are never rewritten); nothing was written"
                    )
                seen.add((channel, seq))
            # -- apply (nothing below can fail) --
            self._threads[commit.thread_id] = (
                commit.thread_id,
                commit.expected_version + 1,
                cp.checkpoint_id,
                ts,
            )
            if run_row is not None:
                self._add_run(run_row)
            if commit.run_status is not None:
                row = self._runs[run_id]
                self._runs[run_id] = _with(
                    row,
                    {
                        _RUN_STATUS: str(commit.run_status),
                        _RUN_ERROR: self.rows.error_param(run_id, commit.run_error),
                        _RUN_UPDATED: ts,
                    },
                )
            elif commit.fence is not None:
                self._runs[run_id] = _with(self._runs[run_id], {_RUN_UPDATED: ts})
            self._checkpoints[(commit.thread_id, cp.checkpoint_id)] = cp_row
            for thread_id, channel, seq, value in log_rows:
                self._logs.setdefault((thread_id, channel), {})[seq] = value
            inserted = 0
            for intent_row in intent_rows:
                if intent_row[0] not in self._effects:
                    self._effects[intent_row[0]] = intent_row
                    inserted += 1
            for effect_row in effect_rows:
                self._upsert_effect(effect_row)
            if commit.clear_task_writes_of is not None:
                self._task_writes.pop((commit.thread_id, commit.clear_task_writes_of), None)
        return inserted

    async def get_thread(self, thread_id: str) -> ThreadRecord | None:
        with self._lock:
            row = self._threads.get(thread_id)
        return None if row is None else rows.thread_from_row(row)

    async def open_thread(self, thread_id: str) -> tuple[ThreadRecord | None, RunRecord | None]:
        with self._lock:
            latest = self._latest_run.get(thread_id)
            row = None if latest is None else self._runs[latest]
        run = None if row is None else self.rows.run_from_row(row)
        return await self.get_thread(thread_id), run

    async def open_run(self, run_id: str) -> tuple[RunRecord | None, ThreadRecord | None]:
        run = await self.get_run(run_id)
        return (None, None) if run is None else (run, await self.get_thread(run.thread_id))

    async def get_checkpoint(
        self, thread_id: str, checkpoint_id: str | None = None
    ) -> CheckpointRecord | None:
        with self._lock:
            if checkpoint_id is None:
                thread = self._threads.get(thread_id)
                if thread is None or thread[2] is None:
                    return None
                checkpoint_id = thread[2]
            row = self._checkpoints.get((thread_id, checkpoint_id))
        return None if row is None else self.rows.checkpoint_from_row(row)

    async def list_checkpoints(
        self,
        thread_id: str,
        *,
        run_id: str | None = None,
        limit: int | None = None,
        before_version: int | None = None,
    ) -> list[CheckpointRecord]:
        with self._lock:
            found = [
                row
                for (tid, _), row in self._checkpoints.items()
                if tid == thread_id
                and (run_id is None or row[_CP_RUN] == run_id)
                and (before_version is None or row[_CP_VERSION] < before_version)
            ]
        found.sort(key=lambda r: r[_CP_VERSION], reverse=True)
        if limit is not None:
            found = found[: max(limit, 0)]
        return [self.rows.checkpoint_from_row(r) for r in found]

    async def read_log(self, thread_id: str, channel: str, end: int) -> list[Any]:
        with self._lock:
            entries = dict(self._logs.get((thread_id, channel), {}))
        found = [(seq, entries[seq]) for seq in sorted(entries) if seq < end]
        return self.rows.log_values(thread_id, channel, found)

    async def put_task_write(
        self, write: TaskWrite, *, run_id: str | None = None, fence: int | None = None
    ) -> None:
        row = self.rows.task_write_to_params(write)
        with self._lock:
            if fence is not None:
                self._check_fence(run_id or "", fence)
            writes = self._task_writes.setdefault((write.thread_id, write.checkpoint_id), {})
            writes[(write.task, write.kind, write.idx)] = row

    async def get_task_writes(self, thread_id: str, checkpoint_id: str) -> list[TaskWrite]:
        with self._lock:
            writes = dict(self._task_writes.get((thread_id, checkpoint_id), {}))
        return [self.rows.task_write_from_row(writes[k]) for k in sorted(writes)]

    # -- runs -------------------------------------------------------------------------

    async def create_run(self, run: RunRecord) -> None:
        row = self.rows.run_to_params(run)
        with self._lock:
            if run.run_id in self._runs:
                raise StorageError(f"run {run.run_id!r} already exists; nothing was written")
            self._add_run(row)

    def _add_run(self, row: Row) -> None:  # with self._lock held; a new run id
        thread_id = row[_RUN_THREAD]
        self._runs[row[0]] = row
        self._thread_runs.setdefault(thread_id, []).append(row[0])
        self._latest_run[thread_id] = row[0]  # a thread's runs in the order they came

    async def get_run(self, run_id: str) -> RunRecord | None:
        with self._lock:
            row = self._runs.get(run_id)
        return None if row is None else self.rows.run_from_row(row)

    async def update_run(
        self,
        run_id: str,
        *,
        status: RunStatus,
        error: str | None = None,
        fence: int | None = None,
    ) -> None:
        with self._lock:
            row = self._runs.get(run_id)
            if row is None:
                raise RunNotFoundError(f"run {run_id!r} does not exist")
            if fence is not None and row[_RUN_FENCE] != fence:
                raise LeaseLostError(rows.lease_message(run_id, fence))
            self._runs[run_id] = _with(
                row,
                {
                    _RUN_STATUS: str(status),
                    _RUN_ERROR: self.rows.error_param(run_id, error),
                    _RUN_UPDATED: now(),
                },
            )

    def _check_fence(self, run_id: str, fence: int) -> None:
        """Raise unless ``run_id`` holds ``fence``; call under the lock."""
        rows.check_run(run_id, _fence_of(self._runs.get(run_id)), fence)

    async def lock_run(self, run_id: str) -> _MemoryRunLock | None:
        with self._lock:
            if run_id in self._held:
                return None
            self._held.add(run_id)
        return _MemoryRunLock(self, run_id)

    def _unlock(self, run_id: str) -> None:
        with self._lock:
            self._held.discard(run_id)

    async def fence_run(
        self,
        run_id: str,
        *,
        expected_token: int,
        owner: str | None,
        status: RunStatus | None = None,
        error: str | None = None,
        audit: AuditRecord | None = None,
    ) -> RunRecord | None:
        audit_row = self.rows.audit_to_params(audit) if audit is not None else None
        with self._lock:
            self._refuse_known_audit(audit_row)
            row = self._runs.get(run_id)
            if row is None:
                raise RunNotFoundError(f"run {run_id!r} does not exist")
            if row[_RUN_FENCE] != expected_token:
                return None
            changes: dict[int, Any] = {
                _RUN_FENCE: expected_token + 1,
                _RUN_OWNER: owner,
                _RUN_EXPIRES: None,
                _RUN_UPDATED: now(),
            }
            if status is not None:
                changes[_RUN_STATUS] = str(status)
                changes[_RUN_ERROR] = self.rows.error_param(run_id, error)
            row = self._runs[run_id] = _with(row, changes)
            if audit is not None and audit_row is not None:
                self._link_audit(audit, audit_row)
        return self.rows.run_from_row(row)

    async def list_runs(
        self,
        *,
        thread_id: str | None = None,
        statuses: Sequence[RunStatus] | None = None,
        limit: int = 100,
        app_id: str | None = None,
        tenant: str | None = None,
        parent_run_id: str | None = None,
        before: tuple[float, str] | None = None,
    ) -> list[RunRecord]:
        wanted = None if statuses is None else {str(s) for s in statuses}
        with self._lock:
            if thread_id is None:
                candidates: Iterable[Row] = self._runs.values()
            else:  # the thread's order: newest placed first; a page after its last run
                ids = self._thread_runs.get(thread_id, [])
                if before is not None:
                    ids = ids[: ids.index(before[1])] if before[1] in ids else []
                candidates = [self._runs[r] for r in reversed(ids)]
            found = [
                row
                for row in candidates
                if (wanted is None or row[_RUN_STATUS] in wanted)
                and _owned(row, app_id, tenant)
                and (parent_run_id is None or row[_RUN_PARENT] == parent_run_id)
                and (thread_id is not None or before is None or _run_order(row) < before)
            ]
        if thread_id is None:
            found.sort(key=_run_order, reverse=True)
        return [self.rows.run_from_row(r) for r in found[: max(limit, 0)]]

    # -- effects ----------------------------------------------------------------------

    def _upsert_effect(self, row: Row) -> None:
        old = self._effects.get(row[0])
        if old is None:
            self._effects[row[0]] = row
        else:
            self._effects[row[0]] = _with(old, {i: row[i] for i in _EFFECT_MUTABLE})

    async def begin_effect(
        self, record: EffectRecord, *, fence: int | None = None
    ) -> tuple[EffectRecord, bool]:
        row = self.rows.effect_to_params(record)
        with self._lock:
            if fence is not None:
                self._check_fence(record.run_id, fence)
            old = self._effects.get(record.effect_id)
            if old is None:
                self._effects[record.effect_id] = row
                stored, created = row, True
            else:
                stored, created = old, False
        return self.rows.effect_from_row(stored), created

    async def get_effect(self, effect_id: str) -> EffectRecord | None:
        with self._lock:
            row = self._effects.get(effect_id)
        return None if row is None else self.rows.effect_from_row(row)

    async def save_effect(
        self, record: EffectRecord, *, fence: int | None = None, audit: AuditRecord | None = None
    ) -> None:
        row = self.rows.effect_to_params(record)
        audit_row = self.rows.audit_to_params(audit) if audit is not None else None
        with self._lock:
            self._refuse_known_audit(audit_row)
            if fence is not None:
                self._check_fence(record.run_id, fence)
            old = self._effects.get(record.effect_id)
            stored = 0 if old is None else int(old[_EFFECT_VERSION])
            if stored != record.row_version - 1:
                raise StaleStateError(rows.effect_cas_message(record.effect_id, stored))
            self._upsert_effect(row)
            if audit is not None and audit_row is not None:
                self._link_audit(audit, audit_row)

    # -- the audit log ----------------------------------------------------------------

    async def append_audit(self, record: AuditRecord) -> None:
        row = self.rows.audit_to_params(record)
        with self._lock:
            self._refuse_known_audit(row)
            self._link_audit(record, row)

    def _refuse_known_audit(self, row: Row | None) -> None:
        """An audit record is appended once: one already on file is refused (under the
        lock, before anything is written)."""
        if row is not None and row[0] in self._audit:
            raise StorageError(f"audit record {row[0]!r} already exists")

    def _link_audit(self, record: AuditRecord, row: Row) -> None:
        """Store ``record`` as the next link of the audit chain (under the lock)."""
        head = self._audit_chain[-1][:2] if self._audit_chain else None
        seq, mac = chain.next_link(head, record, self._chain_key)
        self._audit[record.audit_id] = row
        self._audit_chain.append((seq, mac, record.audit_id))

    async def verify_audit(self) -> chain.ChainReport:
        """Check the audit chain (:func:`oncegraph.storage.auditchain.verify`)."""
        with self._lock:
            found = [
                self.rows.chained_audit((*self._audit[audit_id], seq, mac))
                for seq, mac, audit_id in self._audit_chain
                if audit_id in self._audit
            ]
        return chain.verify(found, db_key=self._chain_db_key, encryption=self.rows.encryption)

    async def list_audit(
        self,
        *,
        run_id: str | None = None,
        thread_id: str | None = None,
        target_id: str | None = None,
        before: float | tuple[float, str] | None = None,
        limit: int = 100,
        app_id: str | None = None,
        tenant: str | None = None,
    ) -> list[AuditRecord]:
        with self._lock:
            found = [
                r
                for r in self._audit.values()
                if (run_id is None or r[6] == run_id)
                and (thread_id is None or r[7] == thread_id)
                and (target_id is None or r[5] == target_id)
                and (before is None or _audit_before(r, before))
                and (
                    (app_id is None and tenant is None)
                    or r[6] not in self._runs  # no run, or one this store does not hold
                    or _owned(self._runs[r[6]], app_id, tenant)
                )
            ]
        found.sort(key=lambda r: (r[1], r[0]), reverse=True)
        return [self.rows.audit_from_row(r) for r in found[: max(limit, 0)]]

    # -- idempotency keys ----------------------------------------------------------------

    async def claim_request(self, record: IdempotencyRecord) -> tuple[IdempotencyRecord, bool]:
        row = self.rows.request_to_params(record)
        with self._lock:
            found = self._requests.get((record.scope, record.key))
            if found is not None and found[_REQUEST_EXPIRES] > record.created_at:
                return self.rows.request_from_row(found), False
            self._requests[(record.scope, record.key)] = row
        return self.rows.request_from_row(row), True

    async def get_request(self, scope: str, key: str) -> IdempotencyRecord | None:
        with self._lock:
            found = self._requests.get((scope, key))
        return None if found is None else self.rows.request_from_row(found)

    async def finish_request(
        self, record: IdempotencyRecord, *, status_code: int, response: Mapping[str, Any]
    ) -> bool:
        answer = self.rows.response_param(record.scope, record.key, response)
        with self._lock:
            found = self._requests.get((record.scope, record.key))
            if found is None or not _same_claim(found, record):
                return False
            self._requests[(record.scope, record.key)] = _with(
                found, {_REQUEST_STATUS: status_code, _REQUEST_RESPONSE: answer}
            )
            return True

    async def release_request(self, record: IdempotencyRecord) -> None:
        with self._lock:
            found = self._requests.get((record.scope, record.key))
            if found is not None and _same_claim(found, record):
                del self._requests[(record.scope, record.key)]

    async def prune_requests(self, *, before: float) -> int:
        with self._lock:
            doomed = [k for k, r in self._requests.items() if r[_REQUEST_EXPIRES] <= before]
            for k in doomed:
                del self._requests[k]
        return len(doomed)

    async def list_effects(
        self,
        *,
        run_id: str | None = None,
        thread_id: str | None = None,
        statuses: Sequence[EffectStatus] | None = None,
        app_id: str | None = None,
        tenant: str | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[EffectRecord]:
        found = self._effect_rows(run_id, thread_id, statuses, app_id, tenant)
        start = max(offset, 0)
        found = found[start:] if limit is None else found[start : start + max(limit, 0)]
        return [self.rows.effect_from_row(r) for r in found]

    def _effect_rows(
        self,
        run_id: str | None,
        thread_id: str | None,
        statuses: Sequence[EffectStatus] | None = None,
        app_id: str | None = None,
        tenant: str | None = None,
        thread_ids: Sequence[str] | None = None,
    ) -> list[Row]:
        """The stored rows of the effects :meth:`list_effects` lists, in its order
        (``thread_ids``: of any of these threads too)."""
        wanted = None if statuses is None else {str(s) for s in statuses}
        threads = None if thread_ids is None else set(thread_ids)
        scoped = app_id is not None or tenant is not None
        with self._lock:
            found = [
                row
                for row in self._effects.values()
                if (run_id is None or row[_EFFECT_RUN] == run_id)
                and (thread_id is None or row[_EFFECT_THREAD] == thread_id)
                and (threads is None or row[_EFFECT_THREAD] in threads)
                and (wanted is None or row[_EFFECT_STATUS] in wanted)
                and (
                    not scoped
                    or (
                        (owner := self._runs.get(row[_EFFECT_RUN])) is not None
                        and _owned(owner, app_id, tenant)
                    )
                )
            ]
        found.sort(key=lambda r: (r[_EFFECT_CREATED], r[0]))
        return found

    async def list_effect_payloads(
        self,
        *,
        run_id: str | None = None,
        thread_id: str | None = None,
        results: bool = True,
        thread_ids: Sequence[str] | None = None,
    ) -> list[EffectPayload]:
        found = self._effect_rows(run_id, thread_id, thread_ids=thread_ids)
        return [
            self.rows.payload_from_row(
                (r[0], r[_EFFECT_TYPE], r[_EFFECT_REQUEST], r[_EFFECT_RESULT] if results else None)
            )
            for r in found
        ]

    # -- retention --------------------------------------------------------------------

    async def prune(
        self,
        *,
        keep_checkpoints: int = 1,
        effects_older_than: float | None = None,
        thread_id: str | None = None,
        dry_run: bool = False,
        on_thread: Callable[[PruneReport], None] | None = None,
    ) -> PruneReport:
        """See :meth:`oncegraph.storage.protocols.Pruner.prune`; one thread per lock hold,
        with the same rules as the SQL statements of the prune."""
        cutoff = prune_effects_cutoff(keep_checkpoints, effects_older_than)
        with self._lock:
            thread_ids = sorted(self._threads) if thread_id is None else [thread_id]
        report = PruneReport()
        for tid in thread_ids:
            with self._lock:
                one = self._prune_thread(tid, keep_checkpoints, cutoff, dry_run)
            if on_thread is not None:
                on_thread(one)
            report = report.plus(one)
        return report

    def _prune_thread(
        self, thread_id: str, keep: int, cutoff: float | None, dry_run: bool = False
    ) -> PruneReport:
        """Prune one thread (``dry_run``: count only); call under the lock."""
        thread = self._threads.get(thread_id)
        if thread is None:
            return PruneReport()
        version, head = int(thread[1]), thread[2]

        def kept_run(run_id: str) -> bool:
            run = self._runs.get(run_id)
            return run is not None and run[_RUN_STATUS] in _KEEP_RUN_STATUSES

        doomed = [
            cid
            for (tid, cid), row in self._checkpoints.items()
            if tid == thread_id
            and row[_CP_VERSION] <= version - keep
            and cid != head
            and not kept_run(row[_CP_RUN])
        ]
        writes = 0
        for cid in doomed:
            if dry_run:
                writes += len(self._task_writes.get((thread_id, cid), {}))
                continue
            del self._checkpoints[(thread_id, cid)]
            writes += len(self._task_writes.pop((thread_id, cid), {}))
        effects = 0
        if cutoff is not None:
            for effect_id, row in list(self._effects.items()):
                run = self._runs.get(row[_EFFECT_RUN])
                if (
                    row[_EFFECT_THREAD] == thread_id
                    and row[_EFFECT_UPDATED] < cutoff
                    and row[_EFFECT_STATUS] in _PRUNE_EFFECT_STATUSES
                    and run is not None
                    and run[_RUN_STATUS] in _PRUNE_EFFECT_RUN_STATUSES
                ):
                    if not dry_run:
                        del self._effects[effect_id]
                    effects += 1
        return PruneReport(threads=1, checkpoints=len(doomed), task_writes=writes, effects=effects)


_REQUEST_STATUS = REQUEST_COLUMNS.index("status_code")
_REQUEST_RESPONSE = REQUEST_COLUMNS.index("response")
_REQUEST_CREATED = REQUEST_COLUMNS.index("created_at")
_REQUEST_EXPIRES = REQUEST_COLUMNS.index("expires_at")


def _fence_of(run: Row | None) -> tuple[int] | None:
    """A run row as the ``RUN_EXISTS`` statement reads it (its fencing token)."""
    return None if run is None else (run[_RUN_FENCE],)


def _same_claim(row: Row, record: IdempotencyRecord) -> bool:
    """Is ``row`` the in-flight claim ``record`` made (not a later claim of its key)?"""
    return row[_REQUEST_STATUS] is None and row[_REQUEST_CREATED] == record.created_at


class _MemoryRunLock:
    __slots__ = ("_store", "run_id")

    def __init__(self, store: InMemoryCheckpointer, run_id: str) -> None:
        self._store: InMemoryCheckpointer | None = store
        self.run_id = run_id

    @property
    def lost(self) -> bool:
        return False

    async def release(self) -> None:
        store, self._store = self._store, None
        if store is not None:
            store._unlock(self.run_id)


__all__ = ["InMemoryCheckpointer"]
