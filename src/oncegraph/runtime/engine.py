"""The run loop's pure part: it decides, the driver does. No I/O, no awaits.

A step, as the driver (:mod:`oncegraph.runtime.driver`) runs it::

    plan = plan_step(head, task_writes)        which tasks run, with which answers
    outcomes = <the driver runs plan.todo>     one TaskOutcome per task
    decision = decide(spec, head, plan, outcomes, run_id=...)

and the decision is exactly one of:

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
planned intents) is decided in :mod:`oncegraph.runtime.moves`.

Precedence when siblings disagree: crash, then park, then fail, then interrupt; a step
commits only when every task finished. Everything here is deterministic given its
inputs (apart from the new checkpoint's id), so unit tests drive it with no event loop
and no store.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from oncegraph._slots import slot_init
from oncegraph.errors import ConfigError, GraphValidationError, corrupt
from oncegraph.graph.constants import END
from oncegraph.graph.spec import GraphSpec
from oncegraph.hitl.send import Send
from oncegraph.ids import new_checkpoint_id
from oncegraph.runtime.logkeys import stored_channel
from oncegraph.runtime.sends import decode_send, encode_send
from oncegraph.runtime.stepresults import RESULTS, encode_results
from oncegraph.state.channels import StepWrites, apply_writes
from oncegraph.storage.records import CheckpointRecord, LogEntry, RunStatus, TaskWrite, WriteKind

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
    Send's payload (decoded), the task's input instead of the state."""

    key: str
    node: str
    arg: Any = _NO_ARG

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
        tasks.append(Task(f"{send.node}:{i}", send.node, send.arg))
    return tuple(tasks)


# -- routing ------------------------------------------------------------------------------


def _targets(
    spec: GraphSpec,
    node: str,
    values: Mapping[str, Any],
    config: Mapping[str, Any] | None,
    routed: Mapping[tuple[str, int], Any] | None = None,
) -> list[str | Send]:
    out: list[str | Send] = list(spec.edges.get(node, ()))
    for index, branch in enumerate(spec.branches.get(node, ())):
        if routed is not None and (node, index) in routed:  # an async router, awaited
            picked = routed[(node, index)]
            if isinstance(picked, RouterFailed):
                raise picked.error
        elif branch.takes_config:
            picked = branch.router(branch.state_for(spec.schema, values), dict(config or {}))
        else:
            picked = branch.router(branch.state_for(spec.schema, values))
        if type(picked) is not str and inspect.isawaitable(picked):
            close = getattr(picked, "close", None)
            if close:
                close()
            raise ConfigError(f"the router of {node!r} must be a plain function, not async")
        items = picked if isinstance(picked, (list, tuple)) else [picked]
        for item in items:
            if isinstance(item, Send):
                out.append(item)
                continue
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


@dataclass(frozen=True, slots=True)
class RouterFailed:
    """An async router that raised (awaited before the step's pure decision)."""

    error: Exception


@slot_init
@dataclass(frozen=True, slots=True)
class Routes:
    """Where a step goes: the nodes its edges pull (declaration order), the sends (in
    order), and what each waiting edge has seen since it last fired."""

    pulled: tuple[str, ...]
    sends: tuple[Send, ...] = ()
    joins: Mapping[str, list[str]] = field(default_factory=dict)


def route(
    spec: GraphSpec,
    values: Mapping[str, Any],
    finished: Sequence[TaskResult],
    *,
    joins: Mapping[str, Sequence[str]] | None = None,
    config: Mapping[str, Any] | None = None,
    routed: Mapping[tuple[str, int], Any] | None = None,
) -> Routes:
    """The next step's tasks after ``finished`` ran and ``values`` is the new state.
    ``routed``: what the async routers picked, by ``(node, branch index)``."""
    found: set[str] = set()
    sends: list[Send] = []
    for task in finished:
        for target in (*_targets(spec, task.node, values, config, routed), *task.goto):
            if isinstance(target, Send):
                if target.node not in spec.nodes:
                    raise GraphValidationError(
                        f"node {task.node!r} sent Send({target.node!r}, ...); no such node"
                    )
                sends.append(target)
                continue
            if target != END and target not in spec.nodes:
                raise GraphValidationError(
                    f"node {task.node!r} returned Command(goto={target!r}); no such node"
                )
            found.add(target)
    if spec.triggers is not None:  # a Pregel app: the nodes subscribed to what was written
        triggers = spec.triggers
        for task in finished:
            for update in (task.update, *task.more):
                for chan in update:
                    found.update(triggers.get(chan, ()))
    seen: dict[str, list[str]] = {}
    if spec.joins:
        ran = {t.node for t in finished}
        before = joins or {}
        for join in spec.joins:
            got = set(before.get(join.key, ())) | (ran & set(join.sources))
            if got >= set(join.sources):
                found.add(join.target)
            elif got:
                seen[join.key] = [s for s in join.sources if s in got]
    found.discard(END)
    if len(found) < 2:  # nothing to order (spec.order builds its dict on every read)
        return Routes(tuple(found), tuple(sends), seen)
    order = spec.order
    return Routes(tuple(sorted(found, key=order.__getitem__)), tuple(sends), seen)


