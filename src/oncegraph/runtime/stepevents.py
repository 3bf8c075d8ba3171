"""The stream events of a step, built from what the step committed: the ``updates`` and
``values`` chunks, and the ``debug`` stream's ``checkpoint``, ``task`` and
``task_result`` events (LangGraph's shapes). Emitted only after the step's commit (a
task of a step of several: after its writes are kept, :func:`emit_update`), so a stream
never shows what was not written."""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Sequence
from typing import Any

from oncegraph.graph.spec import GraphSpec
from oncegraph.runtime.engine import Head, StepPlan, TaskOutcome, TaskResult, tasks_of
from oncegraph.runtime.interrupt import Interrupt as InterruptValue
from oncegraph.runtime.streaming import Emit, debug_event, wants
from oncegraph.runtime.updates import shown
from oncegraph.storage.records import CheckpointRecord


def task_id(checkpoint_id: str, key: str) -> str:
    """A task's stable id: the same in every view, stream and process."""
    return hashlib.sha256(f"{checkpoint_id}:{key}".encode()).hexdigest()[:32]


def emit_update(emit: Emit, spec: GraphSpec, result: TaskResult) -> None:
    """One task's ``updates`` event (a root-value state's value itself)."""
    chunk = {result.node: shown(result, spec.schema.is_root)}
    if result.cached:
        chunk["__metadata__"] = {"cached": True}
    emit("updates", chunk)


def emit_step(
    emit: Emit,
    spec: GraphSpec,
    where: tuple[str | None, tuple[str, ...]],
    head: Head,
    parent: CheckpointRecord,
    results: Sequence[TaskResult],
    streamed: Collection[str] = (),
) -> None:
    """A committed step's ``updates``, ``values`` and ``debug`` checkpoint events;
    ``where``: the root thread (None: this one) and the namespace; ``streamed``: the
    tasks whose update was emitted already, as they finished (:func:`emit_update`)."""
    if wants(emit, "updates"):
        for r in results:
            if r.key not in streamed:
                emit_update(emit, spec, r)
    if wants(emit, "values"):
        emit("values", head.values)
    if wants(emit, "debug"):
        emit(
            "debug",
            debug_event(
                head.checkpoint.step + 1, "checkpoint", debug_checkpoint(spec, where, head, parent)
            ),
        )


def debug_checkpoint(
    spec: GraphSpec,
    where: tuple[str | None, tuple[str, ...]],
    head: Head,
    parent: CheckpointRecord,
) -> dict[str, Any]:
    """The ``debug`` stream's payload of a checkpoint, as ``get_state_history`` shows it."""
    root_thread, namespace = where
    cp = head.checkpoint
    thread = root_thread or cp.thread_id
    ns = "|".join(namespace)

    def config(checkpoint_id: str) -> dict[str, Any]:
        return {
            "configurable": {
                "thread_id": thread,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint_id,
            }
        }

    return {
        "config": config(cp.checkpoint_id),
        "parent_config": config(parent.checkpoint_id) if parent.checkpoint_id else None,
        "values": dict(head.values),
        "metadata": dict(cp.metadata, step=cp.step),
        "next": list(cp.next),
        "tasks": [
            {
                "id": task_id(cp.checkpoint_id, t.key),
                "name": t.node,
                "interrupts": (),
                "state": None,
            }
            for t in tasks_of(spec, cp)
        ],
    }


def emit_tasks(emit: Emit, head: Head, plan: StepPlan) -> None:
    """The ``debug`` stream's ``task`` events of the tasks a step is about to run."""
    cp = head.checkpoint
    for t in plan.todo:
        emit(
            "debug",
            debug_event(
                cp.step + 2,
                "task",
                {
                    "id": task_id(cp.checkpoint_id, t.key),
                    "name": t.node,
                    "input": t.arg if t.is_send else dict(head.values),
                    "triggers": [t.key],
                },
            ),
        )


def emit_results(emit: Emit, cp: CheckpointRecord, outcomes: Sequence[TaskOutcome]) -> None:
    """The ``debug`` stream's ``task_result`` events of a step's tasks."""
    for o in outcomes:
        interrupts = []
        if o.interrupt is not None:
            interrupts.append(
                InterruptValue.of(cp.checkpoint_id, o.key, o.interrupt[1], o.interrupt[0]).to_json()
            )
        emit(
            "debug",
            debug_event(
                cp.step + 2,
                "task_result",
                {
                    "id": task_id(cp.checkpoint_id, o.key),
                    "name": o.node,
                    "error": None if o.error is None else repr(o.error),
                    "result": dict(o.result.update) if o.result is not None else {},
                    "interrupts": interrupts,
                },
            ),
        )


__all__ = [
    "debug_checkpoint",
    "emit_results",
    "emit_step",
    "emit_tasks",
    "task_id",
]
