"""New run records: what a start or a submit writes (its input as stored, its graph's
identity, its scope), and a queued run for the workers (the run service's ``submit``)."""

from __future__ import annotations

from typing import Any

from oncegraph.errors import ConfigError
from oncegraph.graph.io import input_update
from oncegraph.graph.spec import GraphSpec
from oncegraph.hitl.command import Command
from oncegraph.ids import new_run_id
from oncegraph.runs import audits
from oncegraph.runs.context import RunContext
from oncegraph.runs.launch import LAUNCH_KEY, Launch
from oncegraph.runs.lifecycle import thread_of
from oncegraph.runtime.config import RunConfig
from oncegraph.storage.records import AuditRecord, RunRecord, RunStatus
from oncegraph.versioning import GraphIdentity


def new_run(
    ctx: RunContext,
    identity: GraphIdentity,
    shape: Any,
    thread_id: str,
    input: Any,
    cfg: RunConfig,
    *,
    status: RunStatus,
    reason: str = "invoke",
    launch: Launch | None = None,
) -> RunRecord:
    """The record of a new run of the context's graph (``shape``: the state's shape the
    version gate keeps with it), not yet written."""
    spec = ctx.graph
    config = {**cfg.to_json(), "shape": shape}
    if launch is not None:
        config[LAUNCH_KEY] = launch.info()
    return RunRecord(
        run_id=launch.run_id if launch is not None and launch.run_id else new_run_id(),
        thread_id=thread_id,
        status=status,
        workflow_name=identity.name,
        workflow_version=identity.version,
        state_schema_version=identity.state_schema_version,
        graph_fingerprint=identity.fingerprint,
        launch_reason=reason,
        # no input (a time-travel run that continues a checkpoint): nothing to encode
        input=None if input is None else input_json(input, spec),
        config=config,
        lease_owner=ctx.owner if status is RunStatus.RUNNING else None,
        fencing_token=1 if status is RunStatus.RUNNING else 0,
        app_id=ctx.scope.app_id if ctx.scope is not None else spec.name,
        tenant=ctx.scope.tenant if ctx.scope is not None else None,
    )


async def submit(
    ctx: RunContext, identity: GraphIdentity, shape: Any, input: Any, cfg: RunConfig
) -> RunRecord:
    """Queue a run for the workers (:meth:`RunService.submit`); refused before anything
    is written on a store no worker takes runs from."""
    thread_id = thread_of(cfg)
    await ctx.setup()
    await ctx.check_thread(thread_id)
    require_queue(ctx)
    run = new_run(
        ctx, identity, shape, thread_id, input, cfg, status=RunStatus.QUEUED, reason="submit"
    )
    await ctx.store.create_run(run)
    return run


def require_queue(ctx: RunContext) -> None:
    """Refuse, before anything is written, to queue work on a store no worker takes runs
    from: it would wait forever."""
    if not getattr(ctx.store, "queues_runs", False):
        raise ConfigError(
            f"submit() queues a run for workers, and no worker takes runs from "
            f"{type(ctx.store).__name__}: it would wait forever. Workers need PostgreSQL: "
            "compile(checkpointer=PgCheckpointer('postgresql://...')) and run "
            "`oncegraph worker module:app`; or run it here with app.invoke(input, config)"
        )


def start_audit(launch: Launch, run: RunRecord) -> AuditRecord:
    """The audit record of a run started for ``launch``'s actor."""
    return audits.for_run(
        run,
        "start",
        actor=launch.actor,
        reason=launch.reason,
        details={
            "launch_reason": run.launch_reason,
            **({"request_key": launch.request_key} if launch.request_key else {}),
        },
    )


def input_json(value: Any, spec: GraphSpec) -> Any:
    """The run's input as stored: a dict of state updates (validated against the schema)."""
    if isinstance(value, Command):
        raise ConfigError(
            "Command(update=..., goto=...) as input is not supported; pass a dict of state "
            "updates, None to continue, or Command(resume=...) to answer an interrupt"
        )
    return spec.schema.encode_update(input_update(spec, value))


__all__ = ["input_json", "new_run", "start_audit", "submit"]
