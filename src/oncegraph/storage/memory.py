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

The tables and their shared state are :mod:`.memory_tables`; idempotency keys
(:mod:`.memory_requests`) and retention (:mod:`.memory_retention`) are parts of the
store written on their own.

Run liveness locks (:meth:`lock_run`) live in the store object: the store exists in one
process only, so they die with it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from oncegraph.errors import LeaseLostError, RunNotFoundError, StaleStateError, StorageError
from oncegraph.storage import auditchain as chain
from oncegraph.storage.doors import StoreDoors
from oncegraph.storage.filelocks import HeldRunLock
from oncegraph.storage.lifecycle import Closing
from oncegraph.storage.memory_requests import RequestTables
from oncegraph.storage.memory_retention import Retention
from oncegraph.storage.memory_tables import (
    CP_RUN,
    CP_VERSION,
    EFFECT_CREATED,
    EFFECT_MUTABLE,
    EFFECT_REQUEST,
    EFFECT_RESULT,
    EFFECT_RUN,
    EFFECT_STATUS,
    EFFECT_THREAD,
    EFFECT_TYPE,
    EFFECT_VERSION,
    RUN_ERROR,
    RUN_EXPIRES,
    RUN_FENCE,
    RUN_OWNER,
    RUN_PARENT,
    RUN_STATUS,
    RUN_THREAD,
    RUN_UPDATED,
    Row,
    audit_before,
    fence_of,
    owned,
    run_order,
    with_changes,
)
from oncegraph.storage.queries import (
    AuditQuery,
    CheckpointQuery,
    EffectQuery,
    PayloadQuery,
    RunQuery,
    Takeover,
)
from oncegraph.storage.records import (
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
)
from oncegraph.storage.saver_api import SaverMethods, deletion_audit
from oncegraph.storage.sql import rows


