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

from oncegraph.errors import ConfigError, RunNotFoundError
from oncegraph.ids import new_run_id as fresh_run_id
from oncegraph.runs import audits, claims
from oncegraph.runs.context import OnContext, RunResult
from oncegraph.runs.forks import StateChange, fork
from oncegraph.runs.launch import LAUNCH_KEY
from oncegraph.runs.replayed import MadeRun
from oncegraph.runtime.config import RunConfig
from oncegraph.runtime.driver import Emit, ignore
from oncegraph.runtime.engine import Head
from oncegraph.runtime.replay import ReplayPolicy
from oncegraph.storage.records import (
    AuditRecord,
    CheckpointRecord,
    RunRecord,
    RunStatus,
    StepCommit,
    now,
)


@dataclass(frozen=True, slots=True)
class Branch(MadeRun):
    """A paused run on its own thread, and the state diff its patch made: the handle of
    the run (``run_id``, ``thread_id``, ``status``; ``result`` is None, nothing ran yet)."""

    run: RunRecord
    checkpoint_id: str
    diff: tuple[StateChange, ...]

    @property
    def result(self) -> None:
        """A branch runs nothing until ``resume(branch.run_id)``: no result yet."""
        return None

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


LINEAGE_KEY = "lineage"
"""Where a replay's or branch's stored config says which it is (``launch_reason`` holds
the operator's reason)."""


def kind_of(run: RunRecord) -> str:
    """What made ``run``: ``replay``, ``branch``, ``time_travel``, or how it was started
    (``invoke``, ``submit``)."""
    stored = run.config.get(LINEAGE_KEY) if isinstance(run.config, Mapping) else None
    if isinstance(stored, str):
        return stored
    if run.launch_reason in ("replay", "branch", "time_travel", "invoke", "submit"):
        return run.launch_reason
    return "replay" if run.mode in ("evidence", "simulation") else "run"


def fork_thread_id(thread_id: str, reason: str, run_id: str) -> str:
    """The thread of a fork: readable, unique, and traceable to its origin."""
    return f"{thread_id}~{reason}~{run_id.removeprefix('run_')}"


class Replays(OnContext):
    """Replay and branch over one :class:`~oncegraph.runs.context.RunContext`."""

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
            parent,
            cp,
            "replay",
            reason,
            RunStatus.RUNNING,
            mode=mode,
            policy=policy,
            run_id=new_run_id,
        )
        async with claims.new(self.store, run) as claim:
            head, _ = await self._fork(parent, cp, run, "replay", None, None)
            for audit in self._audits(parent, actor, "replay", reason, run, cp, {"mode": mode}):
                await self.store.append_audit(audit)
            cfg = RunConfig.from_stored(parent.config, run.thread_id)
            driver = self.ctx.make_driver(cfg, emit, claim, policy)
            return await self.ctx.drive(driver, head, run)

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
        _fields_only(spec.schema, patch)
        parent = await self.ctx.get_run(run_id)
        cp = await self._checkpoint(parent, checkpoint_id, latest=True)
        run = self._new_run(
            parent, cp, "branch", reason, RunStatus.PAUSED, mode="live", run_id=new_run_id
        )
        head, diff = await self._fork(parent, cp, run, "branch", patch, as_node)
        changed = {"as_node": as_node, "changed": [c.channel for c in diff]}
        for audit in self._audits(parent, actor, "branch", reason, run, cp, changed):
            await self.store.append_audit(audit)
        return Branch(run, head.checkpoint.checkpoint_id, diff)

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
        kind: str,
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
        config[LINEAGE_KEY] = kind
        running = status is RunStatus.RUNNING
        return parent.replace(
            run_id=run_id,
            thread_id=fork_thread_id(parent.thread_id, kind, run_id),
            status=status,
            parent_run_id=parent.run_id,
            parent_checkpoint_id=cp.checkpoint_id,
            launch_reason=reason.strip(),  # the operator's own words: why this run exists
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
        kind: str,
        patch: Mapping[str, Any] | None,
        as_node: str | None,
    ) -> tuple[Head, tuple[StateChange, ...]]:
        spec, heads = self.ctx.graph_heads()
        made = await fork(
            spec, heads, self.store, cp, run, source=kind, patch=patch, as_node=as_node
        )
        running = run.status is RunStatus.RUNNING
        await self.store.commit(
            StepCommit(
                thread_id=run.thread_id,
                expected_version=0,
                checkpoint=made.checkpoint,
                log=made.log,
                new_run=run,
                fence=run.fencing_token if running else None,
            )
        )
        return await heads.load(run.thread_id), made.diff

    def _audits(
        self,
        parent: RunRecord,
        actor: str,
        action: str,
        reason: str,
        run: RunRecord,
        cp: CheckpointRecord,
        details: Mapping[str, Any],
    ) -> tuple[AuditRecord, AuditRecord]:
        """The parent's record (what was made from it) and the new run's own (where it
        comes from), with the same actor and reason."""
        ends = (  # each end of the lineage names the other
            (parent, {"new_run_id": run.run_id, "new_thread_id": run.thread_id}),
            (run, {"parent_run_id": parent.run_id, "parent_thread_id": parent.thread_id}),
        )
        on_parent, on_child = (
            audits.for_run(
                on,
                action,
                actor=actor,
                reason=reason,
                details={**other, "checkpoint_id": cp.checkpoint_id, **details},
            )
            for on, other in ends
        )
        return on_parent, on_child


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


__all__ = ["LINEAGE_KEY", "Branch", "Replays", "StateChange", "fork_thread_id", "kind_of"]


def _fields_only(schema: Any, patch: Mapping[str, Any]) -> None:
    """Refuse a branch's patch that names a key the state has no field for: an operator's
    edit is never dropped in silence (a node's or an input's stray key is, as LangGraph
    drops it, with a warning)."""
    if schema.kind in ("dict", "root"):
        return
    unknown = sorted(str(k) for k in patch if k not in schema.channels)
    if unknown:
        raise ConfigError(
            f"the patch names {unknown}, which the state has no field for (known fields: "
            f"{sorted(schema.channels)}); nothing was branched. Fix the field names."
        )
