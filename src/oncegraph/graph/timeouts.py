"""A node's timeout policy (``add_node(timeout=TimeoutPolicy(...))``), LangGraph's shape.

``run_timeout`` caps one attempt of the node by the wall clock; ``idle_timeout`` ends an
attempt that shows no progress for that long. Progress is, with ``refresh_on="auto"``,
anything the node streams (``writer(...)``, a model's tokens in ``stream_mode=
"messages"``, a pushed message) and ``runtime.heartbeat()``; with ``refresh_on=
"heartbeat"`` only the heartbeat. An attempt cut by either raises
:class:`oncegraph.errors.NodeTimeoutError` (``.kind`` is ``"run"`` or ``"idle"``), which a
retry policy may retry (``retry_on=NodeTimeoutError``).

A policy needs a coroutine node: the attempt is cancelled at its next ``await``. (A plain
number, ``add_node(timeout=5)``, stays oncegraph's node timeout, which also stops waiting
for a sync node's thread.) A tool call the cut interrupts keeps the ledger's rule: its
outcome is unknown unless its effect class says otherwise, and a retry reconciles it
instead of sending it again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

from oncegraph.errors import ConfigError, NodeTimeoutError

if TYPE_CHECKING:
    from oncegraph.graph.spec import NodeSpec

RefreshOn = Literal["auto", "heartbeat"]


def seconds(what: str, value: Any) -> float | None:
    """``value`` (seconds or a ``timedelta``) as positive seconds; ``None`` stays."""
    if value is None:
        return None
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{what} must be a number of seconds or a timedelta; got {value!r}")
    if value <= 0:
        raise ConfigError(f"{what} must be greater than 0 seconds; got {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class TimeoutPolicy:
    """How long one attempt of a node may run (``run_timeout``) and stay idle
    (``idle_timeout``); see the module docstring."""

    run_timeout: float | timedelta | None = None
    idle_timeout: float | timedelta | None = None
    refresh_on: RefreshOn = "auto"

    def __post_init__(self) -> None:
        object.__setattr__(self, "run_timeout", seconds("run_timeout", self.run_timeout))
        object.__setattr__(self, "idle_timeout", seconds("idle_timeout", self.idle_timeout))
        if self.refresh_on not in ("auto", "heartbeat"):
            raise ConfigError(f"refresh_on must be 'auto' or 'heartbeat'; got {self.refresh_on!r}")

    @property
    def run_seconds(self) -> float | None:
        """``run_timeout`` in seconds (normalized when the policy was made)."""
        return _as_float(self.run_timeout)

    @property
    def idle_seconds(self) -> float | None:
        """``idle_timeout`` in seconds (normalized when the policy was made)."""
        return _as_float(self.idle_timeout)

    @classmethod
    def coerce(cls, value: float | timedelta | TimeoutPolicy | None) -> TimeoutPolicy | None:
        """``value`` as a policy: a number or ``timedelta`` is a ``run_timeout``."""
        if value is None or isinstance(value, TimeoutPolicy):
            return value
        return cls(run_timeout=value)


def _as_float(value: float | timedelta | None) -> float | None:
    if value is None:
        return None
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


def split(name: str, timeout: Any) -> tuple[float | None, TimeoutPolicy | None]:
    """``add_node(timeout=...)`` as (the run cap in seconds, the policy when one was
    given): a plain number is oncegraph's node timeout and has no policy."""
    if timeout is None:
        return None, None
    if isinstance(timeout, TimeoutPolicy):
        return timeout.run_seconds, timeout
    return seconds(f"node {name!r}: timeout", timeout), None


def _only_async(what: str) -> ConfigError:
    return ConfigError(
        f"{what}: a TimeoutPolicy is only supported for async nodes (make it an async def, "
        "or pass timeout=<seconds>)"
    )


def task_timeout(
    name: str, timeout: Any, is_async: bool, *, plain: bool
) -> tuple[float | None, TimeoutPolicy | None]:
    """A ``@task(timeout=...)``'s (ledger timeout in seconds, policy the task body runs
    under). A number is the call's timeout, as before. A policy needs an async task; on
    a plain task (no effect class: it may run again) the body runs under it and a cut
    raises ``NodeTimeoutError``; on a task with an effect class the policy's shortest
    limit is the ledger's call timeout, so a cut call keeps its class's rule (an unknown
    outcome is reconciled, never sent again blindly). A task's idle timeout counts from
    the call's start: nothing inside a task refreshes it."""
    cap, policy = split(name, timeout)
    if policy is None:
        return cap, None
    if not is_async:
        raise _only_async(f"@task {name!r}")
    if plain:
        return None, policy
    return shortest(policy), None


def entry_timeout(name: str, timeout: Any, is_async: bool) -> None:
    """Refuse an ``@entrypoint(timeout=TimeoutPolicy(...))`` on a sync function."""
    _, policy = split(name, timeout)
    if policy is not None and not is_async:
        raise _only_async(f"@entrypoint {name!r}")


def shortest(policy: TimeoutPolicy) -> float | None:
    limits = [t for t in (policy.run_seconds, policy.idle_seconds) if t is not None]
    return min(limits) if limits else None


async def capped(policy: TimeoutPolicy, name: str, call: Awaitable[Any]) -> Any:
    """``call`` cut at the policy's shortest limit (a plain task's body)."""
    limit = shortest(policy)
    if limit is None:
        return await call
    try:
        async with asyncio.timeout(limit) as cm:
            return await call
    except TimeoutError as exc:
        if not cm.expired():
            raise
        kind = "run" if limit == policy.run_seconds else "idle"
        raise NodeTimeoutError(
            f"task {name!r} ran longer than its {kind}_timeout={limit}s",
            node=name,
            kind=kind,
            run_timeout=policy.run_seconds,
            idle_timeout=policy.idle_seconds,
        ) from exc


def check_async(nodes: dict[str, NodeSpec]) -> None:
    """Refuse a timeout policy on a sync node (a policy cancels the attempt, which only a
    coroutine can be)."""
    for spec in nodes.values():
        for one in (spec, spec.error_handler):
            if one is not None and one.timeout_policy is not None and not one.is_async:
                raise _only_async(f"node {one.name!r}")


__all__ = [
    "TimeoutPolicy",
    "capped",
    "check_async",
    "entry_timeout",
    "seconds",
    "shortest",
    "split",
    "task_timeout",
]
