"""The storage ports, one small Protocol each, in verbs.

Every backend (memory, SQLite, PostgreSQL) implements :class:`CheckpointStore` and
:class:`EffectStore`; a :class:`Checkpointer` is one object that is both. :class:`Cache`
is the optional hot cache (Redis), never the source of truth. :class:`Pruner` is
retention, which every bundled backend also implements. Each backend passes the
conformance suite in :mod:`oncegraph.testing.conformance`.

The long keyword signatures (listings, ``prune``, ``fence_run``) are written once, here,
with their door: :class:`RunDoors`, :class:`EffectDoors`, :class:`AuditDoors` and
:class:`Pruner` hand ONE frozen value of the arguments (:mod:`oncegraph.storage.queries`)
to a hook of :class:`oncegraph.storage.doors.StoreDoors`, which every bundled store
inherits and implements; a store of its own that does not inherit it writes these methods
itself. All methods are coroutines.
Backends map their driver's errors to :class:`oncegraph.errors.StorageError` subclasses
at this boundary.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

from oncegraph.storage import queries as Q
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
)
from oncegraph.storage.requests import IdempotencyRecord

if TYPE_CHECKING:
    from oncegraph.storage.auditchain import ChainReport as AuditChainReport
    from oncegraph.storage.doors import StoreDoors


def _hooks(store: object) -> StoreDoors:
    """A store that inherits a door: a :class:`~oncegraph.storage.doors.StoreDoors` (the
    doors are the bundled stores' implementation; another store writes the methods)."""
    return cast("StoreDoors", store)


@runtime_checkable
class RunLock(Protocol):
    """A run's liveness lock, held by this process (see :meth:`CheckpointStore.lock_run`)."""

    run_id: str

    @property
    def lost(self) -> bool:
        """True once the lock may no longer be held (its database session died)."""

    async def release(self) -> None:
        """Let the run go. Idempotent."""


@runtime_checkable
class LoopBoundLock(Protocol):
    """A run lock held through the event loop that took it (optional; PostgreSQL's locks
    live on a session of that loop). A lock without it lives as long as its store."""

    async def outlive_loop(self) -> None:
        """Hold the run somewhere that outlives the loop that took the lock (a call of
        the run outlives the run, and the caller's loop may end first). Raises if it
        cannot; the lock is then held as before."""


class RunDoors(Protocol):
    """The keyword doors of :class:`CheckpointStore` (see the module docstring)."""

    async def list_checkpoints(
        self,
        thread_id: str,
        *,
        run_id: str | None = None,
        limit: int | None = None,
        before_version: int | None = None,
    ) -> list[CheckpointRecord]:
        """Checkpoints of the thread (optionally one run), newest first; with
        ``before_version`` only those of a lower version (the next page after a checkpoint
        of that version)."""
        query = Q.CheckpointQuery(thread_id, run_id, limit, before_version)
        return await _hooks(self)._list_checkpoints(query)

    async def update_run(
        self,
        run_id: str,
        *,
        status: RunStatus,
        error: str | None = None,
        fence: int | None = None,
    ) -> None:
        """Set status and error (kept as :func:`~oncegraph.storage.records.error_text`).
        Raises ``RunNotFoundError`` for an unknown run and ``LeaseLostError`` if
        ``fence`` is given and is not the run's fencing token."""
        await _hooks(self)._update_run(run_id, status, error, fence)

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
        """Runs, newest first (``created_at``, then ``run_id``, descending); with
        ``thread_id``, the thread's runs in the order the store placed them, the last
        stored first (never by ``created_at`` or ``run_id``: they are the submitting
        process's clock), and ``before`` is read by its run id; with
        ``app_id`` only that app's (a run with no stored app_id belongs to its
        ``workflow_name``), with ``tenant`` only that tenant's, with ``parent_run_id``
        only the runs made from that run (its replays and branches), with ``before`` (a
        run's ``(created_at, run_id)``) only the runs listed after that run: the next
        page of a listing whose last run it was."""
        query = Q.RunQuery(thread_id, statuses, limit, app_id, tenant, parent_run_id, before)
        return await _hooks(self)._list_runs(query)

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
        """Take the run over: compare-and-set ``fencing_token`` from ``expected_token`` to
        ``expected_token + 1``, set ``lease_owner`` (no lease expiry) and, if given, the
        status and error. Returns the run as stored now, or None if the token had moved
        (someone else took it first: read it again). ``RunNotFoundError`` if unknown.
        ``audit`` is appended in the same transaction, only if the takeover happened."""
        takeover = Q.Takeover(expected_token, owner, status, error, audit)
        return await _hooks(self)._fence_run(run_id, takeover)


@runtime_checkable
class CheckpointStore(RunDoors, Protocol):
    """Threads, runs, checkpoints, append-only logs and per-task writes."""

    async def setup(self) -> None:
        """Create or migrate the schema. Idempotent; safe when processes race."""

    async def aclose(self) -> None:
        """Release connections. The store may be set up again afterwards."""

    async def commit(self, commit: StepCommit) -> int | None:
        """Write one step atomically (see :class:`StepCommit` for the contract).

        Returns how many of ``commit.intents`` it inserted (the others existed and were
        left as they were), or None when it cannot tell: with every intent inserted, the
        step that makes those calls need not read them back."""

    async def get_thread(self, thread_id: str) -> ThreadRecord | None: ...

    async def get_checkpoint(
        self, thread_id: str, checkpoint_id: str | None = None
    ) -> CheckpointRecord | None:
        """The given checkpoint of the thread, or its head when ``checkpoint_id`` is None."""

    async def read_log(self, thread_id: str, channel: str, end: int) -> list[Any]:
        """Values of log entries ``seq < end`` of ``(thread_id, channel)``, in seq order."""

    async def put_task_write(
        self, write: TaskWrite, *, run_id: str | None = None, fence: int | None = None
    ) -> None:
        """Insert or replace the write keyed ``(thread, checkpoint, task, kind, idx)``.

        With ``fence``, only while run ``run_id`` holds that fencing token: otherwise
        ``LeaseLostError`` (``RunNotFoundError`` for an unknown run) and nothing written.
        """

    async def get_task_writes(self, thread_id: str, checkpoint_id: str) -> list[TaskWrite]:
        """Task writes of the step after ``checkpoint_id``, ordered by task, kind, idx."""

    async def create_run(self, run: RunRecord) -> None:
        """Insert a run that has no checkpoint yet (a queued submit)."""

    async def get_run(self, run_id: str) -> RunRecord | None: ...

    async def lock_run(self, run_id: str) -> RunLock | None:
        """Take run ``run_id``'s liveness lock without waiting; None if a live holder has it.

        The lock dies with its holder: a process that exits or is killed releases it at
        once (an OS file lock, a PostgreSQL session advisory lock), so a crashed run is
        never waited for. It is exclusive across processes AND within this process. It
        guards who may START work on a run; the fencing token guards the writes.
        """


class EffectDoors(Protocol):
    """The keyword doors of :class:`EffectStore` (see the module docstring)."""

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
        """Effects ordered by creation time; with ``app_id`` / ``tenant`` only those whose
        run belongs to that app / tenant (as :meth:`CheckpointStore.list_runs` filters);
        ``limit`` and ``offset`` page through them."""
        query = Q.EffectQuery(run_id, thread_id, statuses, app_id, tenant, limit, offset)
        return await _hooks(self)._list_effects(query)

    async def list_effect_payloads(
        self,
        *,
        run_id: str | None = None,
        thread_id: str | None = None,
        results: bool = True,
        thread_ids: Sequence[str] | None = None,
    ) -> list[EffectPayload]:
        """The type, request and result (None unless ``results``) of the effects
        :meth:`list_effects` lists for ``run_id`` / ``thread_id``, in its order: what a
        view needs to learn the values it masks, without the rest of each record.
        ``thread_ids``: of any of these threads too (none: no effect), in one read, for a
        view of many threads (a listing of runs)."""
        query = Q.PayloadQuery(run_id, thread_id, results, thread_ids)
        return await _hooks(self)._list_effect_payloads(query)


@runtime_checkable
class EffectStore(EffectDoors, Protocol):
    """The effect ledger (guarantees 2 to 7)."""

    async def begin_effect(
        self, record: EffectRecord, *, fence: int | None = None
    ) -> tuple[EffectRecord, bool]:
        """Insert ``record`` unless its ``effect_id`` exists; first writer wins.

        Returns ``(stored, created)``: the record now in the ledger and whether this
        call inserted it. Committed durably before returning (guarantee 2). Concurrent calls
        never fail: exactly one creates, the others get its record. With ``fence``, only
        while ``record.run_id`` holds that token (else ``LeaseLostError``, nothing
        written, whether or not the record exists).
        """

    async def get_effect(self, effect_id: str) -> EffectRecord | None: ...

    async def save_effect(
        self, record: EffectRecord, *, fence: int | None = None, audit: AuditRecord | None = None
    ) -> None:
        """Write status, attempts, result, error, provider_reference, updated_at and
        row_version of the record, by compare-and-set: the stored ``row_version`` must be
        ``record.row_version - 1`` (a record never begun, ``row_version`` 1, is
        inserted). Otherwise ``StaleStateError`` and nothing written. ``request_hash``
        never changes. With ``fence``, as :meth:`begin_effect`. ``audit`` is appended in
        the same transaction. Committed before returning."""


class AuditDoors(Protocol):
    """The keyword door of :class:`AuditLog` (see the module docstring)."""

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
        """Records newest first (``at``, then ``audit_id``), filtered by every argument
        given; ``before`` is the next page's cursor: an ``at`` (the records older), or
        a record's ``(at, audit_id)`` (the records listed after it, ties in time too);
        with ``app_id`` (and ``tenant``) only the records whose run is that app's (and
        that tenant's), and those with no run or whose run the store does not hold."""
        query = Q.AuditQuery(run_id, thread_id, target_id, before, limit, app_id, tenant)
        return await _hooks(self)._list_audit(query)


@runtime_checkable
class AuditLog(AuditDoors, Protocol):
    """The append-only record of operator actions and interrupt answers (guarantee 14)."""

    async def append_audit(self, record: AuditRecord) -> None:
        """Insert ``record``; an ``audit_id`` that exists is a ``StorageError`` (records
        are never replaced, updated or deleted)."""


@runtime_checkable
class AuditChain(Protocol):
    """An audit log whose records are chained by a MAC (:mod:`oncegraph.storage.auditchain`):
    an edited, deleted or reordered record is found by :meth:`verify_audit`."""

    async def verify_audit(self) -> AuditChainReport:
        """Check every record, in order; the report names the first that fails."""


@runtime_checkable
class Checkpointer(CheckpointStore, EffectStore, AuditLog, Protocol):
    """What ``compile(checkpointer=...)`` takes: one store for state, ledger and audit."""


@runtime_checkable
class ThreadOpening(Protocol):
    """A store that reads what starting (or going on with) a run needs first in ONE
    request. Every bundled store has it; the run service reads them separately otherwise."""

    async def open_thread(self, thread_id: str) -> tuple[ThreadRecord | None, RunRecord | None]:
        """``(get_thread(thread_id), the newest of list_runs(thread_id=thread_id))``, read
        together (one snapshot where the store can)."""

    async def open_run(self, run_id: str) -> tuple[RunRecord | None, ThreadRecord | None]:
        """``(get_run(run_id), get_thread(its thread_id))``, read together; ``(None,
        None)`` for an unknown run."""


@runtime_checkable
class RequestHashKeys(Protocol):
    """The key of the ledger's request hashes (:mod:`oncegraph.ledger.keys`). Every
    bundled store has one; a store without it gets unkeyed hashes, with a warning."""

    async def request_hash_key(self) -> bytes:
        """The same bytes for every process that writes this store's ledger (guarantee 6 must
        hold across them), and secret to whoever cannot read the store."""


@runtime_checkable
class IdempotencyStore(Protocol):
    """Idempotency keys of requests (:mod:`oncegraph.storage.requests`): what a retried
    request gets. Every bundled store has it; the HTTP server needs it for requests that
    carry an ``Idempotency-Key``."""

    async def claim_request(self, record: IdempotencyRecord) -> tuple[IdempotencyRecord, bool]:
        """Insert ``record`` unless its ``(scope, key)`` has a record that has not expired
        at ``record.created_at`` (an expired one is replaced). Returns ``(stored,
        created)``: the record now kept and whether this call made it. Atomic: of
        concurrent claims of one key exactly one creates, the others get its record;
        committed before returning."""

    async def get_request(self, scope: str, key: str) -> IdempotencyRecord | None:
        """The record of ``(scope, key)``, expired or not, or None."""

    async def finish_request(
        self, record: IdempotencyRecord, *, status_code: int, response: Mapping[str, Any]
    ) -> bool:
        """Record the answer of the in-flight claim ``record`` (the same scope, key and
        ``created_at``); False, writing nothing, if that claim is no longer in flight (it
        was finished, released, or expired and replaced)."""

    async def release_request(self, record: IdempotencyRecord) -> None:
        """Delete the in-flight claim ``record`` (its request was refused before it did
        anything, so a retry may do it); a finished or replaced record is left alone."""

    async def prune_requests(self, *, before: float) -> int:
        """Delete the records that expired by ``before`` (seconds); returns how many."""


@runtime_checkable
class Pruner(Protocol):
    """Retention: deletes history that no open run needs, so storage stays bounded."""

    async def prune(
        self,
        *,
        keep_checkpoints: int = 1,
        effects_older_than: float | None = None,
        thread_id: str | None = None,
        dry_run: bool = False,
        on_thread: Callable[[PruneReport], None] | None = None,
        run_id: str | None = None,
        after_version: int = 0,
    ) -> PruneReport:
        """Delete old checkpoints and old finished effect records; returns the counts.

        Per thread (only ``thread_id`` if given, else every thread), it keeps the head,
        the newest ``keep_checkpoints`` checkpoints (>= 1) and every checkpoint of an
        unfinished run (queued, running, interrupted, needs_review, failed), with their
        task writes; it deletes the other checkpoints and their task writes. With
        ``effects_older_than`` (seconds) it also deletes effect records that are
        ``completed`` or ``failed``, were last updated longer ago than that, and belong
        to a ``completed`` or ``abandoned`` run; never a pending or accepted record and
        never one of an unfinished run. Log entries, threads and runs are never deleted
        (a kept checkpoint names a prefix of each log and the head names all of it).

        Safe while runs commit: one transaction per thread, and the thread row (the CAS
        token) is read, never written or locked. Idempotent: repeated at once it deletes
        nothing more. Raises ConfigError on bad arguments.

        ``dry_run=True`` counts the same rows in the same transactions and rolls each
        back: nothing is deleted. ``on_thread`` is called with each thread's report as
        it finishes (a progress display).

        With ``run_id`` (and ``thread_id``, required then) it is instead the fold of a
        call of that run that ended under ``durability="exit"``: it deletes the run's
        checkpoints on the thread whose version is above ``after_version``, but the
        head, with their task writes, whatever the run's status (a resume starts from
        the head, which stays with its task writes); ``keep_checkpoints`` is not applied
        and no effect record is deleted.
        """
        policy = Q.PrunePolicy(
            keep_checkpoints,
            effects_older_than,
            thread_id,
            dry_run,
            on_thread,
            run_id,
            after_version,
        )
        return await _hooks(self)._prune(policy)


@runtime_checkable
class Cache(Protocol):
    """A hot cache of each thread's latest state. Written only with a newer version.

    Never the source of truth (guarantee 15): a store serves a cached head only when the cache
    ``verifies_entries`` (each entry carries a MAC the cache checked, so a forged entry is
    never returned) AND the database's thread row still names that head.
    """

    @property
    def verifies_entries(self) -> bool:
        """True when :meth:`get_state` returns only entries whose MAC it verified."""

    async def get_state(self, thread_id: str) -> tuple[int, bytes] | None: ...

    async def put_state(self, thread_id: str, version: int, payload: bytes) -> bool:
        """Store ``payload`` unless the cache holds ``version`` or newer; True if written."""
