"""The run loop's pure part: routing and step application. No I/O, no awaits.

The driver (:mod:`oncegraph.runtime.driver`) feeds it the state of a checkpoint and the
writes of finished tasks; it answers with the next state, the log entries to append and
the nodes to run next, which the driver commits as ONE checkpoint before running them
(law 1).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from oncegraph.errors import ConfigError, GraphValidationError
from oncegraph.graph.constants import END
from oncegraph.graph.spec import GraphSpec
from oncegraph.ids import new_checkpoint_id
from oncegraph.state.channels import StepWrites, apply_writes
from oncegraph.storage.records import CheckpointRecord, LogEntry


@dataclass(frozen=True, slots=True)
class TaskResult:
    node: str
    update: Mapping[str, Any]
    goto: tuple[str, ...] = ()


@dataclass(slots=True)
class Head:
    """The driver's in-memory view of the checkpoint it stands on."""

    checkpoint: CheckpointRecord
    values: dict[str, Any]  # every channel, log channels materialized

    @property
    def version(self) -> int:
        return self.checkpoint.version


def _targets(spec: GraphSpec, node: str, values: Mapping[str, Any]) -> list[str]:
    out = list(spec.edges.get(node, ()))
    for branch in spec.branches.get(node, ()):
        state = spec.schema.to_node_input(values)
        picked = branch.router(state)
        if type(picked) is not str and inspect.isawaitable(picked):
            close = getattr(picked, "close", None)
            if close:
                close()
            raise ConfigError(f"the router of {node!r} must be a plain function, not async")
        items = picked if isinstance(picked, (list, tuple)) else [picked]
        for item in items:
            key = str(item)
            if branch.path_map is not None:
                if key not in branch.path_map:
                    raise GraphValidationError(
                        f"router of {node!r} returned {item!r}, which is not in its path_map "
                        f"{sorted(branch.path_map)}"
                    )
                key = branch.path_map[key]
            elif key not in spec.nodes and key != END:
                raise GraphValidationError(
                    f"router of {node!r} returned {item!r}, which is not a node of the graph"
                )
            out.append(key)
    return out


def next_nodes(
    spec: GraphSpec, values: Mapping[str, Any], finished: Sequence[TaskResult]
) -> tuple[str, ...]:
    """Nodes to run after ``finished``, in declaration order, END dropped."""
    found: set[str] = set()
    for task in finished:
        found.update(_targets(spec, task.node, values))
        for target in task.goto:
            if target != END and target not in spec.nodes:
                raise GraphValidationError(
                    f"node {task.node!r} returned Command(goto={target!r}); no such node"
                )
            found.add(target)
    found.discard(END)
    order = spec.order
    return tuple(sorted(found, key=order.__getitem__))


def advance(
    spec: GraphSpec,
    head: Head,
    run_id: str,
    results: Sequence[TaskResult],
    *,
    step: int,
    source: str,
) -> tuple[Head, list[LogEntry], StepWrites]:
    """Apply ``results`` to ``head`` and build the next checkpoint (not yet committed)."""
    schema = spec.schema
    writes = apply_writes(schema, head.values, [(r.node, r.update) for r in results])
    nxt = next_nodes(spec, writes.values, results)
    counts = dict(head.checkpoint.logs)
    entries: list[LogEntry] = []
    for channel, value in writes.stored_log:  # encoded by the channels' codecs
        seq = counts.get(channel, 0)
        entries.append(LogEntry(channel, seq, value))
        counts[channel] = seq + 1
    stored = writes.stored  # value channels encoded by their codecs
    checkpoint = CheckpointRecord(
        checkpoint_id=new_checkpoint_id(),
        thread_id=head.checkpoint.thread_id,
        run_id=run_id,
        step=step,
        version=head.checkpoint.version + 1,
        parent_checkpoint_id=head.checkpoint.checkpoint_id or None,
        values=stored,
        logs=counts,
        next=nxt,
        metadata={"source": source, "writes": [r.node for r in results]},
    )
    return Head(checkpoint, writes.values), entries, writes


def empty_head(spec: GraphSpec, thread_id: str) -> Head:
    """The state of a thread that has no checkpoint yet."""
    logs = {c: 0 for c in spec.schema.log_channels()}
    checkpoint = CheckpointRecord("", thread_id, "", -1, 0, None, {}, logs, ())
    return Head(checkpoint, spec.schema.initial())
