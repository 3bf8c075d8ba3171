"""Replay and Branch: new runs from a checkpoint of another run (guarantee 9).

Both FORK: the checkpoint's state (values and log entries up to its counts) is copied into
a new thread, under a new run with lineage (``parent_run_id``, ``parent_checkpoint_id``,
``launch_reason``, ``mode``). The original thread's head never moves, its run is never
written, its waiters are never woken.

* :meth:`Replays.replay` runs the new run at once in a mode (see
  :mod:`oncegraph.runtime.replay`): ``evidence`` (recorded results only), ``simulation``
  (tools' ``simulate``) or ``live`` (real calls; irreversible tools only if allowed).
* :meth:`Replays.branch` applies a patch first (as if ``as_node`` wrote it), returns the
  state diff, and runs nothing: the branch is ``paused`` until ``resume(branch.run_id)``.
  Its effects get new ids (its own run id): a branch is live, not a replay of records.
* :meth:`Replays.update_state` is LangGraph's name for a branch from a thread's head (or
  a given checkpoint) with a default reason; the new thread's config is returned, so
  ``invoke(None, that_config)`` continues it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from oncegraph import _json
from oncegraph.errors import ConfigError, RunNotFoundError
from oncegraph.graph.constants import START
from oncegraph.ids import new_checkpoint_id
from oncegraph.ids import new_run_id as fresh_run_id
from oncegraph.runs import audits, claims
from oncegraph.runs.context import RunContext, RunResult
from oncegraph.runs.launch import LAUNCH_KEY
from oncegraph.runtime.config import RunConfig
from oncegraph.runtime.driver import Emit, ignore
from oncegraph.runtime.engine import Head, TaskResult, next_nodes
from oncegraph.runtime.replay import ReplayPolicy
from oncegraph.state.channels import apply_writes
from oncegraph.storage.records import (
    AuditRecord,
    CheckpointRecord,
    LogEntry,
    RunRecord,
    RunStatus,
    StepCommit,
    now,
)


@dataclass(frozen=True, slots=True)
class StateChange:
    """One channel a branch's patch changed: values as stored (JSON); for a log channel
    (a message list), ``before`` is the entry count and ``after`` the entries added."""

    channel: str
    before: Any
    after: Any


@dataclass(frozen=True, slots=True)
class Branch:
    """A paused run on its own thread, and the state diff its patch made."""

    run: RunRecord
    checkpoint_id: str
    diff: tuple[StateChange, ...]

    @property
    def config(self) -> dict[str, Any]:
        """The config that continues it: ``invoke(None, branch.config)``."""
        return {
            "configurable": {
                "thread_id": self.run.thread_id,
                "checkpoint_id": self.checkpoint_id,
                "run_id": self.run.run_id,
            }
        }


def fork_thread_id(thread_id: str, reason: str, run_id: str) -> str:
    """The thread of a fork: readable, unique, and traceable to its origin."""
    return f"{thread_id}~{reason}~{run_id.removeprefix('run_')}"


class Replays:
    """Replay and branch over one :class:`~oncegraph.runs.context.RunContext`."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.store = ctx.store

    async def replay(
        self,
        run_id: str,
        *,
        checkpoint_id: str | None = None,
        mode: str = "evidence",
        reason: str,
        actor: str,
        allow_irreversible: Iterable[str] = (),
        doubles: Mapping[str, Callable[..., Any]] | None = None,
        emit: Emit = ignore,
        new_run_id: str | None = None,
    ) -> RunResult:
        """A new run from ``checkpoint_id`` (default: the run's start), run in ``mode``.
        ``new_run_id``: the new run's id, chosen by the caller (a fresh
        :func:`~oncegraph.ids.new_run_id`: a request bound to it finds the replay again)."""
        _required(reason=reason, actor=actor)
        parent = await self.ctx.get_run(run_id)
        policy = ReplayPolicy.of(
            mode,
            _evidence_run(parent),
            allow_irreversible=frozenset(allow_irreversible),
            doubles=dict(doubles or {}),
        )
        policy = await self.ctx.with_answers(policy)
        cp = await self._checkpoint(parent, checkpoint_id)
        run = self._new_run(
            parent, cp, "replay", RunStatus.RUNNING, mode=mode, policy=policy, run_id=new_run_id
        )
        claim = await claims.new(self.store, run)
        try:
            head, _ = await self._fork(parent, cp, run, None, None)
            await self.store.append_audit(
                self._audit(parent, actor, "replay", reason, run, cp, {"mode": mode})
            )
            cfg = RunConfig.from_stored(parent.config, run.thread_id)
            driver = self.ctx.make_driver(cfg, emit, claim, policy)
            return await self.ctx.drive(driver, head, run)
        finally:
            await claim.release()

    async def branch(
        self,
        run_id: str,
        checkpoint_id: str | None = None,
        *,
        patch: Mapping[str, Any],
        reason: str,
        actor: str,
        as_node: str | None = None,
        new_run_id: str | None = None,
    ) -> Branch:
        """A paused run from the patched state of ``checkpoint_id`` (default: the run's
        latest), with the diff. Nothing runs until ``resume(branch.run.run_id)``.
        ``new_run_id`` as for :meth:`replay`."""
        _required(reason=reason, actor=actor)
        spec = self.ctx.graph
        if not isinstance(patch, Mapping):
            raise ConfigError(f"patch must be a dict of state fields; got {patch!r}")
        if as_node is not None and as_node not in spec.nodes:
            raise ConfigError(f"as_node {as_node!r} is not a node of this graph")
        parent = await self.ctx.get_run(run_id)
        cp = await self._checkpoint(parent, checkpoint_id, latest=True)
        run = self._new_run(parent, cp, "branch", RunStatus.PAUSED, mode="live", run_id=new_run_id)
        head, diff = await self._fork(parent, cp, run, patch, as_node)
        await self.store.append_audit(
            self._audit(
                parent,
                actor,
                "branch",
                reason,
                run,
                cp,
                {"as_node": as_node, "changed": [c.channel for c in diff]},
            )
        )
        return Branch(run, head.checkpoint.checkpoint_id, diff)

    async def update_state(
        self,
        thread_id: str,
        values: Mapping[str, Any],
        *,
        checkpoint_id: str | None = None,
        as_node: str | None = None,
        actor: str = "update_state",
        reason: str = "update_state",
    ) -> Branch:
        """LangGraph's ``update_state``: a branch of the thread's latest run."""
        runs = await self.store.list_runs(thread_id=thread_id, limit=1)
        if not runs:
            raise RunNotFoundError(f"thread {thread_id!r} has no run to branch from")
        run_id = runs[0].run_id
        if checkpoint_id is not None:
            cp = await self.store.get_checkpoint(thread_id, checkpoint_id)
            if cp is None:
                raise RunNotFoundError(f"no checkpoint {checkpoint_id!r} on thread {thread_id!r}")
            run_id = cp.run_id
        return await self.branch(
            run_id, checkpoint_id, patch=values, reason=reason, actor=actor, as_node=as_node
        )

    # -- forking -----------------------------------------------------------------------------

    async def _checkpoint(
        self, run: RunRecord, checkpoint_id: str | None, *, latest: bool = False
    ) -> CheckpointRecord:
        """The checkpoint of ``run`` to fork from (by default its first, or its last)."""
        if checkpoint_id is not None:
            cp = await self.store.get_checkpoint(run.thread_id, checkpoint_id)
            if cp is None:
                raise RunNotFoundError(
                    f"no checkpoint {checkpoint_id!r} on thread {run.thread_id!r} (pruned, "
                    "or of another thread); list them with app.get_state_history(config)"
                )
            if cp.run_id != run.run_id:
                raise ConfigError(
                    f"checkpoint {checkpoint_id} belongs to run {cp.run_id}, not {run.run_id}; "
                    f"replay or branch run {cp.run_id} instead"
                )
            return cp
        found = await self.store.list_checkpoints(run.thread_id, run_id=run.run_id)
        if not found:
            raise RunNotFoundError(
                f"run {run.run_id} has no checkpoint to start from (it never started, or its "
                "checkpoints were pruned)"
            )
        return found[0] if latest else found[-1]

    def _new_run(
        self,
        parent: RunRecord,
        cp: CheckpointRecord,
        reason: str,
        status: RunStatus,
        *,
        mode: str,
        policy: ReplayPolicy | None = None,
        run_id: str | None = None,
    ) -> RunRecord:
        if run_id is not None and not (isinstance(run_id, str) and run_id.startswith("run_")):
            raise ConfigError(
                f"new_run_id takes a fresh id from oncegraph.ids.new_run_id(); got {run_id!r}"
            )
        run_id = run_id or fresh_run_id()
        config = dict(parent.config)
        config.pop(LAUNCH_KEY, None)  # who started the parent did not start this run
        if policy is not None:
            config["replay"] = policy.to_json()
        running = status is RunStatus.RUNNING
        return parent.replace(
            run_id=run_id,
            thread_id=fork_thread_id(parent.thread_id, reason, run_id),
            status=status,
            parent_run_id=parent.run_id,
            parent_checkpoint_id=cp.checkpoint_id,
            launch_reason=reason,
            mode=mode,
            input=None,
            config=config,
            error=None,
            lease_owner=self.ctx.owner if running else None,
            lease_expires_at=None,
            fencing_token=1 if running else 0,
            created_at=now(),
            updated_at=now(),
        )

    async def _fork(
        self,
        parent: RunRecord,
        cp: CheckpointRecord,
        run: RunRecord,
        patch: Mapping[str, Any] | None,
        as_node: str | None,
    ) -> tuple[Head, tuple[StateChange, ...]]:
        spec, heads = self.ctx.graph_heads()
        log: list[LogEntry] = []
        for channel, count in cp.logs.items():
            entries = await self.store.read_log(cp.thread_id, channel, count) if count else []
            log.extend(LogEntry(channel, seq, value) for seq, value in enumerate(entries))
        stored, logs, nxt = dict(cp.values), dict(cp.logs), cp.next
        diff: list[StateChange] = []
        if patch:
            values = await heads.materialize(cp)
            update = spec.schema.to_update(as_node or START, patch)
            writes = apply_writes(spec.schema, values, [(as_node or "patch", update)])
            for channel, value in writes.stored.items():
                if channel in writes.changed:
                    before = stored.get(channel)
                    if _json.canonical(before) != _json.canonical(value):
                        diff.append(StateChange(channel, before, value))
                    stored[channel] = value
            added: dict[str, list[Any]] = {}
            for channel, value in writes.stored_log:
                log.append(LogEntry(channel, logs.get(channel, 0), value))
                logs[channel] = logs.get(channel, 0) + 1
                added.setdefault(channel, []).append(value)
            diff.extend(StateChange(c, cp.logs.get(c, 0), entries) for c, entries in added.items())
            if as_node is not None:
                nxt = next_nodes(spec, writes.values, [TaskResult(as_node, update)])
        fork = CheckpointRecord(
            checkpoint_id=new_checkpoint_id(),
            thread_id=run.thread_id,
            run_id=run.run_id,
            step=cp.step,
            version=1,
            parent_checkpoint_id=None,
            values=stored,
            logs=logs,
            next=tuple(nxt),
            metadata={
                "source": run.launch_reason,
                "forked_from": {
                    "thread_id": cp.thread_id,
                    "checkpoint_id": cp.checkpoint_id,
                    "run_id": parent.run_id,
                },
            },
        )
        running = run.status is RunStatus.RUNNING
        await self.store.commit(
            StepCommit(
                thread_id=run.thread_id,
                expected_version=0,
                checkpoint=fork,
                log=log,
                new_run=run,
                fence=run.fencing_token if running else None,
            )
        )
        return await heads.load(run.thread_id), tuple(diff)

    def _audit(
        self,
        parent: RunRecord,
        actor: str,
        action: str,
        reason: str,
        run: RunRecord,
        cp: CheckpointRecord,
        details: Mapping[str, Any],
    ) -> AuditRecord:
        return audits.for_run(
            parent,
            action,
            actor=actor,
            reason=reason,
            details={
                "new_run_id": run.run_id,
                "new_thread_id": run.thread_id,
                "checkpoint_id": cp.checkpoint_id,
                **details,
            },
        )


def _evidence_run(run: RunRecord) -> str:
    """Where a replay of ``run`` finds recorded results: the run itself, unless it is a
    recorded replay (evidence or simulation), which keeps its own origin's ids."""
    stored = run.config.get("replay") if isinstance(run.config, Mapping) else None
    if isinstance(stored, Mapping) and stored.get("mode") in ("evidence", "simulation"):
        return str(stored["evidence_run_id"])
    return run.run_id


def _required(**values: str) -> None:
    for name, value in values.items():
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(
                f"{name} is required: say who acts and why (it goes to the audit log)"
            )


__all__ = ["Branch", "Replays", "StateChange", "fork_thread_id"]
