"""Fault injection, public and scoped to a run (not a global registry).

Named crash points sit at every commit boundary of the effect protocol::

    before_intent -> [intent commit] -> after_intent -> [tool call] -> after_tool_return
    -> [result commit] -> after_effect_record ... before_checkpoint -> [checkpoint commit]
    -> after_checkpoint

``FaultPlan("after_intent")`` raises an in-process crash signal at the first hit of that
point; ``FaultPlan("after_intent", nth=2, kill=True)`` SIGKILLs the process at the
second hit. ``ONCEGRAPH_CRASH_AT=<point>[:<nth>]`` in the environment hard-kills the
process there, so recovery can be tested from outside. Tools may add their own points with
:func:`oncegraph.crash_point` (e.g. ``"in_tool"`` right after the provider got the request).

A plan can never pass vacuously: its point must be one of :data:`CRASH_POINTS` or a
name declared with :func:`declare_crash_point` (at import time, before the plan is
made), or the plan is refused with a ``ConfigError``. A typo therefore fails the test
that uses it instead of never firing.
"""

from __future__ import annotations

import os
import signal
import threading
from dataclasses import dataclass, field
from typing import Any

from oncegraph.errors import ConfigError, _CrashSignal

CRASH_POINTS = (
    "before_intent",
    "after_intent",
    "after_tool_return",
    "after_effect_record",
    "before_checkpoint",
    "after_checkpoint",
)


_declared: set[str] = set()
_declared_lock = threading.Lock()


def declare_crash_point(name: str) -> str:
    """Make ``name`` a valid target of a :class:`FaultPlan` (for :func:`crash_point`)."""
    if not isinstance(name, str) or not name or any(c.isspace() or c == ":" for c in name):
        raise ConfigError(f"a crash point is a non-empty name without spaces or ':'; got {name!r}")
    with _declared_lock:
        _declared.add(name)
    return name


def known_points() -> tuple[str, ...]:
    with _declared_lock:
        return (*CRASH_POINTS, *sorted(_declared - set(CRASH_POINTS)))


@dataclass
class FaultPlan:
    point: str
    nth: int = 1
    kill: bool = False
    hits: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        if self.nth < 1:
            raise ConfigError("FaultPlan nth counts from 1")
        if self.point not in known_points():
            raise ConfigError(
                f"unknown crash point {self.point!r}: a plan for it would never fire. Use one "
                f"of {', '.join(known_points())}, or declare your own with "
                f"declare_crash_point({self.point!r}) where your code calls crash_point()"
            )

    @classmethod
    def from_env(cls) -> FaultPlan | None:
        spec = os.environ.get("ONCEGRAPH_CRASH_AT")
        if not spec:
            return None
        point, _, nth = spec.partition(":")
        try:
            count = int(nth) if nth else 1
        except ValueError as exc:
            raise ConfigError(
                f"ONCEGRAPH_CRASH_AT={spec!r}: expected <point>[:<nth>], e.g. after_intent:2"
            ) from exc
        return cls(point, count, kill=True)

    @property
    def fired(self) -> bool:
        return self.hits.get(self.point, 0) >= self.nth

    def hit(self, point: str) -> None:
        with self._lock:
            count = self.hits.get(point, 0) + 1
            self.hits[point] = count
        if point != self.point or count != self.nth:
            return
        if self.kill:
            os.kill(os.getpid(), signal.SIGKILL)
        raise _CrashSignal(point)


def __getattr__(name: str) -> Any:
    # crash_point reads the task context, which stands above this module; it lives in
    # oncegraph.runtime.context, and this old path still finds it (imported on first use).
    if name == "crash_point":
        from oncegraph.runtime.context import crash_point

        return crash_point
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
