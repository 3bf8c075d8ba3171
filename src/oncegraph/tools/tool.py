"""``@tool``: declare a function's effect class and recovery hooks.

Plain functions work as tools unchanged (class ``write``). ``@tool(effect=...)`` adds::

    @tool(effect="irreversible", reconcile=find_charge, recipient="payments",
          mask=["card"], retry=RetryPolicy(max_attempts=1))
    def charge(order_id: str, amount: float) -> dict: ...

``reconcile(effect_record)`` asks the provider what happened to an UNKNOWN effect and
returns a :class:`~oncegraph.ledger.outcomes.Reconciled`; ``simulate(**args)`` stands in
for the tool in simulation replays; ``probe(effect_record)`` checks an ``accepted``
effect.

A sync tool runs in a worker thread, so ``tool_timeout`` can be enforced and a slow call
does not stall other runs on the event loop. ``@tool(inline=True)`` calls it on the event
loop thread instead, saving the hand-off: for quick, CPU-only tools that never block. An
inline tool cannot be timed out; ``tool_timeout`` does not apply to it.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

from oncegraph.errors import ConfigError
from oncegraph.ledger.perform import RunsOn
from oncegraph.ledger.retry import RetryPolicy
from oncegraph.messages import ToolSpec
from oncegraph.runtime import executor
from oncegraph.storage.records import EffectClass
from oncegraph.tools.schema import description_of, function_parameters

_CLASSES = {c.value: c for c in EffectClass if c is not EffectClass.MODEL}


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    fn: Callable[..., Any]
    description: str
    parameters: dict[str, Any]
    param_names: tuple[str, ...]
    effect: EffectClass = EffectClass.WRITE
    reconcile: Callable[..., Any] | None = None
    simulate: Callable[..., Any] | None = None
    probe: Callable[..., Any] | None = None
    recipient: str | Callable[[dict[str, Any]], str] | None = None
    mask: tuple[str, ...] = ()
    retry: RetryPolicy | None = None
    timeout: float | None = None  # overrides the run's tool_timeout
    is_async: bool = field(default=False)
    inline: bool = False  # a sync tool called on the event loop thread (no hand-off)

    @property
    def spec(self) -> ToolSpec:
        return {"name": self.name, "description": self.description, "parameters": self.parameters}

    def recipient_for(self, args: dict[str, Any]) -> str | None:
        if callable(self.recipient):
            return str(self.recipient(args))
        return self.recipient

    @property
    def runs(self) -> RunsOn:
        """Where a call runs: coroutines on the loop, sync tools in the worker pool (or on
        the loop thread when ``inline``)."""
        return "loop" if self.is_async else "inline" if self.inline else "thread"

    def bind(self, args: dict[str, Any]) -> Callable[[], Any]:
        """The call of this tool with ``args``, for :class:`~oncegraph.ledger.EffectCall`."""
        return functools.partial(self.fn, **args)

    async def acall(self, args: dict[str, Any]) -> Any:
        """Run the function directly, outside the ledger (coroutines on the loop, sync
        functions in the worker pool unless inline)."""
        if self.is_async:
            return await self.fn(**args)
        if self.inline:
            return self.fn(**args)
        return await asyncio.wrap_future(executor.submit(self.bind(args)))

    def timeout_in(self, run_timeout: float | None) -> float | None:
        """The timeout a call of this tool runs under: its own, else the run's; none inline."""
        if self.inline:
            return None
        return self.timeout if self.timeout is not None else run_timeout

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


def _make(
    fn: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    effect: str | EffectClass = "write",
    reconcile: Callable[..., Any] | None = None,
    simulate: Callable[..., Any] | None = None,
    probe: Callable[..., Any] | None = None,
    recipient: str | Callable[[dict[str, Any]], str] | None = None,
    mask: Sequence[str] = (),
    retry: RetryPolicy | None = None,
    timeout: float | None = None,
    inline: bool = False,
) -> Tool:
    if not callable(fn):
        raise ConfigError(f"{fn!r} is not callable and cannot be a tool")
    is_async = inspect.iscoroutinefunction(fn)
    if inline and is_async:
        raise ConfigError(
            f"tool {fn!r} is a coroutine function; inline=True is for sync functions "
            "(coroutines already run on the event loop)"
        )
    if inline and timeout is not None:
        raise ConfigError(
            f"tool {fn!r}: an inline tool runs on the event loop thread and cannot be timed "
            "out; pass timeout= or inline=True, not both"
        )
    key = effect.value if isinstance(effect, EffectClass) else effect
    if key not in _CLASSES:
        raise ConfigError(f"effect={effect!r} is not a tool class; use one of {sorted(_CLASSES)}")
    tool_name = name or getattr(fn, "__name__", None)
    if not tool_name:
        raise ConfigError(f"cannot name tool {fn!r}; pass name=...")
    parameters, names = function_parameters(fn)
    return Tool(
        name=tool_name,
        fn=fn,
        description=description if description is not None else description_of(fn),
        parameters=parameters,
        param_names=tuple(names),
        effect=_CLASSES[key],
        reconcile=reconcile,
        simulate=simulate,
        probe=probe,
        recipient=recipient,
        mask=tuple(mask),
        retry=retry,
        timeout=timeout,
        is_async=is_async,
        inline=inline,
    )


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    effect: str | EffectClass = "write",
    reconcile: Callable[..., Any] | None = None,
    simulate: Callable[..., Any] | None = None,
    probe: Callable[..., Any] | None = None,
    recipient: str | Callable[[dict[str, Any]], str] | None = None,
    mask: Sequence[str] = (),
    retry: RetryPolicy | None = None,
    timeout: float | None = None,
    inline: bool = False,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(fn: Callable[..., Any] | None = None, /, **options: Any) -> Any:
    """Make ``fn`` a tool; usable bare (``@tool``) or with options (``@tool(effect=...)``)."""
    if fn is not None:
        return _make(fn, **options)
    return lambda f: _make(f, **options)


def as_tool(value: Tool | Callable[..., Any]) -> Tool:
    return value if isinstance(value, Tool) else _make(value)
