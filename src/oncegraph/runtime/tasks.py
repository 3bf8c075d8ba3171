"""Running one task of a step: call the node, turn what it did into a ``TaskOutcome``.

A coroutine node is awaited on the loop; a sync node runs in a worker thread (so a
timeout can stop WAITING on it and other runs keep going) unless it is ``inline``. The
node's return value becomes a :class:`~oncegraph.runtime.engine.TaskResult`; an
``interrupt()``, a park or crash signal from the ledger, or an exception becomes the
matching field of the outcome. Nothing here writes to a store except through ``save``,
the driver's hook that keeps a finished sibling's writes.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any

from oncegraph.errors import (
    GraphInterrupt,
    InterruptSwallowedError,
    NodeTimeoutError,
    OnceGraphError,
    _CrashSignal,
    _ParkSignal,
)
from oncegraph.graph.spec import GraphSpec, NodeSpec
from oncegraph.hitl.command import Command
from oncegraph.runtime import executor
from oncegraph.runtime.context import TaskContext, reset_task, set_task
from oncegraph.runtime.engine import Head, TaskOutcome, TaskResult

Save = Callable[[TaskContext, TaskResult], Awaitable[None]]


async def run_task(spec: GraphSpec, ctx: TaskContext, head: Head, save: Save | None) -> TaskOutcome:
    """Run node ``ctx.node`` on ``head``'s state; never raises except on cancellation."""
    node = spec.nodes[ctx.node]
    token = set_task(ctx)
    ctx.emit("events", {"event": "node_start", "node": ctx.node, "step": ctx.step})
    try:
        outcome = await _outcome(spec, node, ctx, head, save)
    finally:
        reset_task(token)
    status = "ok" if outcome.result else "interrupted" if outcome.interrupt else "error"
    ctx.emit("events", {"event": "node_end", "node": ctx.node, "step": ctx.step, "status": status})
    return outcome


async def _outcome(
    spec: GraphSpec, node: NodeSpec, ctx: TaskContext, head: Head, save: Save | None
) -> TaskOutcome:
    try:
        state = spec.schema.to_node_input(head.values)
        args: tuple[Any, ...] = (state, node_config(ctx)) if node.takes_config else (state,)
        if node.inline:  # on the loop thread: no hand-off, no timeout
            value = node.fn(*args)
        else:
            value = await _call(node, ctx, args)
        if ctx.interrupt_raised is not None:
            raise InterruptSwallowedError(
                f"node {ctx.node!r} caught the interrupt signal (a bare except or except "
                "BaseException?) and returned normally; let GraphInterrupt propagate",
                node=ctx.node,
            )
        if isinstance(value, Command):
            update = spec.schema.to_update(ctx.node, value.update)
            result = TaskResult(ctx.node, update, value.goto_nodes())
        else:
            result = TaskResult(ctx.node, spec.schema.to_update(ctx.node, value))
        if save is not None:
            await save(ctx, result)
        return TaskOutcome(ctx.node, result=result)
    except GraphInterrupt as gi:
        return TaskOutcome(ctx.node, interrupt=(gi.value, gi.index))
    except _ParkSignal as sig:
        return TaskOutcome(ctx.node, park=(sig.effect_id, sig.reason))
    except _CrashSignal as sig:
        return TaskOutcome(ctx.node, crash=sig)
    except Exception as exc:
        if ctx.interrupt_raised is not None and not isinstance(exc, OnceGraphError):
            exc = InterruptSwallowedError(
                f"node {ctx.node!r} caught the interrupt signal and raised "
                f"{type(exc).__name__} instead; let GraphInterrupt propagate",
                node=ctx.node,
            )
        return TaskOutcome(ctx.node, error=exc)


async def _call(node: NodeSpec, ctx: TaskContext, args: tuple[Any, ...]) -> Any:
    """Await a coroutine node, or a sync node in a worker thread, under its timeout."""
    timeout = node.timeout if node.timeout is not None else ctx.config.node_timeout
    if node.is_async:
        call = node.fn(*args)
    else:  # in the worker pool; a timeout stops waiting, the thread cannot be stopped
        call = asyncio.wrap_future(executor.submit(functools.partial(node.fn, *args)))
    if timeout is None:
        return await call
    try:
        async with asyncio.timeout(timeout) as cm:
            return await call
    except TimeoutError as exc:
        if cm.expired():
            raise NodeTimeoutError(
                f"node {ctx.node!r} ran longer than node_timeout={timeout}s", node=ctx.node
            ) from exc
        raise


def node_config(ctx: TaskContext) -> dict[str, Any]:
    """The ``config`` a node that takes two parameters receives."""
    return {
        "thread_id": ctx.thread_id,
        "run_id": ctx.run_id,
        "node": ctx.node,
        "step": ctx.step,
        **ctx.config.configurable,
    }


__all__ = ["Save", "node_config", "run_task"]
