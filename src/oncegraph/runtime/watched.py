"""A node attempt under its timeout policy (:class:`~oncegraph.graph.timeouts.TimeoutPolicy`).

The policy is the graph's (what ``add_node(timeout=TimeoutPolicy(...))`` declares); this is
how the runtime holds a running task to it: the attempt is cancelled at its run deadline,
or once it shows no progress for the idle timeout, where progress is what the task streams
(``refresh_on="auto"``) or its heartbeat, as the policy's module says.

An observer of timed attempts (``{"configurable": {CONFIG_KEY_TIMED_ATTEMPT_OBSERVER:
callback}}``, LangGraph's name and key) is handed an :class:`AttemptEvent` when each
such attempt starts, when it shows progress (at most four times an idle window) and
when it finishes (``status`` ``"success"`` or ``"error"`` with the error's type and
text), the finish before anything that follows the attempt (a retry, the node's error
handler). It only observes: its errors are logged and never reach the run.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from oncegraph.errors import NodeTimeoutError
from oncegraph.graph.timeouts import TimeoutPolicy
from oncegraph.runtime.context import TaskContext
from oncegraph.runtime.stepevents import task_id
from oncegraph.runtime.streaming import keeping, modes_of

TIMED_ATTEMPT_OBSERVER = "__pregel_timed_attempt_observer"
"""The ``configurable`` key of an observer of timed attempts (see the module docstring)."""

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AttemptContext:
    """What stays the same over one timed attempt's events."""

    task_id: str
    task_name: str
    attempt: int
    run_id: str | None
    thread_id: str | None
    checkpoint_ns: str | None
    started_at: datetime
    run_timeout_secs: float | None
    idle_timeout_secs: float | None
    refresh_on: str | None


@dataclass(frozen=True, slots=True)
class AttemptEvent:
    """One event of a timed attempt: ``"start"``, ``"progress"`` or ``"finish"``."""

    context: AttemptContext
    event: Literal["start", "progress", "finish"]
    progress_at: datetime | None = None
    finished_at: datetime | None = None
    status: Literal["success", "error"] | None = None
    error_type: str | None = None
    error_message: str | None = None


def _observer(ctx: TaskContext) -> Callable[[AttemptEvent], Any] | None:
    found = ctx.config.configurable.get(TIMED_ATTEMPT_OBSERVER)
    return found if callable(found) else None


def _tell(observer: Callable[[AttemptEvent], Any], event: AttemptEvent) -> None:
    try:
        observer(event)
    except Exception:  # an observer's failure is not the run's
        _log.warning("the timed attempt observer failed", exc_info=True)


async def watched(
    policy: TimeoutPolicy, ctx: TaskContext, call: Callable[[], Awaitable[Any]]
) -> Any:
    """``call()`` under ``policy``; progress signals of task ``ctx`` push the idle
    deadline on while it runs."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    run = policy.run_seconds
    idle = policy.idle_seconds
    run_end = None if run is None else started + run
    last = [started]
    loop_thread = threading.get_ident()

    def deadline() -> float | None:
        ends = [e for e in (run_end, None if idle is None else last[0] + idle) if e]
        return min(ends) if ends else None

    emit = ctx.emit
    heartbeat = ctx.heartbeat
    observer = _observer(ctx)
    told: AttemptContext | None = None
    if observer is not None:
        told = AttemptContext(
            task_id=task_id(ctx.checkpoint_id, ctx.task_key),
            task_name=ctx.node_name,
            attempt=ctx.attempt,
            run_id=ctx.run_id,
            thread_id=ctx.thread_id,
            checkpoint_ns="|".join(ctx.ns),
            started_at=datetime.now(UTC),
            run_timeout_secs=run,
            idle_timeout_secs=idle,
            refresh_on=policy.refresh_on if idle is not None else None,
        )
        _tell(observer, AttemptEvent(told, "start"))
    told_at = [started]
    try:
        async with asyncio.timeout_at(deadline()) as cm:

            def refresh() -> None:
                if cm.expired():
                    return
                last[0] = loop.time()
                cm.reschedule(deadline())
                if told is not None and observer is not None and idle is not None:
                    _progress(observer, told, told_at, last[0], idle)

            def touch() -> None:
                if threading.get_ident() == loop_thread:
                    refresh()
                else:
                    loop.call_soon_threadsafe(refresh)

            if idle is not None:
                ctx.heartbeat = touch
                if policy.refresh_on == "auto":
                    ctx.emit = _touching(emit, touch)
            value = await call()
    except TimeoutError as exc:
        if not cm.expired():
            _finished(observer, told, exc)
            raise
        kind = "run" if run_end is not None and loop.time() >= run_end else "idle"
        limit = run if kind == "run" else idle
        what = "ran longer than" if kind == "run" else "showed no progress for"
        error = NodeTimeoutError(
            f"node {ctx.node_name!r}: an attempt {what} {kind}_timeout={limit}s",
            node=ctx.node_name,
            kind=kind,
            run_timeout=run,
            idle_timeout=idle,
        )
        _finished(observer, told, error)
        raise error from exc
    except BaseException as exc:
        _finished(observer, told, exc)
        raise
    else:
        _finished(observer, told, None)
        return value
    finally:
        ctx.emit = emit
        ctx.heartbeat = heartbeat


def _progress(
    observer: Callable[[AttemptEvent], Any],
    told: AttemptContext,
    told_at: list[float],
    now: float,
    idle: float,
) -> None:
    if now - told_at[0] >= idle / 4:  # at most four progress events an idle window
        told_at[0] = now
        _tell(observer, AttemptEvent(told, "progress", progress_at=datetime.now(UTC)))


def _finished(
    observer: Callable[[AttemptEvent], Any] | None,
    told: AttemptContext | None,
    error: BaseException | None,
) -> None:
    if observer is None or told is None:
        return
    now = datetime.now(UTC)
    if error is None:
        _tell(observer, AttemptEvent(told, "finish", finished_at=now, status="success"))
        return
    _tell(
        observer,
        AttemptEvent(
            told,
            "finish",
            finished_at=now,
            status="error",
            error_type=type(error).__name__,
            error_message=str(error),
        ),
    )


def _touching(emit: Callable[[str, Any], None], touch: Callable[[], None]) -> Any:
    def touched(mode: str, payload: Any) -> None:
        touch()
        emit(mode, payload)

    return keeping(modes_of(emit), touched)


__all__ = ["TIMED_ATTEMPT_OBSERVER", "AttemptContext", "AttemptEvent", "watched"]
