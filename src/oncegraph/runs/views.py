"""Operator views: state snapshots (masking them is :mod:`oncegraph.runs.masking`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from oncegraph.storage.records import CheckpointRecord, _masked_repr


class _Snapshot(NamedTuple):
    values: Any
    next: tuple[str, ...]
    config: dict[str, Any]
    metadata: Mapping[str, Any]
    created_at: float | str | None  # seconds as stored; ISO 8601 in LangGraph's shape
    parent_config: dict[str, Any] | None
    tasks: tuple[Any, ...] = ()  # the step's tasks (LangGraph's PregelTask shape)
    interrupts: tuple[Any, ...] = ()


class StateSnapshot(_Snapshot):
    """The state of a thread at one checkpoint, LangGraph's 8-field named tuple
    (``values, next, config, metadata, created_at, parent_config, tasks, interrupts``:
    equal to LangGraph's ``StateSnapshot`` with the same fields, unpacked the same way).

    ``run_id`` names the oncegraph run the checkpoint belongs to; it is an attribute
    outside the tuple, so it takes no part in equality or unpacking."""

    run_id: str | None

    def __new__(
        cls,
        values: Any,
        next: tuple[str, ...],
        config: dict[str, Any],
        metadata: Mapping[str, Any],
        created_at: float | str | None,
        parent_config: dict[str, Any] | None,
        tasks: tuple[Any, ...] = (),
        interrupts: tuple[Any, ...] = (),
        run_id: str | None = None,
    ) -> StateSnapshot:
        self = super().__new__(
            cls, values, next, config, metadata, created_at, parent_config, tasks, interrupts
        )
        self.run_id = run_id
        return self

    def _replace(self, **changes: Any) -> StateSnapshot:
        run_id = changes.pop("run_id", self.run_id)
        return StateSnapshot(**{**self._asdict(), **changes}, run_id=run_id)

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
    return StateSnapshot(values, (), {"thread_id": thread_id}, {}, None, None)


__all__ = [
    "StateSnapshot",
    "empty_snapshot",
    "snapshot",
]
