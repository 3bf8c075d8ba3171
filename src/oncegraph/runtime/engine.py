"""The run loop's pure part: it decides, the driver does. No I/O, no awaits.

A step, as the driver (:mod:`oncegraph.runtime.driver`) runs it::

    plan = plan_step(head, task_writes)        which tasks run, with which answers
    outcomes = <the driver runs plan.todo>     one TaskOutcome per task
    decision = decide(spec, head, plan, outcomes, run_id=...)

and the decision (:mod:`oncegraph.runtime.decisions`) is exactly one of:

* :class:`Crash`: an in-process fault fired; stop, write nothing.
* :class:`Park`: an effect's outcome is unknown and its policy forbids guessing; the run
  becomes ``needs_review`` (guarantee 5).
* :class:`Fail`: a node (or applying the step's writes) raised; the run becomes
  ``failed``, resumable.
* :class:`Interrupt`: tasks called ``interrupt()``; their questions are kept and the run
  becomes ``interrupted`` (guarantee 11).
* :class:`Commit`: the next checkpoint (state, log entries, the tasks to run next), to be
  committed as ONE compare-and-swap before any of those tasks runs (guarantee 1).

Tasks: a step runs the nodes its edges pulled (one task each, keyed by the node's name)
and the ``Send`` items routers and ``Command(goto=...)`` returned (one task each, keyed
``node:i`` by position, its payload stored in the checkpoint, see :func:`tasks_of`).
Waiting edges (``add_edge([a, b], c)``) fire once all their sources ran since they last
fired; what each has seen rides in the checkpoint's metadata. What the run does between
steps (static breakpoints, the recursion limit, which open interrupt an answer goes to,
planned intents) is decided in :mod:`oncegraph.runtime.moves`; where a step goes (edges,
routers, sends) in :mod:`oncegraph.runtime.routes`; the step's verdict from its tasks'
outcomes (:func:`~oncegraph.runtime.decisions.decide`) in :mod:`oncegraph.runtime.decisions`.

Precedence when siblings disagree: crash, then park, then fail, then interrupt; a step
commits only when every task finished. Everything here is deterministic given its
inputs (apart from the new checkpoint's id), so unit tests drive it with no event loop
and no store.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from oncegraph._json import dumps_state, loads, untag
from oncegraph._slots import slot_init
from oncegraph.errors import (
    CorruptRecordError,
    InvalidUpdateError,
    PayloadTooLargeError,
    corrupt,
)
from oncegraph.graph.spec import GraphSpec
from oncegraph.hitl.send import Send
from oncegraph.ids import new_checkpoint_id
from oncegraph.runtime.logkeys import stored_channel
from oncegraph.runtime.routes import RouterFailed, Routes, next_nodes, route
from oncegraph.runtime.sends import decode_send, encode_send
from oncegraph.runtime.stepresults import RESULTS, encode_results
from oncegraph.state.channels import StepWrites, apply_writes
from oncegraph.storage.records import CheckpointRecord, LogEntry, TaskWrite, WriteKind

#: The index of a task's ERROR write that keeps its node's own failure for the node's
#: error handler (index 0 is the step's failure, shown on the task in the state's views).
NODE_FAILURE = 1

#: The task key of a paused breakpoint (``interrupt_before`` / ``interrupt_after``).
BREAKPOINT = "__breakpoint__"

_NO_ARG: Any = object()


@slot_init
@dataclass(frozen=True, slots=True)
class TaskResult:
    """What one task wrote: its node's update and where it routes (``goto`` names and
    ``Send`` items). ``task`` is the task's key (the node name unless it was a Send)."""

    node: str
    update: Mapping[str, Any]
    goto: tuple[str | Send, ...] = ()
    task: str = ""
    # a node that returned several updates (a list of Commands): the ones after the first
    more: tuple[Mapping[str, Any], ...] = ()
    cached: bool = False  # served from the node cache (add_node(cache_policy=...))
    # The update as the node returned it, where ``update`` gave its messages their ids
    # (runtime/tasks.py): what the ``updates`` stream shows, as LangGraph shows it.
    shown: Mapping[str, Any] | None = None
    # the keys of the node's returned dict that the state has no field for: not state,
    # but its routers read them (LangGraph passes a node's return on to its branches)
    extra: Mapping[str, Any] | None = None

    @property
    def key(self) -> str:
        return self.task or self.node

    @property
    def as_returned(self) -> Mapping[str, Any]:
        return self.update if self.shown is None else self.shown


