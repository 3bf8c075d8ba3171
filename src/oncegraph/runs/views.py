"""Operator views: state snapshots, and masking of what a tool declared secret.

A tool's ``mask=[...]`` fields are replaced by ``"***"`` wherever a view shows an effect's
request or result. Masks are collected from the graph: a node whose callable has an
``effect_masks`` mapping (``ToolNode`` has one) declares them per effect type.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from oncegraph.graph.spec import GraphSpec
from oncegraph.storage.records import CheckpointRecord, EffectRecord

MASK = "***"

Masks = Mapping[str, tuple[str, ...]]  # effect type -> field names


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


def masks_of(spec: GraphSpec | None) -> dict[str, tuple[str, ...]]:
    """Every effect type's masked fields, from the nodes that declare them."""
    out: dict[str, tuple[str, ...]] = {}
    if spec is None:
        return out
    for node in spec.nodes.values():
        declared = getattr(node.fn, "effect_masks", None)
        if isinstance(declared, Mapping):
            for effect_type, fields in declared.items():
                if fields:
                    out[str(effect_type)] = tuple(fields)
    return out


def mask_value(value: Any, fields: tuple[str, ...]) -> Any:
    if isinstance(value, Mapping):
        return {k: (MASK if k in fields else mask_value(v, fields)) for k, v in value.items()}
    if isinstance(value, list):
        return [mask_value(v, fields) for v in value]
    return value


def mask_effect(record: EffectRecord, masks: Masks) -> EffectRecord:
    fields = masks.get(record.effect_type, ())
    if not fields:
        return record
    return record.replace(
        request=mask_value(record.request, fields), result=mask_value(record.result, fields)
    )


__all__ = [
    "MASK",
    "Masks",
    "StateSnapshot",
    "empty_snapshot",
    "mask_effect",
    "mask_value",
    "masks_of",
    "snapshot",
]
