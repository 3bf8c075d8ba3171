"""The cache of a plain ``@task`` (``@task(cache_policy=...)``, ``@entrypoint(cache=...)``).

Only a plain task (no effect class, not a tool) is cached, and inside the ledger's call:
the ledger still records the call's result (served from the cache or computed), so a
resume serves it from the record as always. A result is stored only when the call asked
no question (``interrupt()``) and called no other task: then it is a computation of its
arguments alone. Entries live under ``("__task__", <task name>)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from oncegraph import _json
from oncegraph.cache.base import CacheKey

if TYPE_CHECKING:
    from oncegraph.func.tasks import TaskFunction
    from oncegraph.runtime.context import TaskContext

MISS = object()


def namespace(name: str) -> tuple[str, ...]:
    return ("__task__", name)


def entry(
    ctx: TaskContext, task: TaskFunction[Any, Any], args: tuple[Any, ...], kwargs: Any
) -> CacheKey | None:
    """The call's cache entry (None: no cache, or the task has no cache policy)."""
    if ctx.cache is None or task.cache_policy is None:
        return None
    return (namespace(task.name), task.cache_policy.key(*args, **kwargs))


def storable(ctx: TaskContext, interrupts_before: int, nested_calls: int) -> bool:
    return ctx.interrupt_count == interrupts_before and nested_calls == 0


def get(ctx: TaskContext, key: CacheKey) -> Any:
    found = ctx.cache.get([key]).get(key)
    return MISS if found is None else _json.loads(found)


async def aget(ctx: TaskContext, key: CacheKey) -> Any:
    found = (await ctx.cache.aget([key])).get(key)
    return MISS if found is None else _json.loads(found)


def _entry(task: TaskFunction[Any, Any], key: CacheKey, value: Any) -> Any:
    """The entry to store; None when the value has no JSON form (it is not cached)."""
    ttl = task.cache_policy.ttl if task.cache_policy is not None else None
    try:
        return {key: (_json.dumps_state_str(value), ttl)}
    except Exception:
        return None


def put(ctx: TaskContext, task: TaskFunction[Any, Any], key: CacheKey, value: Any) -> None:
    made = _entry(task, key, value)
    if made is not None:
        ctx.cache.set(made)


async def aput(ctx: TaskContext, task: TaskFunction[Any, Any], key: CacheKey, value: Any) -> None:
    made = _entry(task, key, value)
    if made is not None:
        await ctx.cache.aset(made)


__all__ = ["MISS", "aget", "aput", "entry", "get", "namespace", "put", "storable"]
