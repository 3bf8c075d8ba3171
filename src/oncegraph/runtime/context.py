"""Per-task context, reachable from node and tool code through context variables.

``current_task()`` is internal; ``current_effect()`` is public: inside a tool or an
``effect(...)`` call it gives the ``effect_id`` / ``idempotency_key`` to hand to a
provider, so a re-sent request carries the SAME key.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from oncegraph.errors import ConfigError
from oncegraph.hitl.interrupt import find_task_with
from oncegraph.observe import logs

if TYPE_CHECKING:
    from oncegraph.ledger.facts import FactLog
    from oncegraph.runtime.claim import Claim
    from oncegraph.runtime.config import RunConfig
    from oncegraph.runtime.faults import FaultPlan
    from oncegraph.runtime.replay import ReplayPolicy
    from oncegraph.storage.protocols import Checkpointer
    from oncegraph.storage.records import EffectRecord


@dataclass(slots=True)
class TaskContext:
    """One running task. ``node`` is the task's SCOPE, what its command ids start with
    (:func:`oncegraph.ledger.keys.next_command_id`): the node's name for a task its edges
    pulled, ``node:i`` for the i-th ``Send`` of the step, and, inside a subgraph,
    ``<parent scope>:<parent step>|<child task>`` (nested as deep as subgraphs go), so
    every task's effects get their own keys. ``name`` is the node's own name, ``task``
    the task's key in its step, ``ns`` the subgraph namespace it runs in."""

    run_id: str
    thread_id: str
    node: str
    step: int
    checkpoint_id: str
    store: Checkpointer
    config: RunConfig
    loop: asyncio.AbstractEventLoop
    emit: Callable[[str, Any], None]
    fault_plan: FaultPlan | None = None
    resume_values: list[Any] = field(default_factory=list)
    asked: list[Any] = field(default_factory=list)  # the questions those answers answered
    interrupt_count: int = 0
    interrupt_raised: tuple[Any, int] | None = None
    effect_count: int = 0
    may_fold: bool = False  # the task is alone in its step: results may ride the checkpoint
    fresh: bool = False  # first attempt of this step in this process: nothing recorded yet
    staged_effects: list[EffectRecord] = field(default_factory=list)
    # Intents the checkpoint this fresh step starts from wrote for its calls, by effect id
    # (oncegraph.ledger.planned); empty unless the step is fresh.
    planned: Mapping[str, EffectRecord] = field(default_factory=dict)
    # The store inserted every one of those intents with that checkpoint, so its rows are
    # exactly these records (a planned id already on record is left as it was: read it).
    planned_written: bool = False
    claim: Claim | None = None  # the run's claim: its token fences every write
    replay: ReplayPolicy | None = None  # set in a replay: what its effects may touch
    name: str = ""  # the node's name ("" = node)
    task: str = ""  # the task's key in its step ("" = node)
    ns: tuple[str, ...] = ()  # the subgraph namespace the task runs in (() = top level)
    # the checkpoint that called each graph above the task's, by namespace ({} = top level)
    parents: Mapping[str, str] = field(default_factory=dict)
    subgraph_calls: int = 0  # graphs this task ran as subgraphs so far (their order)
    attempt: int = 1  # which attempt of the node this is (a retry policy's: 2, 3, ...)
    first_attempt_at: float | None = None  # when its first attempt started (time.time())
    # push_message(...): (state key, message) the node wrote while running, added to
    # its update when it returns (oncegraph.graph.message.push_message)
    pushed: list[tuple[str, Any]] = field(default_factory=list)
    # LangChain callbacks of the running node (oncegraph.runtime.lcstream), in its config
    callbacks: tuple[Any, ...] = ()
    # runtime.heartbeat(): set while an attempt runs under an idle timeout
    heartbeat: Callable[[], None] | None = None
    # Inside a subgraph: the thread its checkpoints live on ("" = thread_id, which is
    # always the caller's thread, so effects are listed under the conversation).
    graph_thread: str = ""
    # the steps the run may still take in this call, this one included (the state's
    # managed fields, RemainingSteps: oncegraph.state.managed); None: not counted
    remaining_steps: int | None = None
    # the node's own error, kept when its error handler failed (runtime/tasks.py): a
    # resumed step runs the handler again with it, not the node
    node_failure: Mapping[str, Any] | None = None
    # The clock readings, random numbers and ids the task drew (oncegraph.ledger.facts).
    facts: FactLog | None = None
    cache: Any = None  # compile(cache=...): the node cache its @task calls may use

    @property
    def node_name(self) -> str:
        return self.name or self.node

    @property
    def task_key(self) -> str:
        return self.task or self.node

    @property
    def checkpoint_thread(self) -> str:
        """The thread of ``checkpoint_id`` (a subgraph's own thread, or ``thread_id``)."""
        return self.graph_thread or self.thread_id

    @property
    def fence(self) -> int | None:
        return self.claim.token if self.claim is not None else None

    @property
    def key_run_id(self) -> str:
        """The run id effect ids are computed with: the original run's in a recorded
        (evidence or simulation) replay, so the same calls find the same records."""
        if self.replay is not None and self.replay.recorded:
            return self.replay.evidence_run_id
        return self.run_id

    def check_open(self) -> None:
        """Raise unless a new attempt may start in this run (guarantee 13)."""
        if self.claim is not None:
            self.claim.check_open()

    def crash_point(self, point: str) -> None:
        if self.fault_plan is not None:
            self.fault_plan.hit(point)

    def streams(self, mode: str) -> bool:
        """Whether the caller reads ``mode`` events, so a node may skip work for a mode
        nobody streams (token deltas). An ``emit`` that streams names its modes in a
        ``modes`` attribute; one without it (``invoke``) streams nothing optional."""
        return mode in getattr(self.emit, "modes", ())


