"""Typed records that cross the storage boundary. Frozen and slotted; change with ``replace``.

Invariants an implementer of a store must keep:

* A :class:`CheckpointRecord` is immutable once written; a thread's head moves forward
  only by :meth:`CheckpointStore.commit`, a compare-and-swap on ``ThreadRecord.version``.
* Log channels (message lists and other append-only lists) are not copied into
  checkpoints: a checkpoint stores ``logs[channel] = n``, the number of log entries of
  that channel that belong to its state; entries are appended with ``seq`` 0, 1, 2 ...
  per ``(thread_id, channel)`` and never rewritten.
* An :class:`EffectRecord` is never overwritten by a different request: ``effect_id``
  and ``request_hash`` are fixed at the first insert (first writer wins). It is never
  deleted except by an explicit retention prune (:class:`PruneReport`), and then only
  once it is ``completed`` or ``failed`` and its run is ``completed`` or ``abandoned``.
  Every later write of it is a compare-and-set on ``row_version`` (the version the
  writer read), so two writers can never both start attempt k of one effect (guarantee 13).
* A run is held by at most one live process at a time: its liveness lock
  (:class:`RunLock`, released when the holder dies) and its ``fencing_token``, which
  every write of the run carries. Taking a run over bumps the token, so a writer that
  lost the run writes nothing.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from operator import attrgetter
from typing import Any, NamedTuple

from oncegraph._slots import slot_init
from oncegraph.errors import ConfigError


def error_text(text: str | None) -> str | None:
    """Free text (a run's error or reason; an effect's error, recipient or provider
    reference) as every store can keep it: NUL characters, which PostgreSQL text cannot
    hold, become the four characters ``\\x00``. These fields describe; a tool whose
    exception message carries a NUL must still leave its failure on record."""
    return None if text is None else text.replace("\x00", "\\x00")


def _keep_describable(record: object, *names: str) -> None:
    """Pass a frozen record's free-text fields through :func:`error_text`."""
    for name in names:
        value = getattr(record, name)
        if isinstance(value, str) and "\x00" in value:
            object.__setattr__(record, name, error_text(value))


_REPR: list[Callable[[object], str]] = []


def mask_reprs_with(masked: Callable[[object], str]) -> None:
    """Install what a record's repr goes through: the run layer's masking
    (:func:`oncegraph.runs.masking.masked_repr`, installed when it is imported, as
    importing ``oncegraph`` does), which knows what tools declared masked. The storage
    layer does not import it: the run layer sits above."""
    _REPR[:] = [masked]


def _masked_repr(record: object) -> str:
    """A record's repr with what tools declared masked masked (it may be logged). With
    no masking installed, the fields are left out rather than shown unmasked."""
    if _REPR:
        return _REPR[0](record)
    return f"{type(record).__name__}(...)"


