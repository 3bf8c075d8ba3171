"""The frozen values the store protocols' long keyword doors hand to a store.

A listing's filters, a retention policy, a takeover's terms travel together: each door
(``list_runs``, ``list_effects``, ``prune``, ...: :mod:`oncegraph.storage.protocols`, where
each is documented and written once) takes the keywords and hands ONE value of them to the
store's hook (:class:`oncegraph.storage.doors.StoreDoors`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from oncegraph.storage.records import (
    AuditRecord,
    EffectStatus,
    PruneReport,
    RunStatus,
    fold_of,
    prune_effects_cutoff,
)


@dataclass(frozen=True, slots=True)
class CheckpointQuery:
    """``list_checkpoints``' arguments."""

    thread_id: str
    run_id: str | None = None
    limit: int | None = None
    before_version: int | None = None


@dataclass(frozen=True, slots=True)
class RunQuery:
    """``list_runs``' filters and page."""

    thread_id: str | None = None
    statuses: Sequence[RunStatus] | None = None
    limit: int = 100
    app_id: str | None = None
    tenant: str | None = None
    parent_run_id: str | None = None
    before: tuple[float, str] | None = None


@dataclass(frozen=True, slots=True)
class Takeover:
    """``fence_run``'s terms: the token expected, the new holder, what else to set."""

    expected_token: int
    owner: str | None
    status: RunStatus | None = None
    error: str | None = None
    audit: AuditRecord | None = None


@dataclass(frozen=True, slots=True)
class EffectQuery:
    """``list_effects``' filters and page."""

    run_id: str | None = None
    thread_id: str | None = None
    statuses: Sequence[EffectStatus] | None = None
    app_id: str | None = None
    tenant: str | None = None
    limit: int | None = None
    offset: int = 0


@dataclass(frozen=True, slots=True)
class PayloadQuery:
    """``list_effect_payloads``' filters."""

    run_id: str | None = None
    thread_id: str | None = None
    results: bool = True
    thread_ids: Sequence[str] | None = None


@dataclass(frozen=True, slots=True)
class AuditQuery:
    """``list_audit``'s filters and page."""

    run_id: str | None = None
    thread_id: str | None = None
    target_id: str | None = None
    before: float | tuple[float, str] | None = None
    limit: int = 100
    app_id: str | None = None
    tenant: str | None = None


@dataclass(frozen=True, slots=True)
class PrunePolicy:
    """``prune``'s retention policy and what to report to."""

    keep_checkpoints: int = 1
    effects_older_than: float | None = None
    thread_id: str | None = None
    dry_run: bool = False
    on_thread: Callable[[PruneReport], None] | None = None
    run_id: str | None = None  # with after_version: a run's fold (see Pruner.prune)
    after_version: int = 0

    def terms(self) -> PruneTerms:
        """The policy checked (ConfigError naming the fix) into what one thread's prune
        takes."""
        cutoff = prune_effects_cutoff(self.keep_checkpoints, self.effects_older_than)
        fold = fold_of(self.thread_id, self.run_id, self.after_version)
        if fold is not None:
            cutoff = None  # a fold deletes no effect record
        return PruneTerms(self.keep_checkpoints, cutoff, self.dry_run, fold)


@dataclass(frozen=True, slots=True)
class PruneTerms:
    """One thread's prune, as every store runs it: keep the newest ``keep`` checkpoints
    (and the head, and those of unfinished runs); delete finished effect records last
    updated before ``cutoff`` (None: none); ``dry_run``: count only; ``fold``: the run and
    the version its call started from (see :meth:`~oncegraph.storage.protocols.Pruner.prune`).
    """

    keep: int
    cutoff: float | None
    dry_run: bool
    fold: tuple[str, int] | None


__all__ = [
    "AuditQuery",
    "CheckpointQuery",
    "EffectQuery",
    "PayloadQuery",
    "PrunePolicy",
    "PruneTerms",
    "RunQuery",
    "Takeover",
]
