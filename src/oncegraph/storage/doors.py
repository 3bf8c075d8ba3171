"""The hooks the store protocols' keyword doors call, for the stores that inherit them.

Each door (:class:`~oncegraph.storage.protocols.RunDoors`,
:class:`~oncegraph.storage.protocols.EffectDoors`,
:class:`~oncegraph.storage.protocols.AuditDoors`,
:class:`~oncegraph.storage.protocols.Pruner`) takes the keywords its protocol names and
hands ONE frozen value of them (:mod:`oncegraph.storage.queries`) to a hook below. The
memory store and the SQL store inherit :class:`StoreDoors` and implement the hooks; the
signatures and their defaults live in the protocols only.
"""

from __future__ import annotations

from oncegraph.storage import queries as Q
from oncegraph.storage.protocols import AuditDoors, EffectDoors, Pruner, RunDoors
from oncegraph.storage.records import (
    AuditRecord,
    CheckpointRecord,
    EffectPayload,
    EffectRecord,
    PruneReport,
    RunRecord,
    RunStatus,
)


class StoreDoors(RunDoors, EffectDoors, AuditDoors, Pruner):
    """The keyword doors, inherited; a store implements the hooks they call."""

    async def _list_checkpoints(self, q: Q.CheckpointQuery) -> list[CheckpointRecord]:
        raise NotImplementedError  # pragma: no cover - every store defines it

    async def _update_run(
        self, run_id: str, status: RunStatus, error: str | None, fence: int | None
    ) -> None:
        raise NotImplementedError  # pragma: no cover - every store defines it

    async def _list_runs(self, q: Q.RunQuery) -> list[RunRecord]:
        raise NotImplementedError  # pragma: no cover - every store defines it

    async def _fence_run(self, run_id: str, t: Q.Takeover) -> RunRecord | None:
        raise NotImplementedError  # pragma: no cover - every store defines it

    async def _list_effects(self, q: Q.EffectQuery) -> list[EffectRecord]:
        raise NotImplementedError  # pragma: no cover - every store defines it

    async def _list_effect_payloads(self, q: Q.PayloadQuery) -> list[EffectPayload]:
        raise NotImplementedError  # pragma: no cover - every store defines it

    async def _list_audit(self, q: Q.AuditQuery) -> list[AuditRecord]:
        raise NotImplementedError  # pragma: no cover - every store defines it

    async def _prune(self, p: Q.PrunePolicy) -> PruneReport:
        raise NotImplementedError  # pragma: no cover - every store defines it


__all__ = ["StoreDoors"]
