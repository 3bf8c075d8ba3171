"""Records and snapshots as JSON for the API and the UI, masked for who is asking.

Effect records come from the run service already masked (each tool's ``mask=[...]``);
state values, stream chunks and run inputs do not, so for every key below ``admin``
each field any tool declared secret is masked wherever it appears (a tool call's
arguments inside a message, too). An ``admin`` sees state as stored.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Iterable, Mapping
from typing import Any

from oncegraph.runs.launch import started_by
from oncegraph.runs.masking import mask_value
from oncegraph.server.auth import Principal, Role
from oncegraph.storage.records import AuditRecord, EffectRecord, RunRecord


def jsonable(value: Any) -> Any:
    """Plain JSON of anything a run emits (dataclasses, enums, tuples, pydantic models);
    what has no JSON form is shown by its ``repr``."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, enum.Enum):
        return jsonable(value.value)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return jsonable(dump(mode="json"))
    return repr(value)


class Shown:
    """What one principal may see: masks fields for every role below ``admin``."""

    def __init__(self, principal: Principal, masks: Mapping[str, tuple[str, ...]]) -> None:
        self.principal = principal
        fields: set[str] = set()
        for declared in masks.values():
            fields.update(declared)
        self.fields = tuple(sorted(fields))
        self.unmasked = principal.can(Role.ADMIN)

    def value(self, value: Any) -> Any:
        plain = jsonable(value)
        if self.unmasked or not self.fields:
            return plain
        return mask_value(plain, self.fields)

    def run(self, run: RunRecord) -> dict[str, Any]:
        return {
            "run_id": run.run_id,
            "thread_id": run.thread_id,
            "status": str(run.status),
            "workflow_name": run.workflow_name,
            "workflow_version": run.workflow_version,
            "parent_run_id": run.parent_run_id,
            "parent_checkpoint_id": run.parent_checkpoint_id,
            "launch_reason": run.launch_reason,
            "started_by": started_by(run.config),
            "mode": run.mode,
            "input": self.value(run.input),
            "error": run.error,
            "tenant": getattr(run, "tenant", None),
            "created_at": run.created_at,
            "updated_at": run.updated_at,
        }

    def effect(self, record: EffectRecord) -> dict[str, Any]:
        last = record.attempts[-1] if record.attempts else None
        return {
            "effect_id": record.effect_id,
            "effect_type": record.effect_type,
            "effect_class": str(record.effect_class),
            "command_id": record.command_id,
            "run_id": record.run_id,
            "thread_id": record.thread_id,
            "node": record.node,
            "status": str(record.status),
            "request_hash": record.request_hash,
            "checkpoint_id": record.checkpoint_id,
            "recipient": record.recipient,
            "request": self.value(record.request),
            "result": self.value(record.result),
            "provider_reference": record.provider_reference,
            "error": record.error,
            "attempts": [jsonable(a) for a in record.attempts],
            "last_attempt": jsonable(last) if last is not None else None,
            "created_at": record.created_at,
            "updated_at": record.updated_at,
        }

    def audit(self, record: AuditRecord) -> dict[str, Any]:
        return {
            "audit_id": record.audit_id,
            "actor": record.actor,
            "action": record.action,
            "target_kind": record.target_kind,
            "target_id": record.target_id,
            "run_id": record.run_id,
            "thread_id": record.thread_id,
            "reason": record.reason,
            "details": self.value(record.details),
            "at": record.at,
        }

    def snapshot(self, snap: Any) -> dict[str, Any]:
        return {
            "values": self.value(snap.values),
            "next": list(snap.next),
            "config": jsonable(snap.config),
            "metadata": self.value(snap.metadata),
            "created_at": snap.created_at,
            "parent_config": jsonable(snap.parent_config),
            "run_id": snap.run_id,
            "checkpoint_id": snap.config.get("checkpoint_id"),
            "interrupts": self.value(snap.interrupts),
        }

    def preview(self, preview: Any) -> dict[str, Any]:
        return {
            "token": preview.token,
            "effect_id": preview.effect_id,
            "effect_type": preview.effect_type,
            "run_id": preview.run_id,
            "thread_id": preview.thread_id,
            "recipient": preview.recipient,
            "payload": self.value(preview.payload),
            "status": str(preview.status),
            "last_attempt": jsonable(preview.last_attempt),
            "dedup": preview.dedup,
            "key": preview.key,
        }

    def runs(self, runs: Iterable[RunRecord]) -> list[dict[str, Any]]:
        return [self.run(r) for r in runs]


__all__ = ["Shown", "jsonable"]
