"""The step's verdict, pure: what the run does with the outcomes of a step's tasks.

:func:`decide` reads one :class:`~oncegraph.runtime.engine.TaskOutcome` per task and
returns exactly one of :class:`Crash`, :class:`Park`, :class:`Fail`,
:class:`Interrupt` or :class:`Commit` (see :mod:`oncegraph.runtime.engine` for what
each means and the precedence among siblings); the driver executes it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from oncegraph._slots import slot_init
from oncegraph.graph.spec import GraphSpec
from oncegraph.runtime.engine import (
    Head,
    StepPlan,
    TaskOutcome,
    TaskResult,
    advance,
    is_breakpoint,
    tasks_of,
)
from oncegraph.storage.records import LogEntry, RunStatus


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
    if plan.given:  # the answers' updates, committed with the step that used them
        results = (*plan.given, *results)
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
    "Commit",
    "Crash",
    "Decision",
    "Fail",
    "Interrupt",
    "Park",
    "decide",
]
