"""The stream events of a step, built from what the step committed: the ``updates`` and
``values`` chunks, and the ``debug`` stream's ``checkpoint``, ``task`` and
``task_result`` events (LangGraph's shapes). Emitted only after the step's commit (a
task of a step of several: after its writes are kept, :func:`emit_update`), so a stream
never shows what was not written."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from oncegraph.graph.constants import START, triggers
from oncegraph.graph.io import INTERRUPT_KEY
from oncegraph.graph.spec import GraphSpec
from oncegraph.runtime.childplace import child_place
from oncegraph.runtime.engine import Head, StepPlan, TaskOutcome, TaskResult, tasks_of
from oncegraph.runtime.interrupt import Interrupt as InterruptValue
from oncegraph.runtime.streaming import Emit, debug_event, wants
from oncegraph.runtime.updates import shown, written
from oncegraph.state.channels import StateSchema, public
from oncegraph.storage.records import CheckpointRecord


def task_id(checkpoint_id: str, key: str) -> str:
    """A task's stable id: the same in every view, stream and process."""
    return hashlib.sha256(f"{checkpoint_id}:{key}".encode()).hexdigest()[:32]


INPUT_SUFFIX = ".input"
"""The id suffix of the checkpoint LangGraph shows before a run's input is applied."""

_INTERNAL_METADATA = frozenset(
    {"writes", "sends", "joins", "deferred", "call", "forked_from", "results", "answers", "exit"}
)
"""Checkpoint metadata the run keeps for itself (what the next step needs, lineage the
run records hold): not part of LangGraph's metadata."""


def lg_metadata(metadata: Mapping[str, Any], step: int, source: str) -> dict[str, Any]:
    """LangGraph's metadata of a checkpoint: ``source``, ``step`` (LangGraph numbers the
    input checkpoint -1, so a stored step ``n`` shows as ``n + 1``), ``parents``."""
    shown = {k: v for k, v in metadata.items() if k not in _INTERNAL_METADATA}
    return {**shown, "source": source, "step": step, "parents": {}}


def start_values(schema: StateSchema) -> dict[str, Any]:
    """A thread's values before its first input, as LangGraph's channels show them: each
    reducer field at its start (``[]``, ``0``), nothing else."""
    return {
        name: channel.default()
        for name, channel in schema.channels.items()
        if channel.default is not None and (channel.log or channel.reducer is not None)
    }


def finished_shown(emit: Emit) -> bool:
    """Whether ``emit`` keeps what :func:`emit_update` makes."""
    return wants(emit, "updates") or wants(emit, "debug")


def emit_update(
    emit: Emit, spec: GraphSpec, result: TaskResult, at: tuple[str, int] | None = None
) -> None:
    """One task's ``updates`` event (a root-value state's value itself), and, given
    ``at``, the checkpoint its step ran on (its id and stored step), the ``debug``
    stream's ``task_result`` event right after it, as LangGraph orders them."""
    if wants(emit, "updates"):
        chunk = {result.node: shown(result, spec.schema.is_root)}
        if result.cached:
            chunk["__metadata__"] = {"cached": True}
        emit("updates", chunk)
    if at is not None and wants(emit, "debug"):
        emit("debug", _result_event(at, result.key, result.node, written(result)))


def emit_interrupts(
    emit: Emit, values: Mapping[str, Any], asked: Iterable[Sequence[InterruptValue]]
) -> None:
    """The chunks of a step's questions, one per task asking (as LangGraph): in
    ``updates`` ``{"__interrupt__": (Interrupt, ...)}``, in ``values`` the state the step
    began with and that key (a stream of values alone sees the question too)."""
    for one in asked:
        emit("updates", {INTERRUPT_KEY: tuple(one)})
        if wants(emit, "values"):
            emit("values", {**values, INTERRUPT_KEY: tuple(one)})


def emit_step(
    emit: Emit,
    spec: GraphSpec,
    where: Where,
    head: Head,
    parent: CheckpointRecord,
    results: Sequence[TaskResult],
    streamed: Collection[str] = (),
    *,
    before: Mapping[str, Any] | None = None,
    wrote: bool = True,
) -> None:
    """A committed step's ``updates``, ``values`` and ``debug`` checkpoint events;
    ``where``: the root thread (None: this one) and the namespace; ``streamed``: the
    tasks whose update was emitted already, as they finished (:func:`emit_update`);
    ``before``: for a run's input checkpoint, the values before the input (LangGraph
    shows that state as a checkpoint of its own, as the history does); ``wrote=False``:
    the step wrote no state field (an empty input), so, as LangGraph, no ``values``
    chunk."""
    if finished_shown(emit):
        for r in results:
            if r.key not in streamed:
                emit_update(emit, spec, r, (parent.checkpoint_id, parent.step))
    if wrote and wants(emit, "values"):
        emit("values", head.values)
    if wants(emit, "debug"):
        cp = head.checkpoint
        shown = debug_checkpoint(spec, where, head, parent)
        if before is not None and cp.metadata.get("source") == "input":
            values = dict(before) if parent.checkpoint_id else start_values(spec.schema)
            first = _input_checkpoint(where, head, parent, values)
            emit("debug", debug_event(cp.step, "checkpoint", first))
            shown["parent_config"] = first["config"]
        emit("debug", debug_event(cp.step + 1, "checkpoint", shown))


@dataclasses.dataclass(frozen=True, slots=True)
class Where:
    """Where a driver's checkpoints are shown to be, for its stream events: the root
    thread ("": the driver's own), the namespace, and, in a subgraph, the checkpoint that
    called each graph above it, by namespace (LangGraph's ``metadata["parents"]``)."""

    root_thread: str = ""
    ns: tuple[str, ...] = ()
    parents: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def thread_of(self, cp: CheckpointRecord) -> str:
        """The thread ``cp`` is shown on: the root thread, else its own."""
        return self.root_thread or cp.thread_id