@dataclass(frozen=True, slots=True)
class CallSite:
    """Where a call happens: the run, thread, node and checkpoint its record belongs to;
    ``key_run_id`` is the run id its effect id is computed with (the original run's in a
    recorded replay, see ``TaskContext.key_run_id``)."""

    key_run_id: str
    run_id: str
    thread_id: str
    node: str
    checkpoint_id: str

    @classmethod
    def of(cls, ctx: TaskContext) -> CallSite:
        """Where the running task ``ctx`` calls."""
        return cls(ctx.key_run_id, ctx.run_id, ctx.thread_id, ctx.node, ctx.checkpoint_id)


@dataclass(slots=True)
class EffectContext:
    """The effect in progress: what a tool passes to its provider."""

    effect_id: str
    effect_type: str
    command_id: str
    run_id: str
    thread_id: str
    attempt: int
    provider_reference: str | None = None
    key: str | None = None  # a redelivery with a new key; otherwise the effect id

    @property
    def idempotency_key(self) -> str:
        return self.key or self.effect_id


_task: ContextVar[TaskContext | None] = ContextVar("oncegraph_task", default=None)
_effect: ContextVar[EffectContext | None] = ContextVar("oncegraph_effect", default=None)


def current_task() -> TaskContext | None:
    return _task.get()


def set_task(ctx: TaskContext | None) -> Any:
    return _task.set(ctx)


def crash_point(point: str) -> None:
    """Mark a user-defined crash point (for example inside a tool): a run's
    :class:`~oncegraph.runtime.faults.FaultPlan` for ``point`` fires here."""
    task = current_task()
    if task is not None:
        task.crash_point(point)


def reset_task(token: Any) -> None:
    _task.reset(token)


def current_effect() -> EffectContext:
    """The effect being performed; raises ``ConfigError`` outside a tool/effect call."""
    ctx = _effect.get()
    if ctx is None:
        raise ConfigError(
            "current_effect() is only available while a tool or effect(...) call is running"
        )
    return ctx


def effect_in_progress() -> EffectContext | None:
    """The effect being performed, or None (for the log lines written meanwhile)."""
    return _effect.get()


def set_effect(ctx: EffectContext | None) -> Any:
    return _effect.set(ctx)


def reset_effect(token: Any) -> None:
    _effect.reset(token)


def _log_place() -> dict[str, Any]:
    """The ids of the task and the effect this line is logged in (none outside a run)."""
    found: dict[str, Any] = {}
    task = current_task()
    if task is not None:
        found.update(run_id=task.run_id, thread_id=task.thread_id, node=task.node, step=task.step)
    effect = effect_in_progress()
    if effect is not None:
        found.update(
            run_id=effect.run_id,
            thread_id=effect.thread_id,
            effect_id=effect.effect_id,
            effect_type=effect.effect_type,
        )
    return found


logs.locate_with(_log_place)
find_task_with(current_task)
