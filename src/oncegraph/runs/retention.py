"""Retention: deleting checkpoints and finished effect records no open run needs
(:func:`prune`, the run service's ``prune``, through the store's
:class:`~oncegraph.storage.protocols.Pruner`), and what such a prune would take from
replays (:func:`replay_losses`, read only).

A prune deletes, per thread, the checkpoints older than the newest ``keep`` that are not
the head and whose run is finished, and (with ``effects_older_than``) the finished effect
records of completed or abandoned runs last updated before the cutoff. Run records and the
audit log stay, so the run is still listed, and still offered for a replay; but a replay
starts from the run's own checkpoints and an evidence replay serves the run's recorded
effects, so a run that loses either cannot be replayed. :func:`replay_losses` names those
runs by the same rule the store deletes by, before anything is deleted: the CLI refuses
such a prune unless told.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from oncegraph.errors import ConfigError
from oncegraph.runs.context import RunContext
from oncegraph.storage.protocols import Checkpointer, Pruner
from oncegraph.storage.records import (
    PRUNABLE_EFFECT_RUN_STATUSES,
    PRUNABLE_EFFECT_STATUSES,
    UNFINISHED_STATUSES,
    PruneReport,
    RunStatus,
    prune_effects_cutoff,
)

RUNS_PAGE = 500


async def prune(
    ctx: RunContext,
    *,
    keep_checkpoints: int = 1,
    effects_older_than: float | None = None,
    thread_id: str | None = None,
) -> PruneReport:
    """Retention: delete checkpoints and finished effect records no open run needs.

    Delegates to the store's :meth:`~oncegraph.storage.protocols.Pruner.prune` (the
    head, the newest ``keep_checkpoints`` and unfinished runs' checkpoints stay; log
    entries are never deleted); ``effects_older_than`` is in seconds; ``thread_id``
    (one of this service's threads) prunes that thread only."""
    store = ctx.store
    if not isinstance(store, Pruner):
        raise ConfigError(
            f"{type(store).__name__} cannot prune (it has no prune() method); use "
            "InMemoryCheckpointer, SqliteCheckpointer or PgCheckpointer, or add "
            "prune() (oncegraph.storage.protocols.Pruner) to your store"
        )
    await ctx.setup()
    if thread_id is not None:
        await ctx.check_thread(thread_id)
    return await store.prune(
        keep_checkpoints=keep_checkpoints,
        effects_older_than=effects_older_than,
        thread_id=thread_id,
    )


@dataclass(frozen=True, slots=True)
class ReplayLoss:
    """The runs a prune would leave unreplayable, by what they would lose."""

    checkpoints: dict[str, int] = field(default_factory=dict)  # run id -> checkpoints lost
    effects: dict[str, int] = field(default_factory=dict)  # run id -> effect records lost

    @property
    def runs(self) -> list[str]:
        return sorted(set(self.checkpoints) | set(self.effects))


async def replay_losses(
    store: Checkpointer,
    *,
    keep_checkpoints: int = 1,
    effects_older_than: float | None = None,
    thread_id: str | None = None,
    on_thread: Callable[[str], None] | None = None,
) -> ReplayLoss:
    """The runs whose replay a prune with these arguments would break (see the module
    docstring); ``on_thread`` is told each thread as it is looked at."""
    cutoff = prune_effects_cutoff(keep_checkpoints, effects_older_than)
    loss = ReplayLoss()
    statuses: dict[str, RunStatus | None] = {}

    async def status(run_id: str) -> RunStatus | None:
        if run_id not in statuses:
            run = await store.get_run(run_id)
            statuses[run_id] = None if run is None else run.status
        return statuses[run_id]

    threads = [thread_id] if thread_id is not None else await _threads(store)
    for tid in threads:
        if on_thread is not None:
            on_thread(tid)
        thread = await store.get_thread(tid)
        if thread is None:
            continue
        for cp in await store.list_checkpoints(tid):
            if cp.version > thread.version - keep_checkpoints:
                continue
            if cp.checkpoint_id == thread.head_checkpoint_id:
                continue
            if await status(cp.run_id) in UNFINISHED_STATUSES:
                continue
            loss.checkpoints[cp.run_id] = loss.checkpoints.get(cp.run_id, 0) + 1
        if cutoff is None:
            continue
        for effect in await store.list_effects(thread_id=tid, statuses=PRUNABLE_EFFECT_STATUSES):
            if effect.updated_at >= cutoff:
                continue
            if await status(effect.run_id) not in PRUNABLE_EFFECT_RUN_STATUSES:
                continue
            loss.effects[effect.run_id] = loss.effects.get(effect.run_id, 0) + 1
    return loss


async def _threads(store: Checkpointer) -> list[str]:
    """Every thread with a run, from the runs listing (newest run first)."""
    seen: dict[str, None] = {}
    before: tuple[float, str] | None = None
    while True:
        page = await store.list_runs(limit=RUNS_PAGE, before=before)
        for run in page:
            seen.setdefault(run.thread_id, None)
        if len(page) < RUNS_PAGE:
            return list(seen)
        before = (page[-1].created_at, page[-1].run_id)


__all__ = ["ReplayLoss", "prune", "replay_losses"]
