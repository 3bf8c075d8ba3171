"""The run config: the familiar ``config={"thread_id": ...}`` turned into a typed value.

Two kinds of keys:

* **identity** (``thread_id``, ``run_id``), read from the top level or from
  ``config["configurable"]`` as LangGraph writes them;
* **control** (timeouts, grace, ``recursion_limit``, ``fault_plan``, ``sleep``), read from
  the TOP LEVEL only. An app that forwards a client's ``configurable`` to ``invoke``
  therefore never lets that client turn a timeout off or plant a fault plan: inside
  ``configurable`` those names are plain values handed to nodes, nothing more.

Everything else in ``configurable`` (and unknown top-level keys) reaches nodes that take
a ``config`` parameter.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from oncegraph.errors import ConfigError

if TYPE_CHECKING:
    from oncegraph.runtime.faults import FaultPlan

DEFAULT_NODE_TIMEOUT = 900.0
DEFAULT_TOOL_TIMEOUT = 300.0
DEFAULT_TOOL_GRACE = 30.0
DEFAULT_RECURSION_LIMIT = 100

Sleep = Callable[[float], Awaitable[Any]]

_IDENTITY = frozenset({"thread_id", "run_id"})
_CONTROL = frozenset(
    {"node_timeout", "tool_timeout", "tool_grace", "recursion_limit", "fault_plan", "sleep"}
)
_MISSING: Any = object()


def _seconds(name: str, value: Any, default: float) -> float | None:
    if value is _MISSING:
        return default
    if value is None or value == 0:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ConfigError(
            f"{name} must be a number of seconds, or None/0 to disable; got {value!r}"
        )
    return float(value)


def _thread_id(value: Any) -> str | None:
    """A thread id as stored: a string (ints and UUIDs are written as their text)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int, uuid.UUID)):
        raise ConfigError(f"thread_id must be a string (or an int or UUID); got {value!r}")
    text = value if type(value) is str else str(value)
    if text.isascii() and text.isprintable() and text:  # no control character, no surrogate
        return text
    if not text:
        raise ConfigError("thread_id must not be empty")
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise ConfigError(
            f"thread_id must not contain control characters (NUL, newlines, escapes: no "
            f"store keeps NUL, and the others forge log lines and terminal output); got "
            f"{text!r}"
        )
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigError(
            f"thread_id must be valid Unicode text (it holds a lone surrogate); got {text!r}"
        ) from None
    return text


@dataclass(frozen=True, slots=True)
class RunConfig:
    thread_id: str | None
    node_timeout: float | None = DEFAULT_NODE_TIMEOUT
    tool_timeout: float | None = DEFAULT_TOOL_TIMEOUT
    # After a timeout, how long to wait for the call to actually end (a sync tool's
    # thread cannot be stopped) before treating it as still in flight (law 13).
    tool_grace: float | None = DEFAULT_TOOL_GRACE
    recursion_limit: int = DEFAULT_RECURSION_LIMIT
    fault_plan: FaultPlan | None = None
    configurable: Mapping[str, Any] = field(default_factory=dict)
    run_id: str | None = None  # continue exactly this run; None: the thread's latest
    sleep: Sleep = asyncio.sleep  # waits between retries (tests inject a fake)
    # invoke(..., interrupt_before=[...], interrupt_after=[...]): this call's breakpoints,
    # on top of the compiled graph's (node names, or ("*",) for every node)
    interrupt_before: tuple[str, ...] = ()
    interrupt_after: tuple[str, ...] = ()

    @classmethod
    def parse(cls, config: Mapping[str, Any] | None) -> RunConfig:
        if config is None:
            return cls(thread_id=None)
        if not isinstance(config, Mapping):
            raise ConfigError(f"config must be a dict like {{'thread_id': 't1'}}; got {config!r}")
        inner = config.get("configurable")
        if inner is not None and not isinstance(inner, Mapping):
            raise ConfigError(f"config['configurable'] must be a dict; got {inner!r}")
        # one pass over each level: identity from either (the top level wins), the rest
        # of ``configurable`` and the top level's non-control keys for nodes
        identity: dict[str, Any] = {}
        configurable: dict[str, Any] = {}
        if inner:
            for k, v in inner.items():
                if k in _IDENTITY:
                    identity[k] = v
                else:
                    configurable[k] = v
        for k, v in config.items():
            if k in _IDENTITY:
                identity[k] = v
            elif k not in _CONTROL and k != "configurable":
                configurable[k] = v
        top = config
        limit = top.get("recursion_limit", DEFAULT_RECURSION_LIMIT)
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ConfigError(f"recursion_limit must be a positive integer; got {limit!r}")
        sleep = top.get("sleep", asyncio.sleep)
        if not callable(sleep):
            raise ConfigError(f"sleep must be an async function of seconds; got {sleep!r}")
        plan = top.get("fault_plan")
        if plan is not None:
            from oncegraph.runtime.faults import FaultPlan

            if not isinstance(plan, FaultPlan):
                raise ConfigError(f"fault_plan must be a FaultPlan; got {plan!r}")
        run_id = identity.get("run_id")
        return cls(
            thread_id=_thread_id(identity.get("thread_id")),
            node_timeout=_seconds(
                "node_timeout", top.get("node_timeout", _MISSING), DEFAULT_NODE_TIMEOUT
            ),
            tool_timeout=_seconds(
                "tool_timeout", top.get("tool_timeout", _MISSING), DEFAULT_TOOL_TIMEOUT
            ),
            tool_grace=_seconds("tool_grace", top.get("tool_grace", _MISSING), DEFAULT_TOOL_GRACE),
            recursion_limit=limit,
            fault_plan=plan,
            configurable=configurable,
            run_id=str(run_id) if run_id else None,
            sleep=sleep,
        )

    @classmethod
    def from_stored(cls, stored: Mapping[str, Any], thread_id: str) -> RunConfig:
        """The config a stored run goes on with: its timeouts and limits (see
        :meth:`to_json`), nothing else it keeps beside them (its graph shape, a replay's
        policy)."""
        keep = {k: stored[k] for k in ("node_timeout", "tool_timeout", "tool_grace",
                                       "recursion_limit") if k in stored}
        return cls.parse({**keep, "thread_id": thread_id})

    def to_json(self) -> dict[str, Any]:
        """What is stored with the run (timeouts; not the fault plan or the sleeper)."""
        return {
            "node_timeout": self.node_timeout,
            "tool_timeout": self.tool_timeout,
            "tool_grace": self.tool_grace,
            "recursion_limit": self.recursion_limit,
        }


__all__ = [
    "DEFAULT_NODE_TIMEOUT",
    "DEFAULT_RECURSION_LIMIT",
    "DEFAULT_TOOL_GRACE",
    "DEFAULT_TOOL_TIMEOUT",
    "RunConfig",
    "Sleep",
]
