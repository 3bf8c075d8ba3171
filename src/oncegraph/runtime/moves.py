"""Run-level decisions, pure: what the run does between steps (the engine decides one step).

The driver asks these and executes the answers; none of them awaits or touches a store,
so each is unit-tested with plain values:

* :func:`next_move`: before a step runs, does a static breakpoint stop the run
  (an :class:`~oncegraph.runtime.decisions.Interrupt` of :data:`BREAKPOINT`), has the run
  used up its ``recursion_limit`` (:class:`OutOfSteps`), or does the step run (None)?
* :func:`open_interrupts`, :func:`answer_order`, :func:`next_answer`: which questions of
  a paused step are still open, and the ONE order they are answered in (the graph's
  declaration order of their nodes, then a node's ``Send`` tasks by number, so the n-th
  answer goes to the same question at the top level, in a subgraph and in every view);
  :func:`next_write`: a task's next write of a kind, numbered after those before it;
* :func:`may_plan_intents` and :func:`intent_planners`: whether the intents of the next
  step's calls may ride this step's checkpoint, and which nodes plan them.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from oncegraph.errors import RecursionLimitError
from oncegraph.graph.constants import START
from oncegraph.graph.spec import GraphSpec
from oncegraph.runtime.decisions import Interrupt
from oncegraph.runtime.engine import BREAKPOINT, StepPlan, Task
from oncegraph.storage.records import CheckpointRecord, RunRecord, TaskWrite, WriteKind

# -- between steps: breakpoints and the recursion limit -------------------------------------


@dataclass(frozen=True, slots=True)
class OutOfSteps:
    """The run took ``recursion_limit`` steps in this call without finishing: it fails
    (resumable) with ``error``."""

    error: RecursionLimitError


def has_breakpoints(spec: GraphSpec, before: Sequence[str] = (), after: Sequence[str] = ()) -> bool:
    """Whether any static breakpoint is set: the graph's (``compile``) or the call's."""
    return bool(spec.interrupt_before or spec.interrupt_after or before or after)


def out_of_steps(steps: int, recursion_limit: int) -> bool:
    """Whether ``steps`` taken in this call leave no step to run under the limit."""
    return steps >= recursion_limit


def breakpoint_at(
    spec: GraphSpec,
    cp: CheckpointRecord,
    tasks: Sequence[Task],
    *,
    before: Sequence[str] = (),
    after: Sequence[str] = (),
) -> dict[str, list[str]] | None:
    """The static breakpoint that stops the run before the step after ``cp``, if any:
    ``{"before": [nodes]}`` when a task's node is in ``before`` (or ``before`` is
    ``("*",)``), ``{"after": [nodes]}`` when a node that wrote ``cp`` is in ``after``. The
    step after an ``update_state`` checkpoint (``source="update"``) stops at neither: as
    in LangGraph, an update is seen by the breakpoints (``invoke(None, config)`` after an
    edit at a breakpoint goes on)."""
    if cp.metadata.get("source") == "update":
        return None  # LangGraph's update counts as seen by the breakpoints: none stops
    before = (*spec.interrupt_before, *before)
    after = (*spec.interrupt_after, *after)
    if after:
        wrote = [n for n in cp.metadata.get("writes", ()) if n != START]
        hit = [n for n in wrote if "*" in after or n in after]
        if hit and cp.metadata.get("source") != "input":
            return {"after": list(dict.fromkeys(hit))}
    if before:
        hit = [t.node for t in tasks if "*" in before or t.node in before]
        if hit:
            return {"before": list(dict.fromkeys(hit))}
    return None


def passed_breakpoint(task_writes: Iterable[TaskWrite]) -> bool:
    """Whether the breakpoint at this step was answered (continued past) already."""
    return any(w.task == BREAKPOINT and w.kind == WriteKind.RESUME for w in task_writes)


def next_move(
    spec: GraphSpec,
    cp: CheckpointRecord,
    plan: StepPlan,
    task_writes: Sequence[TaskWrite],
    *,
    run_id: str,
    steps: int,
    recursion_limit: int,
    before: Sequence[str] = (),
    after: Sequence[str] = (),
) -> Interrupt | OutOfSteps | None:
    """What the run does at the step after ``cp`` (planned as ``plan``) before any of its
    tasks run, ``steps`` steps into this call: pause at a static breakpoint not yet passed
    (checked first: a paused run has not taken the step), fail on the recursion limit, or
    run the step (None). ``before``/``after``: the call's breakpoints, added to the
    graph's."""
    if has_breakpoints(spec, before, after) and not passed_breakpoint(task_writes):
        stop = breakpoint_at(spec, cp, plan.tasks, before=before, after=after)
        if stop is not None:
            return Interrupt(((BREAKPOINT, stop, 0),))
    if out_of_steps(steps, recursion_limit):
        return OutOfSteps(
            RecursionLimitError(
                f"run {run_id} reached recursion_limit={recursion_limit} "
                f"after {steps} steps (the input step counts, as in LangGraph) without "
                "finishing; raise config['recursion_limit'] if that is expected, or fix the "
                "loop. The run is failed and can be continued with invoke(None, config)."
            )
        )
    return None