def next_nodes(
    spec: GraphSpec, values: Mapping[str, Any], finished: Sequence[TaskResult]
) -> tuple[str, ...]:
    """Nodes (pulled by edges) to run after ``finished``, in declaration order, END
    dropped; sends and waiting edges are in :func:`route`."""
    return route(spec, values, finished).pulled


def in_write_order(results: Sequence[TaskResult]) -> Sequence[TaskResult]:
    """A step's results in the order their writes apply, as LangGraph applies them: the
    tasks the edges pulled by node name, then the ``Send`` tasks in the order they were
    sent. A reducer (``operator.add``) sees the same order whichever task ended first."""
    if len(results) < 2:
        return results
    return sorted(results, key=_write_key)  # stable: the sends keep their order


def _write_key(result: TaskResult) -> tuple[bool, str]:
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
    )
    counts = dict(head.checkpoint.logs)
    entries: list[LogEntry] = []
    for channel, value in writes.stored_log:  # encoded by the channels' codecs
        seq = counts.get(channel, 0)
        entries.append(LogEntry(stored_channel(counts, channel), seq, value))
        counts[channel] = seq + 1
    stored = writes.stored  # value channels encoded by their codecs
    metadata: dict[str, Any] = {"source": source, "writes": [r.node for r in results]}
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


def decode_result(spec: GraphSpec, task: str, node: str, stored: Mapping[str, Any]) -> TaskResult:
    """A finished sibling's writes as kept in a task write, typed again by the schema."""
    update = spec.schema.decode_update(stored["update"])
    goto: list[str | Send] = []
    for item in stored.get("goto", ()):
        goto.append(decode_send(spec, item) if isinstance(item, Mapping) else str(item))
    by = str(stored.get("by") or node)  # an error handler's result stands for its node's
    more = tuple(spec.schema.decode_update(u) for u in stored.get("more", ()))
    return TaskResult(by, update, tuple(goto), task if task != by else "", more)


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
    return out


_EMPTY: Mapping[str, Any] = MappingProxyType({})


