"""The audit records the run service writes about a run or an effect (guarantee 14),
built in one place.

Every record of an action names its target (the run, or the effect) with the run and
its thread, the actor and the reason; ``details`` says what the action did.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from oncegraph.ids import new_audit_id
from oncegraph.storage.records import AuditRecord, EffectRecord, RunRecord


def for_run(
    run: RunRecord,
    action: str,
    *,
    actor: str,
    reason: str | None,
    details: Mapping[str, Any] | None = None,
    audit_id: str | None = None,
) -> AuditRecord:
    """The audit record of ``actor``'s ``action`` on ``run`` (a fresh id unless given)."""
    return record(
        "run",
        run.run_id,
        action,
        actor=actor,
        reason=reason,
        details=details,
        on=run,
        audit_id=audit_id,
    )


def for_effect(
    effect: EffectRecord,
    action: str,
    *,
    actor: str,
    reason: str,
    details: Mapping[str, Any] | None = None,
) -> AuditRecord:
    """The audit record of an operator command on one effect."""
    return record(
        "effect", effect.effect_id, action, actor=actor, reason=reason, details=details, on=effect
    )


def for_update(
    run: RunRecord,
    *,
    actor: str,
    reason: str | None,
    parent_run_id: str | None,
    checkpoint_id: str | None,
    new_checkpoint_id: str,
    as_node: str | None,
    changed: list[str],
) -> AuditRecord:
    """The audit record of an ``update_state`` that made ``run``: the checkpoint (and its
    run) it edited, the checkpoint it wrote, as which node, and the channels it changed."""
    return for_run(
        run,
        "update_state",
        actor=actor,
        reason=reason,
        details={
            "parent_run_id": parent_run_id,
            "checkpoint_id": checkpoint_id,
            "new_checkpoint_id": new_checkpoint_id,
            "as_node": as_node,
            "changed": changed,
        },
    )


def record(
    target_kind: str,
    target_id: str,
    action: str,
    *,
    actor: str,
    reason: str | None,
    details: Mapping[str, Any] | None = None,
    on: RunRecord | EffectRecord | None = None,
    audit_id: str | None = None,
) -> AuditRecord:
    """The audit record of ``actor``'s ``action`` on the ``target_kind`` ``target_id``
    (a run, an effect, a tool); ``on``: the run or effect it names with its run and
    thread (a fresh id unless ``audit_id`` is given)."""
    return AuditRecord(
        audit_id=audit_id or new_audit_id(),
        actor=actor,
        action=action,
        target_kind=target_kind,
        target_id=target_id,
        run_id=None if on is None else on.run_id,
        thread_id=None if on is None else on.thread_id,
        reason=reason,
        details=dict(details or {}),
    )


__all__ = ["for_effect", "for_run", "for_update", "record"]
