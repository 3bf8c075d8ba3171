"""A node attempt under its timeout policy (:class:`~oncegraph.graph.timeouts.TimeoutPolicy`).

The policy is the graph's (what ``add_node(timeout=TimeoutPolicy(...))`` declares); this is
how the runtime holds a running task to it: the attempt is cancelled at its run deadline,
or once it shows no progress for the idle timeout, where progress is what the task streams
(``refresh_on="auto"``) or its heartbeat, as the policy's module says.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from oncegraph.errors import NodeTimeoutError
from oncegraph.graph.timeouts import TimeoutPolicy
from oncegraph.runtime.context import TaskContext
from oncegraph.runtime.streaming import keeping, modes_of


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
    try:
        async with asyncio.timeout_at(deadline()) as cm:

            def refresh() -> None:
                if cm.expired():
                    return
                last[0] = loop.time()
                cm.reschedule(deadline())

            def touch() -> None:
                if threading.get_ident() == loop_thread:
                    refresh()
                else:
                    loop.call_soon_threadsafe(refresh)

            if idle is not None:
                ctx.heartbeat = touch
                if policy.refresh_on == "auto":
                    ctx.emit = _touching(emit, touch)
            return await call()
    except TimeoutError as exc:
        if not cm.expired():
            raise
        kind = "run" if run_end is not None and loop.time() >= run_end else "idle"
        limit = run if kind == "run" else idle
        what = "ran longer than" if kind == "run" else "showed no progress for"
        raise NodeTimeoutError(
            f"node {ctx.node_name!r}: an attempt {what} {kind}_timeout={limit}s",
            node=ctx.node_name,
            kind=kind,
            run_timeout=run,
            idle_timeout=idle,
        ) from exc
    finally:
        ctx.emit = emit
        ctx.heartbeat = heartbeat


def _touching(emit: Callable[[str, Any], None], touch: Callable[[], None]) -> Any:
    def touched(mode: str, payload: Any) -> None:
        touch()
        emit(mode, payload)

    return keeping(modes_of(emit), touched)


__all__ = ["watched"]