def plan_step(spec: GraphSpec, head: Head, task_writes: Sequence[TaskWrite]) -> StepPlan:
    """What the step after ``head`` runs; a head naming nodes this graph does not have, or
    a task write its schema cannot read, is a ``CorruptRecordError`` (nothing runs)."""
    cp = head.checkpoint
    try:
        tasks = tasks_of(spec, cp)
    except (ValueError, TypeError, KeyError) as exc:
        raise corrupt(
            "oncegraph_checkpoints",
            cp.checkpoint_id,
            f"its sends do not fit the graph ({exc})",
            thread_id=cp.thread_id,
            run_id=cp.run_id,
        ) from exc
    unknown = [t.node for t in tasks if t.node not in spec.nodes]
    if unknown:
        raise corrupt(
            "oncegraph_checkpoints",
            cp.checkpoint_id,
            f"it names node(s) {unknown} to run next, which this graph does not have",
            thread_id=cp.thread_id,
            run_id=cp.run_id,
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
    answered = 0
    for w in task_writes:
        if w.kind == WriteKind.WRITES and w.task in nodes:  # a finished sibling, typed again
            try:
                if not isinstance(w.value, dict) or not isinstance(w.value.get("goto"), list):
                    raise TypeError(f"expected {{'update': ..., 'goto': [...]}}; got {w.value!r}")
                done[w.task] = decode_result(spec, w.task, nodes[w.task], w.value)
            except (ValueError, TypeError, KeyError) as exc:
                raise corrupt(
                    "oncegraph_task_writes",
                    f"{w.checkpoint_id}/{w.task}",
                    f"the update does not fit the state schema ({exc})",
                    thread_id=w.thread_id,
                    run_id=cp.run_id,
                ) from exc
        elif w.kind == WriteKind.RESUME:
            resumes.setdefault(w.task, []).append(w.value)
            answered += 1
    asked: dict[str, dict[int, Any]] = {}
    for w in task_writes:
        if w.kind == WriteKind.INTERRUPT:
            asked.setdefault(w.task, {})[w.idx] = w.value
    return StepPlan(
        todo=tuple(t for t in tasks if t.key not in done),
        done=done,
        resumes={k: tuple(v) for k, v in resumes.items()},
        alone=len(tasks) == 1,
        clear=not asked,  # a step that asked keeps its writes: its history shows them
        tasks=tasks,
        answered=answered,
        questions={k: tuple(v[i] for i in sorted(v)) for k, v in asked.items()},
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
    task: str = ""  # the failed task's key (not ``applying``)

    @property
    def description(self) -> str:
        return f"{type(self.error).__name__}: {self.error}"


@dataclass(frozen=True, slots=True)
class Interrupt:
    """Tasks asked questions: ``(task key, value, index)`` in outcome order. A static
    breakpoint is one wait whose task is :data:`BREAKPOINT`."""

    waits: tuple[tuple[str, Any, int], ...]
    done: tuple[TaskResult, ...] = ()  # the step's finished tasks' writes, in task order

    @property
    def breakpoint(self) -> bool:
        """Only static breakpoints wait here (this graph's or a subgraph's)."""
        return all(is_breakpoint(task, value) for task, value, _ in self.waits)


def is_breakpoint(task: str, value: Any) -> bool:
    """Whether an interrupt write is a static breakpoint's pause, not a question: this
    graph's (task :data:`BREAKPOINT`) or a subgraph's, raised into its parent's task as
    ``{BREAKPOINT: ...}``."""
    return task == BREAKPOINT or (isinstance(value, Mapping) and BREAKPOINT in value)


@slot_init
@dataclass(frozen=True, slots=True)
class Commit:
    head: Head
    log: list[LogEntry]
    results: tuple[TaskResult, ...]  # in checkpoint order: what the step's tasks wrote
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
    config: Mapping[str, Any] | None = None,
    meta: Mapping[str, Any] | None = None,
    routed: Mapping[tuple[str, int], Any] | None = None,
) -> Decision:
    """The step's verdict from its tasks' outcomes (see the module docstring).

    ``config`` is what routers that take ``(state, config)`` receive; ``meta`` is added
    to the new checkpoint's metadata."""
    tasks = plan.tasks or tasks_of(spec, head.checkpoint)
    only = outcomes[0] if len(outcomes) == 1 and len(tasks) == 1 else None
    if (
        only is not None
        and only.result is not None
        and only.key == tasks[0].key
        and only.crash is None
        and only.park is None
        and only.error is None
        and only.interrupt is None
    ):
        results: tuple[TaskResult, ...] = (only.result,)  # one task, finished: the usual step
    else:
        for o in outcomes:
            if o.crash is not None:
                return Crash(o.crash)
        for o in outcomes:
            if o.park is not None:
                return Park(*o.park)
        for o in outcomes:
            if o.error is not None:
                return Fail(o.node, o.error, task=o.key)
        done = dict(plan.done)
        for o in outcomes:
            if o.result is not None:
                done[o.key] = o.result
        waits = tuple((o.key, *o.interrupt) for o in outcomes if o.interrupt is not None)
        if waits:
            return Interrupt(waits, tuple(done[t.key] for t in tasks if t.key in done))
        for o in outcomes:
            assert o.result is not None, f"task {o.key!r} has no outcome"
        results = tuple(done[t.key] for t in tasks)
    try:
        nxt, entries, _ = advance(
            spec,
            head,
            run_id,
            results,
            step=head.checkpoint.step + 1,
            source="loop",
            config=config,
            meta=meta,
            routed=routed,
        )
    except Exception as exc:  # a bad update or a failing router: the run fails, resumable
        nodes = tuple(dict.fromkeys(r.node for r in results))
        return Fail(nodes[0] if nodes else "", exc, applying=True, nodes=nodes)
    return Commit(
        head=nxt,
        log=entries,
        results=results,
        run_status=None if nxt.checkpoint.next else RunStatus.COMPLETED,
        clear_task_writes=plan.clear,
    )


__all__ = [
    "BREAKPOINT",
    "Commit",
    "Crash",
    "Decision",
    "Fail",
    "Head",
    "Interrupt",
    "Park",
    "RouterFailed",
    "Routes",
    "StepPlan",
    "Task",
    "TaskOutcome",
    "TaskResult",
    "advance",
    "decide",
    "decode_result",
    "decode_send",
    "empty_head",
    "encode_result",
    "encode_send",
    "is_breakpoint",
    "next_nodes",
    "plan_step",
    "route",
    "tasks_of",
    "with_finished",
]
