"""The one executor of tool calls: start a call with ``current_effect()`` set, wait for
it under a timeout, and say how it ended. :func:`oncegraph.ledger.perform.perform` and
an operator's redelivery (:mod:`oncegraph.runs.commands`) both call through here, and
record what they get with the same transitions (:mod:`oncegraph.ledger.machine`).

Where a call runs (``runs``): ``"loop"``: ``fn()`` returns an awaitable, run as a task
on the loop (a timeout cancels it); ``"thread"``: ``fn`` is the call itself, run in the
worker pool (a thread cannot be stopped); ``"inline"``: called on the loop thread.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from oncegraph._waiting import wait_done
from oncegraph.runtime import executor
from oncegraph.runtime.context import EffectContext, reset_effect, set_effect

RunsOn = Literal["loop", "thread", "inline"]


@dataclass(frozen=True, slots=True)
class Returned:
    value: Any


@dataclass(frozen=True, slots=True)
class Raised:
    error: Exception


@dataclass(frozen=True, slots=True)
class Ended:
    """Timed out; the call has ended (a coroutine was cancelled) but its outcome is unknown."""


@dataclass(frozen=True, slots=True)
class InFlight:
    """Timed out and still running after the grace period."""

    call: asyncio.Future[Any]


CallEnd = Returned | Raised | Ended | InFlight


def call_inline(fn: Callable[[], Any], effect: EffectContext) -> Returned | Raised:
    """Call ``fn`` on the loop thread, with ``effect`` current."""
    token = set_effect(effect)
    try:
        return Returned(fn())
    except Exception as exc:
        return Raised(exc)
    finally:
        reset_effect(token)


def start(
    fn: Callable[[], Any], runs: RunsOn, effect: EffectContext
) -> tuple[asyncio.Future[Any], executor.ThreadCall | None]:
    """Start the call with ``effect`` current (the call runs in a copy of this context);
    its future, and its thread when ``runs="thread"``."""
    token = set_effect(effect)
    try:
        if runs == "thread":
            thread, waiter = executor.start(fn)
            return waiter, thread
        started: asyncio.Future[Any] = asyncio.ensure_future(fn())
        return started, None
    finally:
        reset_effect(token)


async def wait(
    call: asyncio.Future[Any],
    *,
    timeout: float | None,
    grace: float | None,
    stoppable: bool,
    on_cancel: Callable[[], None],
) -> CallEnd:
    """How ``call`` ended, waiting at most ``timeout``; on a timeout a ``stoppable`` call
    (a task) is cancelled, and any call is waited for ``grace`` more. When the wait itself
    is cancelled, ``on_cancel()`` runs if the call is still going."""
    try:
        if not await wait_done(call, timeout):
            if stoppable:
                call.cancel()
            if grace:
                await wait_done(call, grace)
    except asyncio.CancelledError:  # the run is being stopped from outside
        if stoppable:
            call.cancel()
        if not call.done():
            on_cancel()
        raise
    if not call.done():
        return InFlight(call)
    if call.cancelled():
        return Ended()
    error = call.exception()
    if error is None:
        return Returned(call.result())
    if isinstance(error, Exception):
        return Raised(error)
    raise error  # a BaseException from the tool (a signal): let it through


async def call_once(
    fn: Callable[[], Any], runs: RunsOn, effect: EffectContext
) -> Returned | Raised:
    """One call with no timeout, waited for to its end (a redelivery). A cancelled call
    cancels the caller; an awaitable it returns is awaited too."""
    if runs == "inline":
        end: CallEnd = call_inline(fn, effect)
    else:
        call, _ = start(fn, runs, effect)

        def stop() -> None:  # the caller was cancelled: so is the wait on the call
            call.cancel()

        end = await wait(call, timeout=None, grace=None, stoppable=runs == "loop", on_cancel=stop)
    if isinstance(end, Returned) and inspect.isawaitable(end.value):
        try:
            end = Returned(await end.value)
        except Exception as exc:
            end = Raised(exc)
    if isinstance(end, Ended | InFlight):
        raise asyncio.CancelledError
    return end


__all__ = [
    "CallEnd",
    "Ended",
    "InFlight",
    "Raised",
    "Returned",
    "RunsOn",
    "call_inline",
    "call_once",
    "start",
    "wait",
]
