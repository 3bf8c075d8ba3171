"""The run config: the familiar ``config={"thread_id": ...}`` turned into a typed value."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from oncegraph.errors import ConfigError

if TYPE_CHECKING:
    from oncegraph.runtime.faults import FaultPlan

DEFAULT_NODE_TIMEOUT = 900.0
DEFAULT_TOOL_TIMEOUT = 300.0
DEFAULT_RECURSION_LIMIT = 100

_KNOWN = frozenset(
    {"thread_id", "node_timeout", "tool_timeout", "recursion_limit", "fault_plan", "run_id"}
)


def _timeout(name: str, value: Any, default: float) -> float | None:
    if value is _MISSING:
        return default
    if value is None or value == 0:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ConfigError(
            f"{name} must be a number of seconds, or None/0 to disable; got {value!r}"
        )
    return float(value)


_MISSING: Any = object()


def _thread_id(value: Any) -> str:
    """Any id whose ``str()`` names it (``str``, ``int``, ``uuid.UUID``, ...); containers,
    bytes, bools and floats are refused (their text is not a stable id)."""
    cls: Any = type(value)
    if isinstance(value, (bool, float, bytes, bytearray, Mapping, list, tuple, set)) or (
        cls.__str__ is object.__str__ and cls.__repr__ is object.__repr__
    ):
        raise ConfigError(
            f"thread_id must be a string (or an id such as an int or uuid.UUID); got {value!r}"
        )
    return str(value)


@dataclass(frozen=True, slots=True)
class RunConfig:
    thread_id: str | None
    node_timeout: float | None = DEFAULT_NODE_TIMEOUT
    tool_timeout: float | None = DEFAULT_TOOL_TIMEOUT
    recursion_limit: int = DEFAULT_RECURSION_LIMIT
    fault_plan: FaultPlan | None = None
    configurable: Mapping[str, Any] = field(default_factory=dict)
    run_id: str | None = None  # continue exactly this run (workers); None: the thread's latest

    @classmethod
    def parse(cls, config: Mapping[str, Any] | None) -> RunConfig:
        if config is None:
            return cls(thread_id=None)
        if not isinstance(config, Mapping):
            raise ConfigError(f"config must be a dict like {{'thread_id': 't1'}}; got {config!r}")
        merged: dict[str, Any] = {}
        inner = config.get("configurable")
        if isinstance(inner, Mapping):
            merged.update(inner)
        merged.update({k: v for k, v in config.items() if k != "configurable"})
        thread_id = merged.get("thread_id")
        if thread_id is not None:
            thread_id = _thread_id(thread_id)
            if not thread_id:
                raise ConfigError("thread_id must not be empty")
            if "\x00" in thread_id:
                raise ConfigError(
                    f"thread_id must not contain NUL characters (no store keeps them); got "
                    f"{thread_id!r}"
                )
        limit = merged.get("recursion_limit", DEFAULT_RECURSION_LIMIT)
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ConfigError(f"recursion_limit must be a positive integer; got {limit!r}")
        return cls(
            thread_id=thread_id,
            node_timeout=_timeout(
                "node_timeout", merged.get("node_timeout", _MISSING), DEFAULT_NODE_TIMEOUT
            ),
            tool_timeout=_timeout(
                "tool_timeout", merged.get("tool_timeout", _MISSING), DEFAULT_TOOL_TIMEOUT
            ),
            recursion_limit=limit,
            fault_plan=merged.get("fault_plan"),
            configurable={k: v for k, v in merged.items() if k not in _KNOWN},
            run_id=str(merged["run_id"]) if merged.get("run_id") else None,
        )

    def to_json(self) -> dict[str, Any]:
        """What is stored with the run (timeouts; not the fault plan)."""
        return {
            "node_timeout": self.node_timeout,
            "tool_timeout": self.tool_timeout,
            "recursion_limit": self.recursion_limit,
        }
