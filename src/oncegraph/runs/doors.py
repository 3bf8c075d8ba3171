"""The run service's thin doors: an operation written once, in the helper module that
owns it (over a :class:`~oncegraph.runs.context.RunContext`), and opened on the service
with its own signature and docstring, which mypy checks at every call (a ``ParamSpec``).

``door(Commands, Commands.resolve_effect)`` is a method of the service that calls
``Commands(service.context).resolve_effect(...)``; ``door(None, listing.runs)`` one that
calls ``listing.runs(service.context, ...)``.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Concatenate, ParamSpec, TypeVar, overload

from oncegraph.runs.context import RunContext

if TYPE_CHECKING:
    from oncegraph.runs.service import RunService

P = ParamSpec("P")
R = TypeVar("R")
H = TypeVar("H")


@overload
def door(
    helper: Callable[[RunContext], H], method: Callable[Concatenate[H, P], Awaitable[R]]
) -> Callable[Concatenate[RunService, P], Awaitable[R]]: ...


@overload
def door(
    helper: None, method: Callable[Concatenate[RunContext, P], Awaitable[R]]
) -> Callable[Concatenate[RunService, P], Awaitable[R]]: ...


def door(
    helper: Callable[[RunContext], H] | None, method: Callable[..., Awaitable[R]]
) -> Callable[..., Awaitable[R]]:
    """A service method that runs ``method`` on the service's context (``helper``: the
    object made from the context whose method it is; ``None``: a function of it)."""

    async def call(service: RunService, /, *args: object, **kwargs: object) -> R:
        target = service.context if helper is None else helper(service.context)
        return await method(target, *args, **kwargs)

    functools.update_wrapper(call, method)
    return call


def door_of(
    helper: Callable[[RunService], H], method: Callable[Concatenate[H, P], Awaitable[R]]
) -> Callable[Concatenate[RunService, P], Awaitable[R]]:
    """:func:`door` for a helper made from the service itself (it needs more of it than
    the context)."""

    async def call(service: RunService, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await method(helper(service), *args, **kwargs)

    functools.update_wrapper(call, method)
    return call


def iterating_door(
    method: Callable[Concatenate[RunContext, P], R],
) -> Callable[Concatenate[RunService, P], R]:
    """:func:`door` for a function of the context whose call is not awaited (an async
    generator: the caller iterates what it returns)."""

    def call(service: RunService, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return method(service.context, *args, **kwargs)

    functools.update_wrapper(call, method)
    return call


__all__ = ["door", "door_of", "iterating_door"]
