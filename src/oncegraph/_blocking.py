"""Blocking on the home loop: how sync code runs a coroutine or an async iterator.

``run_sync`` hands a coroutine to the process's home loop (:func:`oncegraph._loopbound.home_loop`)
and blocks on its result; ``iterate_sync`` walks an async iterator the same way, one item
at a time. The sync facade (``invoke``/``stream``) and the stores' sync methods use them,
so connection pools bound to a loop live on one loop for the life of the process.

A caller whose thread already runs an event loop (a Jupyter cell, an async web handler
calling the sync API) is served the same way: its loop is blocked for the call, as any
blocking call blocks it, and nothing run here waits on that loop. The one call refused is
from the home loop's own thread (a node or tool calling ``invoke``): it would wait for
itself.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import Any, Concatenate, ParamSpec, TypeVar

from oncegraph._loopbound import home_loop, is_home
from oncegraph.errors import ConfigError

T = TypeVar("T")
S = TypeVar("S")
P = ParamSpec("P")


def _refuse_on_portal(api: str) -> None:
    """The sync API from the home loop's own thread would wait for itself: refuse it."""
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        return
    if is_home(running):
        raise ConfigError(
            f"{api}() was called from oncegraph's own event loop (inside a node or tool?) and "
            f"would wait for itself forever; use `await a{api}(...)` there, or make the node "
            "a plain (sync) function, which runs in a worker thread"
        )


def run_sync(coro: Coroutine[Any, Any, T], api: str = "invoke") -> T:
    """Run ``coro`` on the home loop and block until it ends (``api`` names the caller)."""
    try:
        _refuse_on_portal(api)
    except ConfigError:
        coro.close()
        raise
    future = asyncio.run_coroutine_threadsafe(coro, home_loop())
    try:
        return future.result()
    except (KeyboardInterrupt, concurrent.futures.CancelledError):
        future.cancel()
        raise


def iterate_sync(agen: AsyncIterator[T], api: str = "stream") -> Iterator[T]:
    """Walk ``agen`` on the home loop, one item per blocking step."""
    _refuse_on_portal(api)
    yield from walk_blocking(agen, lambda coro: run_sync(coro, api))


def walk_blocking(
    agen: AsyncIterator[T], block: Callable[[Coroutine[Any, Any, Any]], Any]
) -> Iterator[T]:
    """Walk ``agen`` from sync code: ``block`` runs each step (and the closing, when the
    walk ends or is left) to its end on the loop ``agen`` lives on."""

    async def step() -> tuple[bool, Any]:
        try:
            return True, await agen.__anext__()
        except StopAsyncIteration:
            return False, None

    try:
        while True:
            more, item = block(step())
            if not more:
                return
            yield item
    finally:
        aclose = getattr(agen, "aclose", None)
        if aclose is not None:
            block(aclose())


def sync_twin(
    method: Callable[Concatenate[S, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[S, P], T]:
    """The sync method of the async method ``method`` (named ``a<name>``): ``<name>(...)``
    is ``run_sync(self.a<name>(...), "<name>")``, with ``method``'s signature and
    docstring, so the sync API is the async one through the home loop and never a twin
    to keep in step. The async method is looked up on the object at each call (a
    subclass's own serves its sync twin too)."""
    async_name = method.__name__
    api = async_name.removeprefix("a")

    def call(self: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
        result: T = run_sync(getattr(self, async_name)(*args, **kwargs), api)
        return result

    return _dressed(call, method)


def iter_twin(
    method: Callable[Concatenate[S, P], AsyncIterator[T]],
) -> Callable[Concatenate[S, P], Iterator[T]]:
    """The sync method of the async iterator method ``method`` (named ``a<name>``):
    ``<name>(...)`` is ``iterate_sync(self.a<name>(...), "<name>")``, dressed as
    :func:`sync_twin` dresses its method."""
    async_name = method.__name__
    api = async_name.removeprefix("a")

    def call(self: S, /, *args: P.args, **kwargs: P.kwargs) -> Iterator[T]:
        return iterate_sync(getattr(self, async_name)(*args, **kwargs), api)

    return _dressed(call, method)


F = TypeVar("F", bound=Callable[..., Any])


def _dressed(twin: F, method: Callable[..., Any]) -> F:
    """``twin`` with ``method``'s signature and docstring, named without its ``a``."""
    functools.update_wrapper(twin, method)
    twin.__name__ = api = method.__name__.removeprefix("a")
    owner, _, _ = method.__qualname__.rpartition(".")
    twin.__qualname__ = f"{owner}.{api}" if owner else api
    return twin


__all__ = ["iter_twin", "iterate_sync", "run_sync", "sync_twin", "walk_blocking"]