class InMemoryCheckpointer(SaverMethods, RequestTables, Retention, StoreDoors, Closing):
    """Threads, runs, checkpoints, logs, task writes and the effect ledger in memory."""

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
                rows.check_run(run_id, fence_of(existing_run), commit.fence)
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
                self._runs[run_id] = with_changes(
                    row,
                    {
                        RUN_STATUS: str(commit.run_status),
                        RUN_ERROR: self.rows.error_param(run_id, commit.run_error),
                        RUN_UPDATED: ts,
                    },
                )
            elif commit.fence is not None:
                self._runs[run_id] = with_changes(self._runs[run_id], {RUN_UPDATED: ts})
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

    async def _list_checkpoints(self, q: CheckpointQuery) -> list[CheckpointRecord]:
        with self._lock:
            found = [
                row
                for (tid, _), row in self._checkpoints.items()
                if tid == q.thread_id
                and (q.run_id is None or row[CP_RUN] == q.run_id)
                and (q.before_version is None or row[CP_VERSION] < q.before_version)
            ]
        found.sort(key=lambda r: r[CP_VERSION], reverse=True)
        if q.limit is not None:
            found = found[: max(q.limit, 0)]
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
        thread_id = row[RUN_THREAD]
        self._runs[row[0]] = row
        self._thread_runs.setdefault(thread_id, []).append(row[0])
        self._latest_run[thread_id] = row[0]  # a thread's runs in the order they came

    async def get_run(self, run_id: str) -> RunRecord | None:
        with self._lock:
            row = self._runs.get(run_id)
        return None if row is None else self.rows.run_from_row(row)

    async def _update_run(
        self, run_id: str, status: RunStatus, error: str | None, fence: int | None
    ) -> None:
        with self._lock:
            row = self._runs.get(run_id)
            if row is None:
                raise RunNotFoundError(f"run {run_id!r} does not exist")
            if fence is not None and row[RUN_FENCE] != fence:
                raise LeaseLostError(rows.lease_message(run_id, fence))
            self._runs[run_id] = with_changes(
                row,
                {
                    RUN_STATUS: str(status),
                    RUN_ERROR: self.rows.error_param(run_id, error),
                    RUN_UPDATED: now(),
                },
            )

    def _check_fence(self, run_id: str, fence: int) -> None:
        """Raise unless ``run_id`` holds ``fence``; call under the lock."""
        rows.check_run(run_id, fence_of(self._runs.get(run_id)), fence)

    async def lock_run(self, run_id: str) -> HeldRunLock | None:
        with self._lock:
            if run_id in self._held:
                return None
            self._held.add(run_id)
        return HeldRunLock(self._unlock, run_id)

    def _unlock(self, run_id: str) -> None:
        with self._lock:
            self._held.discard(run_id)

    async def _fence_run(self, run_id: str, t: Takeover) -> RunRecord | None:
        audit_row = self.rows.audit_to_params(t.audit) if t.audit is not None else None
        with self._lock:
            self._refuse_known_audit(audit_row)
            row = self._runs.get(run_id)
            if row is None:
                raise RunNotFoundError(f"run {run_id!r} does not exist")
            if row[RUN_FENCE] != t.expected_token:
                return None
            changes: dict[int, Any] = {
                RUN_FENCE: t.expected_token + 1,
                RUN_OWNER: t.owner,
                RUN_EXPIRES: None,
                RUN_UPDATED: now(),
            }
            if t.status is not None:
                changes[RUN_STATUS] = str(t.status)
                changes[RUN_ERROR] = self.rows.error_param(run_id, t.error)
            row = self._runs[run_id] = with_changes(row, changes)
            if t.audit is not None and audit_row is not None:
                self._link_audit(t.audit, audit_row)
        return self.rows.run_from_row(row)

    async def _list_runs(self, q: RunQuery) -> list[RunRecord]:
        wanted = None if q.statuses is None else {str(s) for s in q.statuses}
        with self._lock:
            if q.thread_id is None:
                candidates: Iterable[Row] = self._runs.values()
            else:  # the thread's order: newest placed first; a page after its last run
                ids = self._thread_runs.get(q.thread_id, [])
                if q.before is not None:
                    ids = ids[: ids.index(q.before[1])] if q.before[1] in ids else []
                candidates = [self._runs[r] for r in reversed(ids)]
            found = [
                row
                for row in candidates
                if (wanted is None or row[RUN_STATUS] in wanted)
                and owned(row, q.app_id, q.tenant)
                and (q.parent_run_id is None or row[RUN_PARENT] == q.parent_run_id)
                and (q.thread_id is not None or q.before is None or run_order(row) < q.before)
            ]
        if q.thread_id is None:
            found.sort(key=run_order, reverse=True)
        return [self.rows.run_from_row(r) for r in found[: max(q.limit, 0)]]

    # -- effects ----------------------------------------------------------------------

    def _upsert_effect(self, row: Row) -> None:
        old = self._effects.get(row[0])
        if old is None:
            self._effects[row[0]] = row
        else:
            self._effects[row[0]] = with_changes(old, {i: row[i] for i in EFFECT_MUTABLE})

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
            stored = 0 if old is None else int(old[EFFECT_VERSION])
            if stored != record.row_version - 1:
                raise StaleStateError(rows.effect_cas_message(record.effect_id, stored))
            self._upsert_effect(row)
            if audit is not None and audit_row is not None:
                self._link_audit(audit, audit_row)

    # -- the audit log ----------------------------------------------------------------

    async def _delete_thread(self, thread_id: str) -> PruneReport:
        """See :meth:`SaverMethods.adelete_thread`: the rows and the audit record under one
        lock hold."""
        with self._lock:
            report = self._delete_thread_rows(thread_id)
            record = deletion_audit(thread_id, report)
            row = self.rows.audit_to_params(record)
            self._refuse_known_audit(row)
            self._link_audit(record, row)
        return report

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

    async def _list_audit(self, q: AuditQuery) -> list[AuditRecord]:
        with self._lock:
            found = [
                r
                for r in self._audit.values()
                if (q.run_id is None or r[6] == q.run_id)
                and (q.thread_id is None or r[7] == q.thread_id)
                and (q.target_id is None or r[5] == q.target_id)
                and (q.before is None or audit_before(r, q.before))
                and (
                    (q.app_id is None and q.tenant is None)
                    or r[6] not in self._runs  # no run, or one this store does not hold
                    or owned(self._runs[r[6]], q.app_id, q.tenant)
                )
            ]
        found.sort(key=lambda r: (r[1], r[0]), reverse=True)
        return [self.rows.audit_from_row(r) for r in found[: max(q.limit, 0)]]

    async def _list_effects(self, q: EffectQuery) -> list[EffectRecord]:
        found = self._effect_rows(q.run_id, q.thread_id, q.statuses, q.app_id, q.tenant)
        start = max(q.offset, 0)
        found = found[start:] if q.limit is None else found[start : start + max(q.limit, 0)]
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
                if (run_id is None or row[EFFECT_RUN] == run_id)
                and (thread_id is None or row[EFFECT_THREAD] == thread_id)
                and (threads is None or row[EFFECT_THREAD] in threads)
                and (wanted is None or row[EFFECT_STATUS] in wanted)
                and (
                    not scoped
                    or (
                        (owner := self._runs.get(row[EFFECT_RUN])) is not None
                        and owned(owner, app_id, tenant)
                    )
                )
            ]
        found.sort(key=lambda r: (r[EFFECT_CREATED], r[0]))
        return found

    async def _list_effect_payloads(self, q: PayloadQuery) -> list[EffectPayload]:
        found = self._effect_rows(q.run_id, q.thread_id, thread_ids=q.thread_ids)
        return [
            self.rows.payload_from_row(
                (r[0], r[EFFECT_TYPE], r[EFFECT_REQUEST], r[EFFECT_RESULT] if q.results else None)
            )
            for r in found
        ]


__all__ = ["InMemoryCheckpointer"]