class MaskedRepr:
    """A record's repr, with what tools declared masked masked (it may be logged): the
    base of every record that holds run data (declare the dataclass ``repr=False``)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return _masked_repr(self)


def now() -> float:
    """Wall-clock seconds since the epoch; every stored timestamp uses it."""
    return time.time()


class RunStatus(StrEnum):
    QUEUED = "queued"  # submitted, waiting for a worker
    RUNNING = "running"  # being executed (or its process died: resume continues it)
    INTERRUPTED = "interrupted"  # paused by interrupt(); resume with Command(resume=...)
    NEEDS_REVIEW = "needs_review"  # parked: an effect's outcome is unknown
    FAILED = "failed"  # a node raised; resumable
    PAUSED = "paused"  # created (a branch) and not started: continue it with resume()
    COMPLETED = "completed"
    ABANDONED = "abandoned"  # an operator gave up on it; never resumed


UNFINISHED_STATUSES = frozenset(
    {
        RunStatus.PAUSED,
        RunStatus.QUEUED,
        RunStatus.RUNNING,
        RunStatus.INTERRUPTED,
        RunStatus.NEEDS_REVIEW,
        RunStatus.FAILED,
    }
)


class EffectStatus(StrEnum):
    PENDING = "pending"  # intent committed; outcome unknown until recorded
    ACCEPTED = "accepted"  # the provider queued the work; final result not known yet
    COMPLETED = "completed"
    FAILED = "failed"


class EffectClass(StrEnum):
    READ = "read"  # may run again
    WRITE = "write"  # idempotent with a natural key: run again with the SAME key
    IRREVERSIBLE = "irreversible"  # money, messages: reconcile or park, never re-send blindly
    MODEL = "model"  # a model call: recorded as evidence; may run again if unrecorded


@dataclass(frozen=True, slots=True)
class ThreadRecord:
    thread_id: str
    version: int  # bumped by every checkpoint commit; the CAS token (guarantee 8)
    head_checkpoint_id: str | None
    updated_at: float


@dataclass(frozen=True, slots=True, repr=False)
class RunRecord(MaskedRepr):
    run_id: str
    thread_id: str
    status: RunStatus
    workflow_name: str = "graph"
    workflow_version: str = "1"
    state_schema_version: int = 1
    graph_fingerprint: str = ""
    parent_run_id: str | None = None
    parent_checkpoint_id: str | None = None
    launch_reason: str = "invoke"  # invoke | submit | time_travel; a replay or branch: its reason
    mode: str | None = None  # replays: evidence | simulation | live
    input: Any = None  # JSON; what the run was started with (queued runs need it)
    config: Mapping[str, Any] = field(default_factory=dict)  # JSON; timeouts etc.
    error: str | None = None
    lease_owner: str | None = None
    lease_expires_at: float | None = None
    fencing_token: int = 0
    created_at: float = field(default_factory=now)
    updated_at: float = field(default_factory=now)
    # The app the run belongs to (guarantee 15): the compiled graph's name, which stays the same
    # across deploys (versions are told apart by the fingerprint). None when constructed
    # becomes ``workflow_name``: a row an older oncegraph wrote belongs to the app that
    # named it.
    app_id: str | None = None
    tenant: str | None = None  # the tenant a tenant-bound service started it for

    def __post_init__(self) -> None:
        _keep_describable(self, "error")
        if self.app_id is None:
            object.__setattr__(self, "app_id", self.workflow_name)

    @property
    def app(self) -> str:
        """The app id, never None (see ``app_id``)."""
        return self.app_id or self.workflow_name

    def replace(self, **changes: Any) -> RunRecord:
        return dataclasses.replace(self, **changes)


@slot_init
@dataclass(frozen=True, slots=True, repr=False)
class CheckpointRecord(MaskedRepr):
    checkpoint_id: str
    thread_id: str
    run_id: str
    step: int  # -1 for the input checkpoint of a run, then 0, 1, 2 ...
    version: int  # the thread version this checkpoint created
    parent_checkpoint_id: str | None
    values: Mapping[str, Any]  # non-log channels, JSON
    logs: Mapping[str, int]  # log channel -> number of entries in this state
    next: tuple[str, ...]  # nodes to run next (guarantee 1: recorded before they run)
    metadata: Mapping[str, Any] = field(default_factory=dict)
    created_at: float = field(default_factory=now)


@slot_init
@dataclass(frozen=True, slots=True, repr=False)
class LogEntry(MaskedRepr):
    channel: str
    seq: int
    value: Any


class WriteKind(StrEnum):
    """What a :class:`TaskWrite` holds (stored as these strings)."""

    WRITES = "writes"  # a finished sibling's update, kept so only unfinished siblings re-run
    INTERRUPT = "interrupt"  # a pending interrupt value
    RESUME = "resume"  # an answer to it
    ERROR = "error"  # a failed task's error, shown on its task in the state's view


@slot_init
@dataclass(frozen=True, slots=True, repr=False)
class TaskWrite(MaskedRepr):
    """A write that belongs to one task of the step after ``checkpoint_id``; ``kind``
    says what it holds (:class:`WriteKind`)."""

    thread_id: str
    checkpoint_id: str
    task: str
    kind: WriteKind
    idx: int
    value: Any
    created_at: float = field(default_factory=now)


class AttemptOutcome(StrEnum):
    """How one attempt of an effect ended (stored as these strings).

    ``completed``, ``accepted``, ``failed``: the call returned or raised; ``timeout``: it
    was stopped at its timeout, what it did is unknown; ``unknown``: no outcome could be
    recorded (a crash, a lost response, closed by an operator); ``reconciled``: the
    recipient was asked and said; ``resolved_done`` / ``resolved_not_done``: an operator
    checked at the recipient; ``checked_<verdict>``: an operator's check through the
    tool's hook."""

    COMPLETED = "completed"
    ACCEPTED = "accepted"
    FAILED = "failed"
    TIMEOUT = "timeout"
    UNKNOWN = "unknown"
    RECONCILED = "reconciled"
    RESOLVED_DONE = "resolved_done"
    RESOLVED_NOT_DONE = "resolved_not_done"
    CHECKED_DONE = "checked_done"
    CHECKED_ACCEPTED = "checked_accepted"
    CHECKED_NOT_DONE = "checked_not_done"
    CHECKED_UNKNOWN = "checked_unknown"