def _config(thread: str, ns: str, checkpoint_id: str, parents: Mapping[str, str]) -> dict[str, Any]:
    """A checkpoint's config as the history shows it (a subgraph's has its
    ``checkpoint_map``: every namespace down to its own mapped to its checkpoint)."""
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns}
    conf["checkpoint_id"] = checkpoint_id
    if parents and checkpoint_id:
        conf["checkpoint_map"] = {**parents, ns: checkpoint_id}
    return {"configurable": conf}


def _configs(
    where: Where, cp: CheckpointRecord, checkpoint_id: str, parent: CheckpointRecord
) -> dict[str, Any]:
    """The ``config`` and ``parent_config`` of ``cp`` shown as ``checkpoint_id`` (its
    input checkpoint's id, or its own), after ``parent`` (none for a thread's first)."""
    thread = where.thread_of(cp)
    ns = "|".join(where.ns)
    return {
        "config": _config(thread, ns, checkpoint_id, where.parents),
        "parent_config": _config(thread, ns, parent.checkpoint_id, where.parents)
        if parent.checkpoint_id
        else None,
    }


def _input_checkpoint(
    where: Where, head: Head, parent: CheckpointRecord, values: dict[str, Any]
) -> dict[str, Any]:
    """The input checkpoint LangGraph shows before ``head``'s step, with ``values`` (the
    state before the input)."""
    cp = head.checkpoint
    cp_id = cp.checkpoint_id + INPUT_SUFFIX
    return {
        **_configs(where, cp, cp_id, parent),
        "values": public(values),
        "metadata": {"source": "input", "step": cp.step, "parents": dict(where.parents)},
        "next": [START],
        "tasks": [{"id": task_id(cp_id, START), "name": START, "interrupts": (), "state": None}],
    }


def debug_checkpoint(
    spec: GraphSpec,
    where: Where,
    head: Head,
    parent: CheckpointRecord,
) -> dict[str, Any]:
    """The ``debug`` stream's payload of a checkpoint, as ``get_state_history`` shows it."""
    cp = head.checkpoint
    thread = where.thread_of(cp)
    source = str(cp.metadata.get("source", "loop"))
    if source == "input":
        source = "loop"  # after LangGraph's input checkpoint, the loop's first
    return {
        **_configs(where, cp, cp.checkpoint_id, parent),
        "values": public(dict(head.values)),
        "metadata": {
            **lg_metadata(cp.metadata, cp.step + 1, source),
            "parents": dict(where.parents),
        },
        "next": list(cp.next),
        "tasks": [
            {
                "id": task_id(cp.checkpoint_id, t.key),
                "name": t.node,
                "interrupts": (),
                "state": _subgraph_config(spec, thread, where.ns, cp, t.key, t.node),
            }
            for t in tasks_of(spec, cp)
        ],
    }


def _subgraph_config(
    spec: GraphSpec,
    thread: str,
    namespace: tuple[str, ...],
    cp: CheckpointRecord,
    key: str,
    node: str,
) -> dict[str, Any] | None:
    """A subgraph task's ``state`` as the history lists it (its namespace's config)."""
    child = spec.nodes[node].subgraph if node in spec.nodes else None
    if child is None:
        return None
    stateful = getattr(child, "stateful", False)
    _, elements = child_place(stateful, cp.thread_id, key, node, cp.checkpoint_id, cp.step + 1)
    return {
        "configurable": {"thread_id": thread, "checkpoint_ns": "|".join((*namespace, *elements))}
    }


def _triggers(spec: GraphSpec | None, node: str, pushed: bool) -> tuple[str, ...]:
    """A task's triggers as LangGraph names them; a deferred node (``defer=True``) that a
    waiting edge leads to is started by its edges and that join at once, at the run's
    end, so both are named."""
    named = triggers(node, pushed)
    if spec is None or pushed or node not in spec.deferred:
        return named
    return (*named, *(f"join:{j.key}" for j in spec.joins if j.target == node))


def emit_tasks(emit: Emit, head: Head, plan: StepPlan, spec: GraphSpec | None = None) -> None:
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
                    "triggers": _triggers(spec, t.node, t.is_send),
                },
            ),
        )


def emit_results(emit: Emit, cp: CheckpointRecord, outcomes: Sequence[TaskOutcome]) -> None:
    """The ``debug`` stream's ``task_result`` events of a step's tasks that did not
    finish (an error, a question); a finished one's follows its update
    (:func:`emit_update`)."""
    for o in outcomes:
        if o.result is not None:
            continue
        interrupts = []
        if o.interrupt is not None:
            interrupts.append(
                InterruptValue.of(cp.checkpoint_id, o.key, o.interrupt[1], o.interrupt[0]).to_json()
            )
        error = None if o.error is None else repr(o.error)
        at = (cp.checkpoint_id, cp.step)
        emit("debug", _result_event(at, o.key, o.node, {}, error, interrupts))


def _result_event(
    at: tuple[str, int],
    key: str,
    node: str,
    result: dict[str, Any],
    error: str | None = None,
    interrupts: Sequence[Any] = (),
) -> dict[str, Any]:
    payload = {
        "id": task_id(at[0], key),
        "name": node,
        "error": error,
        "result": result,
        "interrupts": list(interrupts),
    }
    return debug_event(at[1] + 2, "task_result", payload)


__all__ = [
    "INPUT_SUFFIX",
    "Where",
    "debug_checkpoint",
    "emit_interrupts",
    "emit_results",
    "emit_step",
    "emit_tasks",
    "emit_update",
    "finished_shown",
    "lg_metadata",
    "start_values",
    "task_id",
]
