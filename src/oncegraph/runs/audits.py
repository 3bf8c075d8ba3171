"""The audit records the run service writes about a run (guarantee 14), built in one place.

Every record of an action on a run names the run as its target, with the run's thread
and the actor and reason; ``details`` says what the action did. (The effect commands
build their own, on the effect: :mod:`oncegraph.runs.commands`.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from oncegraph.ids import new_audit_id
from oncegraph.storage.records import AuditRecord, RunRecord


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
    return AuditRecord(
        audit_id=audit_id or new_audit_id(),
        actor=actor,
        action=action,
        target_kind="run",
        target_id=run.run_id,
        run_id=run.run_id,
        thread_id=run.thread_id,
        reason=reason,
        details=dict(details or {}),
    )


__all__ = ["for_run"]