@slot_init
@dataclass(frozen=True, slots=True)
class Attempt:
    number: int
    started_at: float
    ended_at: float | None = None
    # an AttemptOutcome when written by the ledger; read back from a row as its string
    outcome: str | None = None
    error: str | None = None
    # the version of the source the result came from (Completed(source_version=...))
    source_version: str | None = None


# The attempts that recorded a result: the effect's source version is the last one's
_RESULT_OUTCOMES = frozenset(
    {"completed", "accepted", "reconciled", "resolved_done", "checked_done", "checked_accepted"}
)


@slot_init
@dataclass(frozen=True, slots=True, repr=False)
class EffectRecord(MaskedRepr):
    effect_id: str
    effect_type: str
    effect_class: EffectClass
    command_id: str
    run_id: str
    thread_id: str
    node: str
    request_hash: str
    status: EffectStatus
    checkpoint_id: str | None = None
    request: Any = None  # JSON arguments (masked only in operator views)
    recipient: str | None = None
    attempts: tuple[Attempt, ...] = ()
    provider_reference: str | None = None
    result: Any = None
    error: str | None = None
    created_at: float = field(default_factory=now)
    updated_at: float = field(default_factory=now)
    # The row's compare-and-set token: 0 before the first insert, then bumped by every
    # write. A writer passes the version it read; the store refuses a stale one.
    row_version: int = 0

    def __post_init__(self) -> None:
        _keep_describable(self, "error", "recipient", "provider_reference")

    @property
    def source_version(self) -> str | None:
        """Where the recorded result came from: the source version the attempt that
        recorded it reported (None when it reported none, or an operator or a hook's
        answer recorded the result)."""
        for attempt in reversed(self.attempts):
            if attempt.outcome in _RESULT_OUTCOMES:
                return attempt.source_version
        return None

    def replace(self, **changes: Any) -> EffectRecord:
        """A copy with ``changes`` (what ``dataclasses.replace`` does, at about a third of
        the cost: the ledger copies a record several times per call). Replaced below by a
        function generated from the fields (:func:`_compile_replace`); this is its
        signature for type checkers."""
        raise NotImplementedError  # pragma: no cover


_EFFECT_FIELDS = tuple(f.name for f in dataclasses.fields(EffectRecord))
_EFFECT_TEXT = ("error", "recipient", "provider_reference")


def _compile_replace() -> Any:
    """``EffectRecord.replace`` written out field by field: one keyword per field
    (an unknown one is a TypeError), each slot set through its descriptor (a frozen
    dataclass refuses ``setattr``), and the free-text fields passed through
    :func:`error_text` again only when one of them changed."""
    keep = "_keep"
    lines = [
        "def replace(self, *, " + ", ".join(f"{name}={keep}" for name in _EFFECT_FIELDS) + "):",
        "    new = _new(EffectRecord)",
    ]
    lines += [
        f"    _set_{name}(new, self.{name} if {name} is {keep} else {name})"
        for name in _EFFECT_FIELDS
    ]
    lines += [
        "    if " + " or ".join(f"{name} is not {keep}" for name in _EFFECT_TEXT) + ":",
        "        new.__post_init__()",
        "    return new",
    ]
    scope: dict[str, Any] = {keep: object(), "_new": object.__new__, "EffectRecord": EffectRecord}
    for name in _EFFECT_FIELDS:
        scope[f"_set_{name}"] = EffectRecord.__dict__[name].__set__
    exec("\n".join(lines), scope)  # the text is built from the field names alone
    replace = scope["replace"]
    replace.__doc__ = EffectRecord.replace.__doc__
    replace.__qualname__ = "EffectRecord.replace"
    return replace


EffectRecord.replace = _compile_replace()  # type: ignore[method-assign]


class EffectPayload(NamedTuple):
    """An effect's type, request and (when asked for) result, nothing else: what a view
    reads to learn the values it masks (:meth:`Ledger.list_effect_payloads`)."""

    effect_type: str
    request: Any
    result: Any


@slot_init
@dataclass(frozen=True, slots=True)
class StepCommit:
    """Everything one durable step writes, in ONE transaction.

    The store must: check ``ThreadRecord.version == expected_version`` (0 = no thread
    yet) and raise ``StaleStateError`` writing nothing otherwise; if ``fence`` is set,
    check the run's ``fencing_token`` and raise ``LeaseLostError`` writing nothing on a
    mismatch; then insert ``new_run`` (if any), insert ``checkpoint`` and ``log``
    entries, move the thread head to ``checkpoint`` with version ``expected_version + 1``,
    apply ``run_status`` / ``run_error`` to ``checkpoint.run_id``, insert ``intents``
    (the pending records of calls the next step will make; an effect id that exists is
    left as it is), save ``effects`` (folded effect results) and delete the task writes
    of ``clear_task_writes_of``.
    """

    thread_id: str
    expected_version: int
    checkpoint: CheckpointRecord
    log: Sequence[LogEntry] = ()
    new_run: RunRecord | None = None
    run_status: RunStatus | None = None
    run_error: str | None = None
    effects: Sequence[EffectRecord] = ()
    clear_task_writes_of: str | None = None
    intents: Sequence[EffectRecord] = ()
    fence: int | None = None

    def __post_init__(self) -> None:
        _keep_describable(self, "run_error")


