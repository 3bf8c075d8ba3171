"""Retention: deleting checkpoints and finished effect records no open run needs, through
the store's :class:`~oncegraph.storage.protocols.Pruner` (the run service's ``prune``)."""

from __future__ import annotations

from oncegraph.errors import ConfigError
from oncegraph.runs.context import RunContext
from oncegraph.storage.protocols import Pruner
from oncegraph.storage.records import PruneReport


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


__all__ = ["prune"]