@slot_init
@dataclass(frozen=True, slots=True)
class Task:
    """One task of a step. ``key`` is its identity in the step: the node's name for a
    task its edges pulled, ``node:i`` for the i-th ``Send`` of the step; ``arg`` is a
    Send's payload (decoded), the task's input instead of the state; ``timeout`` a
    Send's own ``TimeoutPolicy``, which stands for the node's."""

    key: str
    node: str
    arg: Any = _NO_ARG
    timeout: Any = None

    @property
    def is_send(self) -> bool:
        return self.arg is not _NO_ARG


@dataclass(slots=True)
class Head:
    """The driver's in-memory view of the checkpoint it stands on."""

    checkpoint: CheckpointRecord
    values: dict[str, Any]  # every channel, log channels materialized

    @property
    def version(self) -> int:
        return self.checkpoint.version


_PULLED: dict[tuple[str, ...], tuple[Task, ...]] = {}


def _pulled_tasks(names: tuple[str, ...]) -> tuple[Task, ...]:
    """The tasks of a step with no sends: one per pulled node. Tasks are immutable, so
    the tuple for one ``next`` is made once and shared (a graph has few such tuples;
    the cache is bounded all the same)."""
    if type(names) is not tuple:  # a record built by hand may hold a list: not a key
        return tuple(Task(n, n) for n in names)
    tasks = _PULLED.get(names)
    if tasks is None:
        tasks = tuple(Task(n, n) for n in names)
        if len(_PULLED) >= 4096:
            _PULLED.clear()
        _PULLED[names] = tasks
    return tasks


def tasks_of(spec: GraphSpec, cp: CheckpointRecord) -> tuple[Task, ...]:
    """The tasks the step after ``cp`` runs: the pulled nodes, then the sends.

    ``cp.next`` lists every task's node (pulled ones first); ``metadata["sends"]`` holds
    the sends' payloads, one per trailing entry of ``next`` (older checkpoints have none).
    """
    sends = cp.metadata.get("sends") or ()
    if not sends:
        return _pulled_tasks(cp.next)
    pulled = cp.next[: len(cp.next) - len(sends)]
    tasks = [Task(n, n) for n in pulled]
    for i, stored in enumerate(sends):
        send = decode_send(spec, stored)
        tasks.append(Task(f"{send.node}:{i}", send.node, send.arg, send.timeout))
    return tuple(tasks)


def in_write_order(results: Sequence[TaskResult]) -> Sequence[TaskResult]:
    """A step's results in the order their writes apply, as LangGraph applies them: the
    tasks the edges pulled by node name, then the ``Send`` tasks in the order they were
    sent. A reducer (``operator.add``) sees the same order whichever task ended first."""
    if len(results) < 2:
        return results
    return sorted(results, key=_write_key)  # stable: the sends keep their order


def _write_key(result: TaskResult) -> tuple[bool, str]:
    if result.node == GIVEN:  # an answer's update applies first, as the step's input
        return (False, "")
    sent = result.task not in ("", result.node)
    return (sent, "" if sent else result.node)


def _writes(results: Sequence[TaskResult]) -> list[tuple[str, Mapping[str, Any]]]:
    """Each result's updates as ``(node, update)`` pairs, in write order."""
    results = in_write_order(results)
    pairs = [(r.node, r.update) for r in results]
    if not any(r.more for r in results):
        return pairs
    return [(r.node, u) for r in results for u in (r.update, *r.more)]


