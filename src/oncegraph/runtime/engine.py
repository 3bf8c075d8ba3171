"""The run loop's pure part: it decides, the driver does. No I/O, no awaits.

A step, as the driver (:mod:`oncegraph.runtime.driver`) runs it::

    plan = plan_step(head, task_writes)        which tasks run, with which answers
    outcomes = <the driver runs plan.todo>     one TaskOutcome per task
    decision = decide(spec, head, plan, outcomes, run_id=...)

and the decision is exactly one of:

* :class:`Crash`: an in-process fault fired; stop, write nothing.
* :class:`Park`: an effect's outcome is unknown and its policy forbids guessing; the run
  becomes ``needs_review`` (law 5).
* :class:`Fail`: a node (or applying the step's writes) raised; the run becomes
  ``failed``, resumable.
* :class:`Interrupt`: tasks called ``interrupt()``; their questions are kept and the run
  becomes ``interrupted`` (law 11).
* :class:`Commit`: the next checkpoint (state, log entries, the nodes to run next), to be
  committed as ONE compare-and-swap before any of those nodes runs (law 1).

Precedence when siblings disagree: crash, then park, then fail, then interrupt; a step
commits only when every task finished. Everything here is deterministic given its
inputs (apart from the new checkpoint's id), so unit tests drive it with no event loop
and no store.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from oncegraph.errors import ConfigError, GraphValidationError
from oncegraph.graph.constants import END
from oncegraph.graph.spec import GraphSpec
from oncegraph.ids import new_checkpoint_id
from oncegraph.state.channels import StepWrites, apply_writes
from oncegraph.storage.records import CheckpointRecord, LogEntry, RunStatus, TaskWrite
from oncegraph.storage.sql import rows


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


# -- one step: plan, outcomes, decision -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class StepPlan:
    """What the step after ``head`` runs.

    ``todo``: the nodes still to run, in the order the checkpoint names them; ``done``:
    siblings that finished in an earlier attempt of this step (their writes were kept as
    task writes, so they do not run again); ``resumes``: the interrupt answers given to
    each node, in order; ``alone``: the step has one task, so its effect results may ride
    the step's checkpoint commit; ``clear``: task writes exist for this step and the
    commit deletes them.
    """

    todo: tuple[str, ...]
    done: Mapping[str, TaskResult]
    resumes: Mapping[str, tuple[Any, ...]]
    alone: bool
    clear: bool
    questions: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)  # asked, by index


def plan_step(spec: GraphSpec, head: Head, task_writes: Sequence[TaskWrite]) -> StepPlan:
    """What the step after ``head`` runs; a head naming nodes this graph does not have, or
    a task write its schema cannot read, is a ``CorruptRecordError`` (nothing runs)."""
    cp = head.checkpoint
    unknown = [n for n in cp.next if n not in spec.nodes]
    if unknown:
        raise rows.corrupt(
            "oncegraph_checkpoints",
            cp.checkpoint_id,
            f"it names node(s) {unknown} to run next, which this graph does not have",
            thread_id=cp.thread_id,
            run_id=cp.run_id,
        )
    done: dict[str, TaskResult] = {}
    resumes: dict[str, list[Any]] = {}
    for w in task_writes:
        if w.kind == "writes":  # a finished sibling's update, typed again by the schema
            try:
                if not isinstance(w.value, dict) or not isinstance(w.value.get("goto"), list):
                    raise TypeError(f"expected {{'update': ..., 'goto': [...]}}; got {w.value!r}")
                update = spec.schema.decode_update(w.value["update"])
            except (ValueError, TypeError, KeyError) as exc:
                raise rows.corrupt(
                    "oncegraph_task_writes",
                    f"{w.checkpoint_id}/{w.task}",
                    f"the update does not fit the state schema ({exc})",
                    thread_id=w.thread_id,
                    run_id=cp.run_id,
                ) from exc
            done[w.task] = TaskResult(w.task, update, tuple(w.value["goto"]))
        elif w.kind == "resume":
            resumes.setdefault(w.task, []).append(w.value)
    asked: dict[str, dict[int, Any]] = {}
    for w in task_writes:
        if w.kind == "interrupt":
            asked.setdefault(w.task, {})[w.idx] = w.value
    nxt = head.checkpoint.next
    return StepPlan(
        todo=tuple(n for n in nxt if n not in done),
        done=done,
        resumes={k: tuple(v) for k, v in resumes.items()},
        alone=len(nxt) == 1,
        clear=bool(task_writes) or len(nxt) > 1,
        questions={k: tuple(v[i] for i in sorted(v)) for k, v in asked.items()},
    )


@dataclass(frozen=True, slots=True)
class TaskOutcome:
    """How one task of a step ended: exactly one field besides ``node`` is set."""

    node: str
    result: TaskResult | None = None
    interrupt: tuple[Any, int] | None = None  # (value, index) of the interrupt() raised
    error: BaseException | None = None
    park: tuple[str, str] | None = None  # (effect_id, reason): law 5 forbids guessing
    crash: BaseException | None = None  # an in-process fault: stop without writing


@dataclass(frozen=True, slots=True)
class Crash:
    signal: BaseException


@dataclass(frozen=True, slots=True)
class Park:
    effect_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class Fail:
    node: str
    error: BaseException
    applying: bool = False  # True: the nodes ran; applying their writes (or routing) failed
    nodes: tuple[str, ...] = ()  # with ``applying``: the nodes whose writes were applied

    @property
    def description(self) -> str:
        return f"{type(self.error).__name__}: {self.error}"


@dataclass(frozen=True, slots=True)
class Interrupt:
    waits: tuple[tuple[str, Any, int], ...]  # (node, value, index), in outcome order


@dataclass(frozen=True, slots=True)
class Commit:
    head: Head
    log: list[LogEntry]
    results: tuple[TaskResult, ...]  # in checkpoint order: what the step's nodes wrote
    run_status: RunStatus | None  # COMPLETED when nothing is left to run
    clear_task_writes: bool


Decision = Crash | Park | Fail | Interrupt | Commit


def decide(
    spec: GraphSpec,
    head: Head,
    plan: StepPlan,
    outcomes: Sequence[TaskOutcome],
    *,
    run_id: str,
) -> Decision:
    """The step's verdict from its tasks' outcomes (see the module docstring)."""
    for o in outcomes:
        if o.crash is not None:
            return Crash(o.crash)
    for o in outcomes:
        if o.park is not None:
            return Park(*o.park)
    for o in outcomes:
        if o.error is not None:
            return Fail(o.node, o.error)
    waits = tuple((o.node, *o.interrupt) for o in outcomes if o.interrupt is not None)
    if waits:
        return Interrupt(waits)
    done = dict(plan.done)
    for o in outcomes:
        assert o.result is not None, f"task {o.node!r} has no outcome"
        done[o.node] = o.result
    results = tuple(done[n] for n in head.checkpoint.next)
    try:
        nxt, entries, _ = advance(
            spec, head, run_id, results, step=head.checkpoint.step + 1, source="loop"
        )
    except Exception as exc:  # a bad update or a failing router: the run fails, resumable
        nodes = tuple(r.node for r in results)
        return Fail(nodes[0] if nodes else "", exc, applying=True, nodes=nodes)
    return Commit(
        head=nxt,
        log=entries,
        results=results,
        run_status=None if nxt.checkpoint.next else RunStatus.COMPLETED,
        clear_task_writes=plan.clear,
    )


def open_interrupts(writes: Sequence[TaskWrite]) -> dict[str, TaskWrite]:
    """Tasks still waiting for an answer: interrupted, not finished, not yet answered."""
    finished = {w.task for w in writes if w.kind == "writes"}
    answers: dict[str, int] = {}
    for w in writes:
        if w.kind == "resume":
            answers[w.task] = answers.get(w.task, 0) + 1
    waiting: dict[str, TaskWrite] = {}
    for w in writes:
        open_ = w.kind == "interrupt" and w.task not in finished
        if open_ and w.idx >= answers.get(w.task, 0) and w.idx >= _idx(waiting.get(w.task)):
            waiting[w.task] = w
    return waiting


def _idx(write: TaskWrite | None) -> int:
    return -1 if write is None else write.idx


__all__ = [
    "Commit",
    "Crash",
    "Decision",
    "Fail",
    "Head",
    "Interrupt",
    "Park",
    "StepPlan",
    "TaskOutcome",
    "TaskResult",
    "advance",
    "decide",
    "empty_head",
    "next_nodes",
    "open_interrupts",
    "plan_step",
]