@dataclass(frozen=True, slots=True, repr=False)
class AuditRecord(MaskedRepr):
    """One operator action or interrupt answer, kept forever (guarantee 14).

    Stores only insert these: no API updates or deletes one, and a prune never touches
    them. ``details`` is JSON: what changed (``before``/``after`` statuses), the options
    the actor chose, never an unmasked payload.
    """

    audit_id: str
    actor: str
    action: str  # continue | resolve_effect | redeliver | replay | branch | abandon | answer
    target_kind: str  # run | effect | thread
    target_id: str
    run_id: str | None = None
    thread_id: str | None = None
    reason: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)
    at: float = field(default_factory=now)

    def __post_init__(self) -> None:
        _keep_describable(self, "reason", "actor")


AUDIT_FIELDS = (
    "audit_id",
    "at",
    "actor",
    "action",
    "target_kind",
    "target_id",
    "run_id",
    "thread_id",
    "reason",
    "details",
)
""":class:`AuditRecord`'s fields in the order they are stored (the audit table's columns)
and chained (the MAC's input, :mod:`oncegraph.storage.auditchain`): never reorder them, a
chain written before would no longer verify."""

audit_values: Callable[[AuditRecord], tuple[Any, ...]] = attrgetter(*AUDIT_FIELDS)
"""An audit record's values in :data:`AUDIT_FIELDS` order."""


@dataclass(frozen=True, slots=True)
class PruneReport:
    """What one retention prune deleted, counted per table.

    ``threads`` is how many threads were examined. Log rows are never deleted by a
    prune (a kept checkpoint names a prefix of each log, and the head names all of it),
    and neither are threads or runs, so they have no count here.
    """

    threads: int = 0
    checkpoints: int = 0
    task_writes: int = 0
    effects: int = 0

    def plus(self, other: PruneReport) -> PruneReport:
        return PruneReport(
            threads=self.threads + other.threads,
            checkpoints=self.checkpoints + other.checkpoints,
            task_writes=self.task_writes + other.task_writes,
            effects=self.effects + other.effects,
        )


# Effects a prune may delete: final outcomes of runs that will never run again.
PRUNABLE_EFFECT_STATUSES = (EffectStatus.COMPLETED, EffectStatus.FAILED)
PRUNABLE_EFFECT_RUN_STATUSES = (RunStatus.COMPLETED, RunStatus.ABANDONED)


def fold_of(
    thread_id: str | None, run_id: str | None, after_version: int
) -> tuple[str, int] | None:
    """Check a prune's fold arguments (``run_id``, ``after_version``): ``(run_id,
    after_version)`` for a fold, None for a plain prune. Raises ConfigError naming the fix."""
    if run_id is None:
        return None
    if thread_id is None:
        raise ConfigError("a fold (prune with run_id=) takes one thread: pass thread_id= as well")
    if isinstance(after_version, bool) or not isinstance(after_version, int) or after_version < 0:
        raise ConfigError(f"after_version must be an int >= 0; got {after_version!r}")
    return run_id, after_version


def prune_effects_cutoff(keep_checkpoints: int, effects_older_than: float | None) -> float | None:
    """Check the arguments of a prune; the ``updated_at`` an effect must be older than
    to be deleted (``None``: effects are not pruned). Raises ConfigError naming the fix."""
    if isinstance(keep_checkpoints, bool) or not isinstance(keep_checkpoints, int):
        raise ConfigError(f"keep_checkpoints must be an int >= 1; got {keep_checkpoints!r}")
    if keep_checkpoints < 1:
        raise ConfigError(
            f"keep_checkpoints must be >= 1 (the head is always kept; 1 keeps only the head "
            f"and the checkpoints of unfinished runs); got {keep_checkpoints}"
        )
    if effects_older_than is None:
        return None
    if effects_older_than < 0:
        raise ConfigError(
            f"effects_older_than is an age in seconds and must be >= 0; got {effects_older_than}"
        )
    return now() - float(effects_older_than)
