"""The store protocols' long keyword doors, written once for every bundled store.

A listing's filters, a retention policy, a takeover's terms travel together: each door
of :class:`StoreDoors` (``list_runs``, ``list_effects``, ``prune``, ...) takes the
keywords the protocol names (:mod:`oncegraph.storage.protocols`, where each is
documented) and hands ONE frozen value of them to the store's hook (``_list_runs``,
``_list_effects``, ``_prune``, ...). The memory store and the SQL store implement the
hooks; the signatures and their defaults live here and in the protocol only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from oncegraph.storage.records import (
    AuditRecord,
    CheckpointRecord,
    EffectPayload,
    EffectRecord,
    EffectStatus,
    PruneReport,
    RunRecord,
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


class StoreDoors:
    """The keyword doors; a store implements the hooks below them."""

    async def list_checkpoints(
        self,
        thread_id: str,
        *,
        run_id: str | None = None,
        limit: int | None = None,
        before_version: int | None = None,
    ) -> list[CheckpointRecord]:
        return await self._list_checkpoints(
            CheckpointQuery(thread_id, run_id, limit, before_version)
        )

    async def update_run(
        self,
        run_id: str,
        *,
        status: RunStatus,
        error: str | None = None,
        fence: int | None = None,
    ) -> None:
        await self._update_run(run_id, status, error, fence)

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
        query = RunQuery(thread_id, statuses, limit, app_id, tenant, parent_run_id, before)
        return await self._list_runs(query)

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
        return await self._fence_run(run_id, Takeover(expected_token, owner, status, error, audit))

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
        query = EffectQuery(run_id, thread_id, statuses, app_id, tenant, limit, offset)
        return await self._list_effects(query)

    async def list_effect_payloads(
        self,
        *,
        run_id: str | None = None,
        thread_id: str | None = None,
        results: bool = True,
        thread_ids: Sequence[str] | None = None,
    ) -> list[EffectPayload]:
        query = PayloadQuery(run_id, thread_id, results, thread_ids)
        return await self._list_effect_payloads(query)

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
        query = AuditQuery(run_id, thread_id, target_id, before, limit, app_id, tenant)
        return await self._list_audit(query)

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
        policy = PrunePolicy(
            keep_checkpoints,
            effects_older_than,
            thread_id,
            dry_run,
            on_thread,
            run_id,
            after_version,
        )
        return await self._prune(policy)

    # -- the hooks a store implements ------------------------------------------------

    async def _list_checkpoints(self, q: CheckpointQuery) -> list[CheckpointRecord]:
        raise NotImplementedError  # pragma: no cover - every store defines it

    async def _update_run(
        self, run_id: str, status: RunStatus, error: str | None, fence: int | None
    ) -> None:
        raise NotImplementedError  # pragma: no cover - every store defines it

    async def _list_runs(self, q: RunQuery) -> list[RunRecord]:
        raise NotImplementedError  # pragma: no cover - every store defines it

    async def _fence_run(self, run_id: str, t: Takeover) -> RunRecord | None:
        raise NotImplementedError  # pragma: no cover - every store defines it

    async def _list_effects(self, q: EffectQuery) -> list[EffectRecord]:
        raise NotImplementedError  # pragma: no cover - every store defines it

    async def _list_effect_payloads(self, q: PayloadQuery) -> list[EffectPayload]:
        raise NotImplementedError  # pragma: no cover - every store defines it

    async def _list_audit(self, q: AuditQuery) -> list[AuditRecord]:
        raise NotImplementedError  # pragma: no cover - every store defines it

    async def _prune(self, p: PrunePolicy) -> PruneReport:
        raise NotImplementedError  # pragma: no cover - every store defines it


__all__ = [
    "AuditQuery",
    "CheckpointQuery",
    "EffectQuery",
    "PayloadQuery",
    "PrunePolicy",
    "PruneTerms",
    "RunQuery",
    "StoreDoors",
    "Takeover",
]
