"""The operator views of a run service: its runs, one run, their effects, a thread's
state and history, the effect log, and the masker every view goes through.

Each is written once in the module that owns it (:mod:`oncegraph.runs.listing`,
:mod:`oncegraph.runs.reading`, :mod:`oncegraph.runs.effectlog`) over the service's
:class:`~oncegraph.runs.context.RunContext`, so every view is in the service's scope and
masked; :class:`~oncegraph.runs.service.RunService` has them from here.
"""

from __future__ import annotations

from collections.abc import Iterable

from oncegraph.runs import listing, reading
from oncegraph.runs.context import RunContext
from oncegraph.runs.doors import door, iterating_door
from oncegraph.runs.effectlog import EffectLog, EffectQuery, effect_log
from oncegraph.runs.masking import Masker
from oncegraph.storage.records import RunRecord


class ServiceViews:
    """What a run service shows (see the module docstring); the service's ``context``
    is what each view reads."""

    context: RunContext

    runs = door(None, listing.runs)
    run_view = door(None, listing.run_view)
    effects = door(None, listing.effects)
    get_state = door(None, reading.stored_state)

    async def effect_log(self, query: EffectQuery | None = None) -> EffectLog:
        """The effect log across runs, newest first, masked, with the counts of effects
        that need review and that are pending (:mod:`oncegraph.runs.effectlog`)."""
        await self.context.setup()

        async def masker(thread_ids: Iterable[str]) -> Masker:
            return await self.masker(thread_ids=thread_ids)

        return await effect_log(
            self.context.store, self.context.scope, query or EffectQuery(), masker
        )

    history = iterating_door(reading.stored_history)

    async def get_run(self, run_id: str) -> RunRecord:
        """The stored run ``run_id`` (unmasked: the service's own reads), in scope."""
        return await self.context.get_run(run_id)

    async def masker(
        self, *, thread_ids: Iterable[str] = (), run_ids: Iterable[str] = ()
    ) -> Masker:
        """A :class:`~oncegraph.runs.masking.Masker` that knows the masked values of every
        effect of these threads and runs (what a view of them must not show)."""
        return await self.context.masker(thread_ids=thread_ids, run_ids=run_ids)


__all__ = ["ServiceViews"]
