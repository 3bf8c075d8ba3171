"""The run service's listings (runs and effect records) and its operator view of one run.

Each takes the narrow :class:`~oncegraph.runs.context.RunContext`: listings are filtered
in the store's query by the context's scope (guarantee 15), and what they return is
masked (guarantee 14): a run's input and error, an effect's masked fields.
"""

from __future__ import annotations

from collections.abc import Sequence

from oncegraph.errors import ConfigError, RunNotFoundError
from oncegraph.runs.context import RunContext
from oncegraph.runs.masking import Masker
from oncegraph.runs.scope import listed_in
from oncegraph.runtime.config import lookup_id
from oncegraph.storage.records import EffectRecord, EffectStatus, RunRecord, RunStatus

EFFECTS_PAGE = 500
"""Effect records an ``effects()`` listing returns unless asked for another ``limit``."""


async def runs(
    ctx: RunContext,
    *,
    thread_id: str | None = None,
    statuses: Sequence[RunStatus] | None = None,
    limit: int = 100,
    tenant: str | None = None,
    parent_run_id: str | None = None,
    before: str | RunRecord | None = None,
) -> list[RunRecord]:
    """Runs newest first: this app's only (a tenant-bound service: its tenant's only);
    ``tenant`` filters an unbound service's listing by tenant; ``parent_run_id``
    lists the runs made from that run (its replays and branches); ``before`` (a run,
    or its id: a page's last) lists the runs after it, the next page."""
    if thread_id is not None:
        thread_id = lookup_id("thread_id", thread_id)
    await ctx.setup()
    found = await ctx.store.list_runs(
        thread_id=thread_id,
        statuses=statuses,
        limit=limit,
        **listed_in(ctx.scope, tenant),
        parent_run_id=parent_run_id,
        before=None if before is None else await _position(ctx, before),
    )
    masker = await ctx.masker(thread_ids={r.thread_id for r in found})
    return [masker.run(r) for r in found]  # inputs and errors masked


async def _position(ctx: RunContext, before: str | RunRecord) -> tuple[float, str]:
    """Where a listing goes on after ``before`` (a run, or its id): the stored run's
    ``(created_at, run_id)`` (a page's last run names it, masked or not), refused
    for a run the context may not see (guarantee 15), as an unknown run is."""
    run_id = before.run_id if isinstance(before, RunRecord) else before
    if not isinstance(run_id, str) or not run_id:
        raise ConfigError(f"before must be a run or a run id (a page's last run); got {before!r}")
    run = await ctx.store.get_run(run_id)
    if run is None:
        raise RunNotFoundError(
            f"no run {run_id!r} to list runs after (before=...); it may have been "
            "pruned: list from the newest again (no before)"
        )
    ctx.check_run(run)
    return run.created_at, run.run_id


async def run_view(ctx: RunContext, run_id: str) -> RunRecord:
    """:meth:`get_run` as an operator sees it (input and error masked); the run
    service's own reads use :meth:`get_run`."""
    run = await ctx.get_run(run_id)
    return (await ctx.masker(thread_ids=(run.thread_id,))).run(run)


def _check_page(limit: int | None, offset: int) -> None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ConfigError(f"limit must be a non-negative integer or None; got {limit!r}")
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ConfigError(f"offset must be a non-negative integer; got {offset!r}")


async def effects(
    ctx: RunContext,
    *,
    run_id: str | None = None,
    thread_id: str | None = None,
    statuses: Sequence[EffectStatus] | None = None,
    tenant: str | None = None,
    limit: int | None = EFFECTS_PAGE,
    offset: int = 0,
    masked: bool = True,
) -> list[EffectRecord]:
    """Effect records, oldest first, with each tool's ``mask=[...]`` fields masked;
    only those of this app's runs (of its tenant's, when bound to one); ``limit`` of
    them (``None``: all) from ``offset`` on."""
    if run_id is None and thread_id is None:
        raise ConfigError("effects() needs run_id=... or thread_id=...")
    _check_page(limit, offset)
    await ctx.setup()
    if run_id is not None:
        await ctx.get_run(run_id)  # another app's run is refused, not listed empty
    elif thread_id is not None:
        await ctx.check_thread(thread_id)
    records = await ctx.store.list_effects(
        run_id=run_id,
        thread_id=thread_id,
        statuses=statuses,
        **listed_in(ctx.scope, tenant),
        limit=limit,
        offset=offset,
    )
    if not masked:  # an admin's view (the caller decides who may see payloads)
        return records
    partial = statuses is not None or offset > 0 or (limit is not None and len(records) >= limit)
    if partial:  # every effect of the listing's scope tells its secrets
        masker = await ctx.masker(
            thread_ids=() if thread_id is None else (thread_id,),
            run_ids=() if run_id is None or thread_id is not None else (run_id,),
        )
    else:
        masker = Masker(ctx.masks).learn_effects(records)
    return [masker.effect(r) for r in records]


__all__ = ["EFFECTS_PAGE", "effects", "run_view", "runs"]