def advance(
    spec: GraphSpec,
    head: Head,
    run_id: str,
    results: Sequence[TaskResult],
    *,
    step: int,
    source: str,
    config: Mapping[str, Any] | None = None,
    meta: Mapping[str, Any] | None = None,
    routed: Mapping[tuple[str, int], Any] | None = None,
) -> tuple[Head, list[LogEntry], StepWrites]:
    """Apply ``results`` to ``head`` and build the next checkpoint (not yet committed).

    The checkpoint names every next task (``next``: pulled nodes, then the sends'
    nodes), the sends' payloads and the waiting edges' progress (``metadata``), so the
    step after it is fully decided before anything runs (guarantee 1)."""
    schema = spec.schema
    writes = apply_writes(schema, head.values, _writes(results))
    routes = route(
        spec,
        writes.values,
        in_write_order(results),
        joins=head.checkpoint.metadata.get("joins"),
        config=config,
        routed=routed,
        deferred=head.checkpoint.metadata.get("deferred"),
    )
    counts = dict(head.checkpoint.logs)
    entries: list[LogEntry] = []
    for channel, value in writes.stored_log:  # encoded by the channels' codecs
        seq = counts.get(channel, 0)
        entries.append(LogEntry(stored_channel(counts, channel), seq, value))
        counts[channel] = seq + 1
    stored = writes.stored  # value channels encoded by their codecs
    wrote = [r.node for r in results if r.node != GIVEN]  # the nodes (an answer's update: none)
    metadata: dict[str, Any] = {"source": source, "writes": wrote}
    if source != "input":  # a run's input is kept with the run itself
        kept = encode_results(schema, results)
        if kept:  # what each task wrote, for the history of the step before
            metadata[RESULTS] = kept
    nxt = routes.pulled
    if routes.sends:
        metadata["sends"] = [encode_send(spec, s) for s in routes.sends]
        nxt = (*nxt, *(s.node for s in routes.sends))
    if routes.joins:
        metadata["joins"] = dict(routes.joins)
    if routes.deferred:
        metadata["deferred"] = list(routes.deferred)
    if meta:
        metadata.update(meta)
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
        metadata=metadata,
    )
    return Head(checkpoint, writes.values), entries, writes


def with_finished(
    spec: GraphSpec, values: Mapping[str, Any], results: Sequence[TaskResult]
) -> dict[str, Any]:
    """``values`` with the writes of a step's finished tasks applied (what LangGraph
    shows of a step that stopped with some of its tasks done; nothing is committed).
    Writes that do not apply (a sibling's bad update) leave ``values`` as they are."""
    if not results:
        return dict(values)
    try:
        return apply_writes(spec.schema, values, _writes(results)).values
    except Exception:  # the step's commit reports it when the step runs again
        return dict(values)


def empty_head(spec: GraphSpec, thread_id: str) -> Head:
    """The state of a thread that has no checkpoint yet."""
    logs = {c: 0 for c in spec.schema.log_channels()}
    checkpoint = CheckpointRecord("", thread_id, "", -1, 0, None, {}, logs, ())
    return Head(checkpoint, spec.schema.initial())


# -- one step: plan, outcomes, decision -----------------------------------------------------


@slot_init
@dataclass(frozen=True, slots=True)
class StepPlan:
    """What the step after ``head`` runs.

    ``tasks``: every task of the step, in checkpoint order; ``todo``: those still to run;
    ``done``: siblings that finished in an earlier attempt of this step (their writes
    were kept as task writes, so they do not run again), by task key; ``resumes``: the
    interrupt answers given to each task, in order; ``alone``: the step has one task, so
    its effect results may ride the step's checkpoint commit; ``clear``: task writes
    may exist for this step and the commit deletes them (not those of a step that asked
    an ``interrupt()``: they stay with its checkpoint, so its history shows what each
    task asked and was answered; retention prunes them with the checkpoint);
    ``answered``: how many answers (resume writes) the step holds.
    """

    todo: tuple[Task, ...]
    done: Mapping[str, TaskResult]
    resumes: Mapping[str, tuple[Any, ...]]
    alone: bool
    clear: bool
    tasks: tuple[Task, ...] = ()
    answered: int = 0
    questions: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)  # asked, by index
    # by task key: the node's own error, kept when its error handler failed (the resumed
    # step runs the handler again, not the node)
    failures: Mapping[str, Any] = field(default_factory=dict)
    # what the caller's answers brought with them (``Command(resume=..., update=...)``), in
    # the order given: applied before the step's tasks run, committed with their writes
    given: tuple[TaskResult, ...] = ()


