"""The version gate before every continue (guarantee 10): the verdict, and a migration applied.

A run's effective graph identity and shape are those it started with, unless a migration
recorded newer ones in its head checkpoint's metadata. :meth:`VersionGate.verdict`
compares them with the current graph (:func:`oncegraph.versioning.check`);
:meth:`VersionGate.migrate` applies a registered state migration as a new checkpoint of
the run (fenced by its claim, recorded in the metadata and the audit log), carrying the
old head's pending task writes (interrupt questions and answers) over.

A migration function takes the stored state (value channels as stored JSON, log channels
as lists of stored entries) and returns the value channels to keep under the new graph;
log channels (message lists) are append-only and stay as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from oncegraph.errors import ConfigError
from oncegraph.ids import new_checkpoint_id
from oncegraph.runs import audits
from oncegraph.runtime import logkeys
from oncegraph.runtime.claim import Claim
from oncegraph.runtime.engine import Head
from oncegraph.storage.records import CheckpointRecord, RunRecord, StepCommit
from oncegraph.versioning import GraphIdentity, Verdict, check, shape_of

if TYPE_CHECKING:
    from oncegraph.graph.spec import GraphSpec
    from oncegraph.runs.context import RunContext

Migration = Callable[[dict[str, Any]], dict[str, Any]]


def run_identity(run: RunRecord) -> GraphIdentity:
    return GraphIdentity(
        run.workflow_name, run.workflow_version, run.state_schema_version, run.graph_fingerprint
    )


class VersionGate:
    def __init__(
        self,
        spec: GraphSpec,
        identity: GraphIdentity,
        *,
        migrations: Mapping[str, Migration] | None = None,
        previous: Mapping[str, GraphSpec] | None = None,
    ) -> None:
        self.spec = spec
        self.identity = identity
        self.shape = shape_of(spec)
        self.migrations = dict(migrations or {})
        self.previous = dict(previous or {})
        for version in self.previous:
            if version == identity.version:
                raise ConfigError(
                    f"previous_versions names {version!r}, the version being compiled; list "
                    "only older versions"
                )

    def verdict(self, run: RunRecord, head: Head) -> Verdict:
        """May ``run`` (standing on ``head``) go on under this graph?"""
        stored, stored_shape = run_identity(run), run.config.get("shape")
        stands_on: tuple[str, ...] = ()
        if head.checkpoint.run_id == run.run_id:  # it started: it stands on its head
            meta = head.checkpoint.metadata
            if isinstance(meta.get("graph"), Mapping):  # a migration moved it on
                stored, stored_shape = GraphIdentity.from_json(meta["graph"]), meta.get("shape")
            stands_on = head.checkpoint.next
        return check(
            run.run_id,
            stored,
            self.identity,
            stored_shape=stored_shape if isinstance(stored_shape, Mapping) else None,
            shape=self.shape,
            stands_on=stands_on,
            migrations=self.migrations,
            previous_versions=tuple(self.previous),
        )

    async def migrate(
        self, ctx: RunContext, run: RunRecord, head: Head, claim: Claim, verdict: Verdict
    ) -> Head:
        """Apply ``verdict``'s migration to ``head`` as a new checkpoint; the new head."""
        assert verdict.migration is not None
        store, schema = ctx.store, self.spec.schema
        cp = head.checkpoint
        stored: dict[str, Any] = dict(cp.values)
        for channel, count in logkeys.counts(cp.logs):
            log = logkeys.stored_channel(cp.logs, channel)
            stored[channel] = await store.read_log(cp.thread_id, log, count) if count else []
        try:
            migrated = dict(verdict.migration(stored))
        except Exception as exc:
            raise ConfigError(
                f"the state migration from version {verdict.from_version!r} raised "
                f"{type(exc).__name__}: {exc}; nothing was changed"
            ) from exc
        for channel in schema.log_channels():
            migrated.pop(channel, None)  # logs are append-only: they stay as they are
        values = schema.encode_values(migrated)
        schema.decode_values(values)  # it must read back under the new schema
        new = CheckpointRecord(
            checkpoint_id=new_checkpoint_id(),
            thread_id=cp.thread_id,
            run_id=run.run_id,
            step=cp.step,
            version=cp.version + 1,
            parent_checkpoint_id=cp.checkpoint_id,
            values=values,
            logs=dict(cp.logs),
            next=cp.next,
            metadata={
                "source": "migration",
                "graph": self.identity.to_json(),
                "shape": self.shape,
                "migrated_from": verdict.from_version,
            },
        )
        await store.commit(
            StepCommit(
                thread_id=cp.thread_id,
                expected_version=cp.version,
                checkpoint=new,
                fence=claim.token,
            )
        )
        for write in await store.get_task_writes(cp.thread_id, cp.checkpoint_id):
            moved = type(write)(
                write.thread_id, new.checkpoint_id, write.task, write.kind, write.idx, write.value
            )
            await store.put_task_write(moved, run_id=run.run_id, fence=claim.token)
        await store.append_audit(
            audits.for_run(
                run,
                "migrate",
                actor="migration",
                reason=f"version {verdict.from_version} -> {self.identity.version}",
                details={"checkpoint_id": new.checkpoint_id, "from": verdict.from_version},
            )
        )
        return await ctx.heads.load(run.thread_id)


__all__ = ["Migration", "VersionGate", "run_identity"]
