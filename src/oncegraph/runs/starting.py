"""Driving a run from its start: a new run's input committed and driven, a queued run's
first step (or, if it started, its going on), for the run service's ``run`` and
``execute``. Each takes the narrow :class:`~oncegraph.runs.context.RunContext`."""

from __future__ import annotations

from oncegraph.errors import ConfigError
from oncegraph.runs import claims, creating
from oncegraph.runs.context import RunContext, RunResult
from oncegraph.runs.launch import Launch
from oncegraph.runtime.config import RunConfig
from oncegraph.runtime.driver import Driver, Emit
from oncegraph.runtime.engine import Head
from oncegraph.runtime.failures import moved_on_error
from oncegraph.storage.records import RunRecord, RunStatus, ThreadRecord


def refuse_old_checkpoint(cfg: RunConfig, thread: ThreadRecord | None) -> None:
    """A config naming a checkpoint other than the thread's head is refused: running
    from an old checkpoint is a new run (a replay or a branch), never a silent one."""
    wanted = cfg.configurable.get("checkpoint_id")
    if wanted and (thread is None or thread.head_checkpoint_id != wanted):
        raise ConfigError(
            "config names a checkpoint_id: running from an old checkpoint is not a "
            "continue (a replay is a new run), and it never runs live silently. Create "
            "a new run from it with app.replay(run_id, checkpoint_id=..., "
            "mode='evidence' | 'simulation' | 'live', reason=..., actor=...), or with a "
            "changed state with "
            "app.branch(run_id, checkpoint_id, patch=..., reason=..., actor=...) / "
            "app.update_state(config, values)"
        )


async def begin(
    ctx: RunContext,
    run: RunRecord,
    thread: ThreadRecord | None,
    cfg: RunConfig,
    emit: Emit,
    launch: Launch | None,
) -> RunResult:
    """Create new run ``run`` on its thread (``thread``: its row as read, whose version
    the input's commit checks), commit its input and drive it; ``launch``'s start is in
    the audit log before the first node runs."""
    if launch is not None and launch.run_id and await ctx.store.get_run(run.run_id):
        raise ConfigError(  # the store refuses it too; this says why, on every store
            f"run {run.run_id} exists already: Launch(run_id=...) names a NEW run (a "
            "fresh oncegraph.ids.new_run_id()); nothing was started"
        )
    async with claims.new(ctx.store, run) as claim:
        driver = ctx.make_driver(cfg, emit, claim)
        # the thread row read before: its version is checked by the commit (a run that
        # started on the thread meanwhile makes it a StaleStateError, as before)
        head = await driver.commit_input(await ctx.heads.at(run.thread_id, thread), run, new=True)
        if launch is not None:  # before its first node runs
            await ctx.store.append_audit(creating.start_audit(launch, run))
        return await ctx.drive(driver, head, run)


async def start_or_go_on(
    ctx: RunContext, driver: Driver, run: RunRecord, head: Head | None = None
) -> RunResult:
    """Start ``run`` (a queued run: its input first) or go on from its head (``head``:
    just read under the claim; else read here)."""
    if head is None:
        head = await ctx.heads.load(run.thread_id)
    if head.checkpoint.run_id != run.run_id:  # queued: it never started
        if await ctx.store.list_checkpoints(run.thread_id, run_id=run.run_id, limit=1):
            # it did start, and another run's steps came after its own: going on from
            # there would redo its work on that run's state (a lost compare-and-swap)
            error = moved_on_error(run.run_id, run.thread_id, "it cannot go on")
            await driver.set_status(run, RunStatus.FAILED, str(error))
            raise error
        head = await driver.commit_input(head, run, new=False)
    return await ctx.drive(driver, head, run)


__all__ = ["begin", "refuse_old_checkpoint", "start_or_go_on"]