# -- a paused step: the open questions and the order they are answered in -------------------


def open_interrupts(writes: Sequence[TaskWrite]) -> dict[str, TaskWrite]:
    """Tasks still waiting for an answer: interrupted, not finished, not yet answered."""
    finished = {w.task for w in writes if w.kind == WriteKind.WRITES}
    answers: dict[str, int] = {}
    for w in writes:
        if w.kind == WriteKind.RESUME:
            answers[w.task] = answers.get(w.task, 0) + 1
    waiting: dict[str, TaskWrite] = {}
    for w in writes:
        open_ = w.kind == WriteKind.INTERRUPT and w.task not in finished
        if open_ and w.idx >= answers.get(w.task, 0) and w.idx >= _idx(waiting.get(w.task)):
            waiting[w.task] = w
    return waiting


def _idx(write: TaskWrite | None) -> int:
    return -1 if write is None else write.idx


def _answer_key(order: Mapping[str, int]) -> Callable[[str], tuple[int, int, str]]:
    def key(task: str) -> tuple[int, int, str]:
        node, _, send = task.partition(":")
        return (order.get(node, -1), int(send) if send.isdigit() else -1, task)

    return key


def answer_order(order: Mapping[str, int], tasks: Iterable[str]) -> list[str]:
    """``tasks`` (keys of tasks waiting for an answer) in the order they are answered:
    by their node's place in the graph (``order``: ``GraphSpec.order``; a task of no node,
    the breakpoint, first), then a node's ``Send`` tasks (``node:i``) by ``i`` after the
    task its edges pulled, then by key."""
    return sorted(tasks, key=_answer_key(order))


def next_answer(order: Mapping[str, int], waiting: Iterable[str]) -> str:
    """The task the next answer goes to (the first of :func:`answer_order`); ``waiting``
    must not be empty."""
    return min(waiting, key=_answer_key(order))


def count_writes(writes: Iterable[TaskWrite], task: str, kind: WriteKind) -> int:
    """How many writes of ``kind`` task ``task`` has in ``writes`` (the number its next
    one takes: its answers so far, for a ``RESUME``)."""
    return sum(1 for w in writes if w.kind == kind and w.task == task)


def next_write(
    writes: Iterable[TaskWrite],
    run: RunRecord,
    cp: CheckpointRecord,
    task: str,
    kind: WriteKind,
    value: Any,
) -> TaskWrite:
    """Task ``task``'s next write of ``kind`` on ``cp`` (in ``run``'s thread), holding
    ``value``: numbered after those of its kind in ``writes``."""
    n = count_writes(writes, task, kind)
    return TaskWrite(run.thread_id, cp.checkpoint_id, task, kind, n, value)


# -- planned intents --------------------------------------------------------------------------


def may_plan_intents(
    spec: GraphSpec,
    cp: CheckpointRecord,
    *,
    nested: bool,
    replay: bool,
    steps: int,
    recursion_limit: int,
    before: Sequence[str] = (),
    after: Sequence[str] = (),
) -> bool:
    """Whether the intents of the calls the step after ``cp`` will make may be written with
    ``cp``'s commit (:mod:`oncegraph.ledger.planned`): only when that step surely runs next
    in this call, at the top level of a live run: something is left to run, the run is not
    a subgraph (``nested``) nor a replay, no breakpoint can stop it, the recursion limit
    leaves it a step (``steps`` already taken), and it runs no ``Send`` tasks."""
    return bool(
        cp.next
        and not nested
        and not replay
        and not out_of_steps(steps, recursion_limit)
        and not has_breakpoints(spec, before, after)
        and not cp.metadata.get("sends")
    )


def intent_planners(spec: GraphSpec, cp: CheckpointRecord) -> list[tuple[str, Any]]:
    """The nodes the step after ``cp`` runs that can tell their calls from the state (a
    ``plan_intents`` method), once each, in order, with that method."""
    found: list[tuple[str, Any]] = []
    for name in dict.fromkeys(cp.next):
        node = spec.nodes.get(name)
        # looked up statically: an object that makes up attributes on demand (a mock) has
        # no planner unless it really defines one
        has = node is not None and inspect.getattr_static(node.fn, "plan_intents", None)
        planner = getattr(node.fn, "plan_intents", None) if has and node is not None else None
        if planner is not None:
            found.append((name, planner))
    return found


__all__ = [
    "BREAKPOINT",
    "OutOfSteps",
    "answer_order",
    "breakpoint_at",
    "count_writes",
    "has_breakpoints",
    "intent_planners",
    "may_plan_intents",
    "next_answer",
    "next_move",
    "next_write",
    "open_interrupts",
    "out_of_steps",
    "passed_breakpoint",
]