def decode_result(spec: GraphSpec, task: str, node: str, stored: Mapping[str, Any]) -> TaskResult:
    """A finished sibling's writes as kept in a task write, typed again by the schema."""
    update = spec.schema.decode_update(stored["update"])
    goto: list[str | Send] = []
    for item in stored.get("goto", ()):
        goto.append(decode_send(spec, item) if isinstance(item, Mapping) else str(item))
    by = str(stored.get("by") or node)  # an error handler's result stands for its node's
    more = tuple(spec.schema.decode_update(u) for u in stored.get("more", ()))
    extra = untag(stored["extra"]) if "extra" in stored else None
    return TaskResult(by, update, tuple(goto), task if task != by else "", more, extra=extra)


def encode_result(spec: GraphSpec, result: TaskResult) -> dict[str, Any]:
    """What :func:`decode_result` reads back."""
    out = {
        "update": spec.schema.encode_update(result.update),
        "goto": [encode_send(spec, g) if isinstance(g, Send) else g for g in result.goto],
    }
    if result.node not in spec.nodes:  # an error handler's (add_node(error_handler=...))
        out["by"] = result.node
    if result.more:
        out["more"] = [spec.schema.encode_update(u) for u in result.more]
    if result.extra:  # kept for the routers of a resumed step when JSON can hold them
        try:
            out["extra"] = loads(dumps_state(result.extra))
        except (InvalidUpdateError, PayloadTooLargeError):
            pass  # not state: a resumed step's routers go without them
    return out


_EMPTY: Mapping[str, Any] = MappingProxyType({})


def _corrupt_head(cp: CheckpointRecord, why: str) -> CorruptRecordError:
    """The error of a head checkpoint the graph cannot run from."""
    return corrupt(
        "oncegraph_checkpoints", cp.checkpoint_id, why, thread_id=cp.thread_id, run_id=cp.run_id
    )


GIVEN = "__input__"
"""The task key of an update that came with an answer (``Command(resume=..., update=...)``),
kept as a task write of the step it answers, as LangGraph keeps its input's writes."""


def given_head(spec: GraphSpec, head: Head, plan: StepPlan) -> Head:
    """``head`` as the step's tasks read it: the answers' updates (``plan.given``) applied,
    nothing committed (the step's commit applies them with the tasks' writes)."""
    if not plan.given:
        return head
    return Head(head.checkpoint, apply_writes(spec.schema, head.values, _writes(plan.given)).values)


def _stored_result(spec: GraphSpec, w: TaskWrite, node: str, run_id: str, what: str) -> TaskResult:
    """A task's stored result (``w``, a ``writes`` task write) typed again; a row that does
    not fit is a corrupt row, named with its thread and run."""
    try:
        if not isinstance(w.value, dict) or not isinstance(w.value.get("goto"), list):
            raise TypeError(f"expected {{'update': ..., 'goto': [...]}}; got {w.value!r}")
        return decode_result(spec, w.task, node, w.value)
    except (ValueError, TypeError, KeyError) as exc:
        raise corrupt(
            "oncegraph_task_writes",
            f"{w.checkpoint_id}/{w.task}",
            f"{what} does not fit the state schema ({exc})",
            thread_id=w.thread_id,
            run_id=run_id,
        ) from exc


