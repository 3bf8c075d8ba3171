"""``effect(...)`` / ``await aeffect(...)``: protect a side effect made inside a plain node.

Commands are numbered by position in the node: ``<node>:<step>:<n>``, so the n-th effect
of a re-run node finds the n-th record. Keep the order of effects in a node stable.

``replay="recorded" | "repeat" | "live"`` says what the effect is to a replay
(:mod:`oncegraph.graph.inputs`; ``recorded`` by default).

``mask=["card"]`` masks those arguments (by parameter name, positional or keyword, and
keys of that name at any depth) and result keys in every view, as ``@tool(mask=...)``
does; the effect's stored request carries the declaration
(:mod:`oncegraph.runs.masking`), so views mask it without knowing the node.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, ParamSpec

from oncegraph.errors import ConfigError
from oncegraph.graph.inputs import replay_class
from oncegraph.ledger.keys import next_command_id
from oncegraph.ledger.masks import declare
from oncegraph.ledger.perform import EffectCall, ToolFailed, perform
from oncegraph.ledger.retry import RetryPolicy
from oncegraph.runtime.context import TaskContext, current_task
from oncegraph.storage.records import EffectClass

P = ParamSpec("P")
Prepare = Callable[[TaskContext], EffectCall]


def _request(
    fn: Callable[..., Any],
    *args: Any,
    effect_type: str | None = None,
    effect_class: str = "write",
    reconcile: Callable[..., Any] | None = None,
    recipient: str | None = None,
    retry: RetryPolicy | None = None,
    timeout: float | None = None,
    mask: Sequence[str] = (),
    replay: str = "recorded",
    **kwargs: Any,
) -> Prepare:
    """The signature of :func:`effect` and :func:`aeffect`, written once: the effect
    ``fn(*args, **kwargs)`` with its record's options, as the ledger's call it makes in a
    node's task context (options checked then, inside the node)."""

    def prepare(ctx: TaskContext) -> EffectCall:
        try:
            cls = EffectClass(effect_class)
        except ValueError:
            raise ConfigError(
                f"effect_class={effect_class!r}; use read, write or irreversible"
            ) from None

        request: dict[str, Any] = {"args": list(args), "kwargs": kwargs}
        if mask:
            request = declare(request, mask, _positions(fn, len(args), mask))
        return EffectCall(
            effect_type=effect_type or str(getattr(fn, "__name__", "effect")),
            effect_class=cls,
            command_id=next_command_id(ctx),
            request=request,
            fn=functools.partial(fn, *args, **kwargs),
            positional=True,
            args=args,
            kwargs=kwargs,
            runs="loop" if inspect.iscoroutinefunction(fn) else "thread",
            recipient=recipient,
            reconcile=reconcile,
            retry=retry,
            timeout=timeout if timeout is not None else ctx.config.tool_timeout,
            replay=replay_class(replay, f"effect {effect_type or getattr(fn, '__name__', fn)!r}"),
        )

    return prepare


def _positions(fn: Callable[..., Any], n_args: int, mask: Sequence[str]) -> list[int]:
    """The positions among ``n_args`` positional arguments whose parameter is masked."""
    if isinstance(mask, str):
        raise ConfigError(f"mask={mask!r} must be a list of argument names, e.g. mask=['card']")
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return []
    out = []
    for i in range(n_args):
        if i < len(params) and params[i].kind in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
        ):
            if params[i].name in mask:
                out.append(i)
        elif any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params):
            break
    return out


def _ctx() -> TaskContext:
    ctx = current_task()
    if ctx is None:
        raise ConfigError("effect()/aeffect() can only be called inside a running graph node")
    return ctx


def _entry(name: str, doc: str | None) -> Callable[[Callable[..., Any]], Any]:
    """Give an entry made from :func:`_request` its public name and docstring."""

    def named(entry: Callable[..., Any]) -> Any:
        entry.__name__ = entry.__qualname__ = name
        entry.__doc__ = doc
        signature = inspect.signature(_request).replace(return_annotation=inspect.Signature.empty)
        setattr(entry, "__signature__", signature)  # noqa: B010 (a function's, for help())
        return entry

    return named


def _async_entry(request: Callable[P, Prepare]) -> Callable[P, Coroutine[Any, Any, Any]]:
    """``aeffect``: the effect ``request`` describes, performed on the node's loop."""

    async def aeffect(*args: P.args, **kwargs: P.kwargs) -> Any:
        prepare = request(*args, **kwargs)
        ctx = _ctx()
        call = prepare(ctx)
        try:
            return (await perform(ctx, call)).result
        except ToolFailed as failed:
            raise failed.error from None

    named: Callable[P, Coroutine[Any, Any, Any]] = _entry("aeffect", None)(aeffect)
    return named


def _sync_entry(request: Callable[P, Prepare]) -> Callable[P, Any]:
    """``effect``: the same for a sync node, from its worker thread: performed on the
    run's loop, the node's thread waiting for it."""

    def effect(*args: P.args, **kwargs: P.kwargs) -> Any:
        prepare = request(*args, **kwargs)
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
        call = prepare(ctx)
        future = asyncio.run_coroutine_threadsafe(perform(ctx, call), ctx.loop)
        try:
            return future.result().result
        except ToolFailed as failed:
            raise failed.error from None

    named: Callable[P, Any] = _entry(
        "effect", "Sync twin-free entry for sync nodes (they run in a worker thread)."
    )(effect)
    return named


aeffect = _async_entry(_request)
effect = _sync_entry(_request)
