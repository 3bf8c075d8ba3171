"""Giving up on a run: an operator's abandon and a submitter's cancel of a queued run,
each a compare-and-set on the run's fencing token, kept in the audit log.

Both take the narrow :class:`~oncegraph.runs.context.RunContext` (the run service's
``abandon`` and ``cancel`` are their doors). :func:`give_up` is the abandon itself, which
an update that ends a waiting run and a time travel that supersedes an edit use too.
"""

from __future__ import annotations

from oncegraph.errors import RunNotFoundError, RunStateError
from oncegraph.runs import audits, claims
from oncegraph.runs.claims import Check
from oncegraph.runs.context import RunContext
from oncegraph.runs.lifecycle import FINAL_STATUSES
from oncegraph.storage.records import AuditRecord, RunRecord, RunStatus


async def abandon(
    ctx: RunContext,
    thread_id: str,
    *,
    reason: str = "abandoned",
    actor: str = "operator",
    run_id: str | None = None,
) -> RunRecord:
    """Give up on the thread's unfinished run (``run_id``: that run of the thread, say
    one that stopped because another run of the thread moved on); new input may
    follow. Nothing is deleted.

    The operator's decision wins: the run's token is bumped, so a process still
    working on it is fenced out (its next write fails, it starts no new attempt)."""
    await ctx.setup()
    latest = await ctx.check_thread(thread_id)
    if run_id is not None:
        latest = await ctx.run_on(thread_id, run_id)

    def unfinished(run: RunRecord | None) -> RunRecord:
        if run is None or run.status in FINAL_STATUSES:
            raise RunNotFoundError(f"thread {thread_id!r} has no unfinished run to abandon")
        return run

    run = unfinished(latest)
    audit = audits.for_run(
        run, "abandon", actor=actor, reason=reason, details={"before": str(run.status)}
    )
    return await give_up(ctx, run, unfinished, by="operator", error=reason, audit=audit)


async def give_up(
    ctx: RunContext, run: RunRecord, check: Check, *, by: str, error: str, audit: AuditRecord
) -> RunRecord:
    """``run`` abandoned at ``by``'s word (an operator, an update, a time travel), as
    ``check`` still finds it, with ``error`` and ``audit``: an overrule
    (:func:`~oncegraph.runs.claims.overrule`), so a process still working on it is
    fenced out."""
    return await claims.overrule(
        ctx.store,
        run.run_id,
        owner=f"{by}:{ctx.owner}",
        status=RunStatus.ABANDONED,
        error=error,
        check=check,
        audit=audit,
    )


async def cancel(
    ctx: RunContext, run_id: str, *, reason: str = "cancelled", actor: str = "submitter"
) -> RunRecord:
    """Abandon queued run ``run_id`` if no worker has claimed it yet: a compare-and-set
    on its fencing token while it is ``queued`` (a worker's claim bumps the token, so
    a run a worker took is never abandoned under it: that is :meth:`abandon`), kept in
    the audit log with its actor and reason."""
    run = await ctx.get_run(run_id)
    for _ in range(3):  # a claim and a release may move the token between read and CAS
        if run.status is not RunStatus.QUEUED:
            break
        taken = await ctx.store.fence_run(
            run.run_id,
            expected_token=run.fencing_token,
            owner=None,
            status=RunStatus.ABANDONED,
            error=reason,
            audit=audits.for_run(
                run, "cancel", actor=actor, reason=reason, details={"before": str(run.status)}
            ),
        )
        if taken is not None:
            return taken
        run = await ctx.get_run(run_id)  # a worker claimed it meanwhile
    raise RunStateError(
        f"run {run.run_id} cannot be cancelled: it is {run.status}, not queued (a worker "
        "has claimed it, or it has ended). A running run is stopped by an operator: "
        "app.abandon(config, reason=...) fences the worker out."
    )


__all__ = ["abandon", "cancel", "give_up"]
