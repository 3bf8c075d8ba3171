"""Runs a dead process left ``running``: what a recovery pass takes over.

A run that a process executes holds its liveness lock (guarantee 13), an OS file lock or a
PostgreSQL session lock that dies with the process; a worker's run also has a lease,
and the workers' claim takes an expired lease over (:mod:`oncegraph.worker.queue`).
A run that is ``running`` WITHOUT a lease was started in a process (``invoke``, the
HTTP server): once that process is gone, nobody holds its lock and nothing would go on
with it. :func:`left_running` finds these runs of one service's app.

The lock decides, never a timer: a run is listed only if its lock could be taken at
that moment (it is let go at once), and the Continue that then takes it over
(:meth:`~oncegraph.runs.commands.Commands.resume`, through
:func:`~oncegraph.runs.claims.take`) takes the lock again first, so a run that a live
process took meanwhile is refused (``RunBusyError``) and nothing is done to it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection
from typing import TYPE_CHECKING

from oncegraph.runs.scope import listing_filters
from oncegraph.storage.records import RunRecord, RunStatus

if TYPE_CHECKING:
    from oncegraph.runs.context import RunContext

PAGE = 500


async def left_running(
    ctx: RunContext, *, skip: Collection[str] = (), page: int = PAGE
) -> AsyncIterator[RunRecord]:
    """This context's app's runs (its tenant's, when bound) that are ``running`` with no
    lease and whose liveness lock nobody holds, oldest last; ``skip``: run ids not to
    look at (those this process executes)."""
    await ctx.setup()
    store = ctx.store
    app_id, tenant = listing_filters(ctx.scope, None)
    before: tuple[float, str] | None = None
    while True:
        found = await store.list_runs(
            statuses=[RunStatus.RUNNING], limit=page, app_id=app_id, tenant=tenant, before=before
        )
        for run in found:
            if run.run_id in skip or run.lease_expires_at is not None:
                continue  # ours, or a worker's: its lease says when it may be taken
            lock = await store.lock_run(run.run_id)
            if lock is None:
                continue  # a live process holds it
            await lock.release()
            yield run
        if len(found) < page:
            return
        before = (found[-1].created_at, found[-1].run_id)


__all__ = ["left_running"]