def plan_step(spec: GraphSpec, head: Head, task_writes: Sequence[TaskWrite]) -> StepPlan:
    """What the step after ``head`` runs; a head naming nodes this graph does not have, or
    a task write its schema cannot read, is a ``CorruptRecordError`` (nothing runs)."""
    cp = head.checkpoint
    try:
        tasks = tasks_of(spec, cp)
    except (ValueError, TypeError, KeyError) as exc:
        raise _corrupt_head(cp, f"its sends do not fit the graph ({exc})") from exc
    unknown = [t.node for t in tasks if t.node not in spec.nodes]
    if unknown:
        raise _corrupt_head(
            cp, f"it names node(s) {unknown} to run next, which this graph does not have"
        )
    if not task_writes:  # the common case: nothing ran, answered or asked here yet
        return StepPlan(
            todo=tasks,
            done=_EMPTY,
            resumes=_EMPTY,
            alone=len(tasks) == 1,
            clear=len(tasks) > 1,
            tasks=tasks,
            questions=_EMPTY,
        )
    nodes = {t.key: t.node for t in tasks}
    done: dict[str, TaskResult] = {}
    resumes: dict[str, list[Any]] = {}
    given: list[TaskResult] = []
    answered = 0
    for w in task_writes:
        if w.kind == WriteKind.WRITES and w.task in nodes:  # a finished sibling, typed again
            done[w.task] = _stored_result(spec, w, nodes[w.task], cp.run_id, "the update")
        elif w.kind == WriteKind.WRITES and w.task == GIVEN:  # an answer's update
            given.append(_stored_result(spec, w, GIVEN, cp.run_id, "the answer's update"))
        elif w.kind == WriteKind.RESUME:
            resumes.setdefault(w.task, []).append(w.value)
            answered += 1
    asked: dict[str, dict[int, Any]] = {}
    failures: dict[str, Any] = {}
    for w in task_writes:
        if w.kind == WriteKind.INTERRUPT:
            asked.setdefault(w.task, {})[w.idx] = w.value
        elif w.kind == WriteKind.ERROR and w.idx == NODE_FAILURE and isinstance(w.value, dict):
            failures[w.task] = w.value
    return StepPlan(
        todo=tuple(t for t in tasks if t.key not in done),
        done=done,
        resumes={k: tuple(v) for k, v in resumes.items()},
        alone=len(tasks) == 1,
        clear=not asked,  # a step that asked keeps its writes: its history shows them
        tasks=tasks,
        answered=answered,
        questions={k: tuple(v[i] for i in sorted(v)) for k, v in asked.items()},
        failures=failures,
        given=tuple(given),
    )


@slot_init
@dataclass(frozen=True, slots=True)
class TaskOutcome:
    """How one task of a step ended: exactly one field besides ``node``/``task`` is set.
    ``task`` is the task's key (the node's name unless it was a Send)."""

    node: str
    result: TaskResult | None = None
    interrupt: tuple[Any, int] | None = None  # (value, index) of the interrupt() raised
    error: BaseException | None = None
    park: tuple[str, str] | None = None  # (effect_id, reason): guarantee 5 forbids guessing
    crash: BaseException | None = None  # an in-process fault: stop without writing
    task: str = ""

    @property
    def key(self) -> str:
        return self.task or self.node


def is_breakpoint(task: str, value: Any) -> bool:
    """Whether an interrupt write is a static breakpoint's pause, not a question: this
    graph's (task :data:`BREAKPOINT`) or a subgraph's, raised into its parent's task as
    ``{BREAKPOINT: ...}``."""
    return task == BREAKPOINT or (isinstance(value, Mapping) and BREAKPOINT in value)


__all__ = [
    "BREAKPOINT",
    "GIVEN",
    "Head",
    "RouterFailed",
    "Routes",
    "StepPlan",
    "Task",
    "TaskOutcome",
    "TaskResult",
    "advance",
    "decode_result",
    "decode_send",
    "empty_head",
    "encode_result",
    "encode_send",
    "given_head",
    "is_breakpoint",
    "next_nodes",
    "plan_step",
    "route",
    "tasks_of",
    "with_finished",
]
