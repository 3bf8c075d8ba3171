"""Operator views: state snapshots (masking them is :mod:`oncegraph.runs.masking`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from oncegraph.storage.records import CheckpointRecord, _masked_repr


@dataclass(frozen=True, slots=True)
class StateSnapshot:
    values: dict[str, Any]
    next: tuple[str, ...]
    config: dict[str, Any]
    metadata: Mapping[str, Any]
    created_at: float | None
    parent_config: dict[str, Any] | None
    run_id: str | None
    interrupts: tuple[Any, ...] = ()
    tasks: tuple[Any, ...] = ()  # the step's tasks (LangGraph's PregelTask shape)

    def __repr__(self) -> str:
        return _masked_repr(self)  # the run layer's masking, installed by runs.masking


def snapshot(
    cp: CheckpointRecord, values: dict[str, Any], interrupts: tuple[dict[str, Any], ...]
) -> StateSnapshot:
    return StateSnapshot(
        values=values,
        next=cp.next,
        config={"thread_id": cp.thread_id, "checkpoint_id": cp.checkpoint_id},
        metadata=dict(cp.metadata, step=cp.step),
        created_at=cp.created_at,
        parent_config=(
            {"thread_id": cp.thread_id, "checkpoint_id": cp.parent_checkpoint_id}
            if cp.parent_checkpoint_id
            else None
        ),
        run_id=cp.run_id,
        interrupts=interrupts,
    )


def empty_snapshot(thread_id: str, values: dict[str, Any]) -> StateSnapshot:
    return StateSnapshot(values, (), {"thread_id": thread_id}, {}, None, None, None)


__all__ = [
    "StateSnapshot",
    "empty_snapshot",
    "snapshot",
]
