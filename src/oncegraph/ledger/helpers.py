"""``effect(...)`` / ``await aeffect(...)``: protect a side effect made inside a plain node.

Commands are numbered by position in the node: ``<node>:<step>:<n>``, so the n-th effect
of a re-run node finds the n-th record. Keep the order of effects in a node stable.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable
from typing import Any

from oncegraph.errors import ConfigError
from oncegraph.ledger.keys import next_command_id
from oncegraph.ledger.perform import EffectCall, ToolFailed, perform
from oncegraph.ledger.retry import RetryPolicy
from oncegraph.runtime.context import TaskContext, current_task
from oncegraph.storage.records import EffectClass


def _call(
    ctx: TaskContext,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    effect_type: str | None,
    effect_class: str,
    reconcile: Callable[..., Any] | None,
    recipient: str | None,
    retry: RetryPolicy | None,
    timeout: float | None,
) -> EffectCall:
    try:
        cls = EffectClass(effect_class)
    except ValueError:
        raise ConfigError(
            f"effect_class={effect_class!r}; use read, write or irreversible"
        ) from None

    return EffectCall(
        effect_type=effect_type or str(getattr(fn, "__name__", "effect")),
        effect_class=cls,
        command_id=next_command_id(ctx),
        request={"args": list(args), "kwargs": kwargs},
        fn=functools.partial(fn, *args, **kwargs),
        positional=True,
        args=args,
        kwargs=kwargs,
        runs="loop" if inspect.iscoroutinefunction(fn) else "thread",
        recipient=recipient,
        reconcile=reconcile,
        retry=retry,
        timeout=timeout if timeout is not None else ctx.config.tool_timeout,
    )


def _ctx() -> TaskContext:
    ctx = current_task()
    if ctx is None:
        raise ConfigError("effect()/aeffect() can only be called inside a running graph node")
    return ctx


async def aeffect(
    fn: Callable[..., Any],
    *args: Any,
    effect_type: str | None = None,
    effect_class: str = "write",
    reconcile: Callable[..., Any] | None = None,
    recipient: str | None = None,
    retry: RetryPolicy | None = None,
    timeout: float | None = None,
    **kwargs: Any,
) -> Any:
    ctx = _ctx()
    call = _call(
        ctx,
        fn,
        args,
        kwargs,
        effect_type=effect_type,
        effect_class=effect_class,
        reconcile=reconcile,
        recipient=recipient,
        retry=retry,
        timeout=timeout,
    )
    try:
        return (await perform(ctx, call)).result
    except ToolFailed as failed:
        raise failed.error from None


def effect(
    fn: Callable[..., Any],
    *args: Any,
    effect_type: str | None = None,
    effect_class: str = "write",
    reconcile: Callable[..., Any] | None = None,
    recipient: str | None = None,
    retry: RetryPolicy | None = None,
    timeout: float | None = None,
    **kwargs: Any,
) -> Any:
    """Sync twin-free entry for sync nodes (they run in a worker thread)."""
    ctx = _ctx()
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise ConfigError(
            "effect() is for sync nodes running in a worker thread; in an async node use "
            "await aeffect(...), and do not mark a node that calls effect() inline=True"
        )
    call = _call(
        ctx,
        fn,
        args,
        kwargs,
        effect_type=effect_type,
        effect_class=effect_class,
        reconcile=reconcile,
        recipient=recipient,
        retry=retry,
        timeout=timeout,
    )
    future = asyncio.run_coroutine_threadsafe(perform(ctx, call), ctx.loop)
    try:
        return future.result().result
    except ToolFailed as failed:
        raise failed.error from None
