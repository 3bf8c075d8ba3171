"""The :class:`Tool` value and the checks every way of making one shares.

A tool is made from a function (:mod:`oncegraph.tools.tool`), a LangChain tool
(:mod:`oncegraph.tools.langchain`) or an MCP server's tool (:mod:`oncegraph.tools.mcp`);
each adapter imports this module, and :func:`oncegraph.tools.tool.as_tool` imports the
adapters (never the reverse), so no adapter needs the module that dispatches to it.
"""

from __future__ import annotations

import datetime
import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

from oncegraph.errors import ConfigError, ToolArgumentsError
from oncegraph.graph.inputs import ReplayClass
from oncegraph.ledger.masks import register as register_mask
from oncegraph.ledger.outcomes import Accepted, Completed
from oncegraph.ledger.perform import EffectCall, RunsOn
from oncegraph.ledger.retry import EffectRetry
from oncegraph.messages import ToolSpec
from oncegraph.runtime import executor
from oncegraph.storage.records import EffectClass

Validator = Callable[[Mapping[str, Any]], dict[str, Any]]
UNSAID: Any = object()
"""``dedup_window=`` not given: how long the recipient keeps a key is unknown."""

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
    retry: EffectRetry | None = None
    timeout: float | None = None  # overrides the run's tool_timeout
    is_async: bool = field(default=False)
    inline: bool = False  # a sync tool called on the event loop thread (no hand-off)
    # JSON arguments -> the function's keyword arguments, or ToolArgumentsError;
    # None passes the arguments on as sent
    validator: Validator | None = None
    # How the recipient deduplicates a repeated call without the idempotency key (a
    # write tool whose code never reads the key must say; oncegraph.tools.keycheck)
    dedup: str | None = None
    # How long the recipient keeps an idempotency key, in seconds (None: forever); only
    # meaningful when ``dedup_window_said`` (oncegraph.runs.redelivery)
    dedup_window: float | None = None
    dedup_window_said: bool = False
    # A read tool's result -> the version of the source it read (stored on the effect)
    source_version: Callable[[Any], Any] | None = None
    # The user's own function, where ``fn`` wraps it (a LangChain tool): what keycheck reads
    source: Callable[..., Any] | None = None
    # How an operator undoes this tool's effect (app.compensate): another Tool, or the
    # name of a tool of the same graph (oncegraph.tools.compensation)
    compensate: Tool | str | None = None
    # What the tool is to a replay: recorded, repeat or live (oncegraph.graph.inputs)
    replay: ReplayClass = "recorded"

    def __post_init__(self) -> None:
        register_mask(self.name, self.mask)  # a record's repr masks these fields

    @property
    def spec(self) -> ToolSpec:
        return {"name": self.name, "description": self.description, "parameters": self.parameters}

    def validate(self, args: Any) -> dict[str, Any]:
        """The keyword arguments the function receives for the JSON ``args`` a model sent.

        Raises :class:`~oncegraph.errors.ToolArgumentsError` (naming each bad argument).
        """
        if not isinstance(args, Mapping):
            raise ToolArgumentsError(
                self.name, f"arguments for {self.name} must be a JSON object; got {args!r}"
            )
        if self.validator is None:
            return dict(args)
        return self.validator(args)

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
        """The call of this tool with ``args``, for :class:`~oncegraph.ledger.EffectCall`
        (its result carries the ``source_version`` the tool computes, if it does)."""
        call = functools.partial(self.fn, **args)
        version = self.source_version
        if version is None:
            return call
        if self.is_async:

            async def versioned_async() -> Any:
                return with_version(await call(), version)

            return versioned_async
        return lambda: with_version(call(), version)

    async def acall(self, args: dict[str, Any]) -> Any:
        """Run the function directly, outside the ledger (coroutines on the loop, sync
        functions in the worker pool unless inline)."""
        if self.is_async:
            return await self.fn(**args)
        if self.inline:
            return self.fn(**args)
        return await executor.start(self.bind(args))[1]

    def timeout_in(self, run_timeout: float | None) -> float | None:
        """The timeout a call of this tool runs under: its own, else the run's; none inline."""
        if self.inline:
            return None
        return self.timeout if self.timeout is not None else run_timeout

    def effect_call(
        self,
        command_id: str,
        request: dict[str, Any],
        kwargs: dict[str, Any],
        run_timeout: float | None,
        *,
        fold: bool = False,
        replay: str = "recorded",
    ) -> EffectCall:
        """The ledger's command to call this tool once: ``request`` is what is recorded
        (the JSON arguments), ``kwargs`` what the function receives (validated)."""
        return EffectCall(
            effect_type=self.name,
            effect_class=self.effect,
            command_id=command_id,
            request=request,
            fn=self.bind(kwargs),
            runs=self.runs,
            simulate=self.simulate,
            kwargs=kwargs,
            recipient=self.recipient_for(request),
            reconcile=self.reconcile,
            probe=self.probe,
            retry=self.retry,
            timeout=self.timeout_in(run_timeout),
            fold=fold,
            mask=self.mask,
            replay=replay,
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


def with_version(value: Any, version: Callable[[Any], Any]) -> Any:
    """A tool's return value with the source version ``version`` computes from its result
    (a :class:`Completed` that names one already, or an :class:`Accepted`, as it is)."""
    if isinstance(value, Accepted) or (
        isinstance(value, Completed) and value.source_version is not None
    ):
        return value
    if isinstance(value, Completed):
        found = version(value.result)
        return Completed(value.result, value.provider_reference, _version_text(found))
    return Completed(value, None, _version_text(version(value)))


def _version_text(found: Any) -> str | None:
    return None if found is None else str(found)


def window_seconds(value: Any, tool: str) -> float | None:
    """``dedup_window=`` as seconds (``None``: the recipient keeps keys forever), or a
    ConfigError naming what it must be."""
    if value is None:
        return None
    if isinstance(value, datetime.timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(
            f"tool {tool!r}: dedup_window= is how long the recipient keeps an idempotency "
            "key: seconds (e.g. 86400), a datetime.timedelta, or None for forever; "
            f"got {value!r}"
        )
    if value < 0:
        raise ConfigError(
            f"tool {tool!r}: dedup_window= cannot be negative (got {value!r}); give the "
            "seconds the recipient keeps a key, or None for forever"
        )
    return float(value)


def window_fields(dedup_window: Any, name: str) -> dict[str, Any]:
    """The Tool fields of ``dedup_window=`` (not given: unknown)."""
    if dedup_window is UNSAID:
        return {}
    return {"dedup_window": window_seconds(dedup_window, name), "dedup_window_said": True}


def dedup_text(dedup: Any, name: str) -> str | None:
    """``dedup=`` as given (None), or a ConfigError naming what it must be."""
    if dedup is None:
        return None
    if not isinstance(dedup, str) or not dedup.strip():
        raise ConfigError(
            f"tool {name!r}: dedup= says in words how the recipient deduplicates a repeated "
            f"call without the idempotency key (e.g. \"natural key: order_id\"); got {dedup!r}"
        )
    return dedup.strip()


def effect_class(effect: str | EffectClass) -> EffectClass:
    """The tool class named by ``effect`` (``"read"``, ``"write"``, ``"irreversible"``)."""
    key = effect.value if isinstance(effect, EffectClass) else effect
    if key not in _CLASSES:
        raise ConfigError(f"effect={effect!r} is not a tool class; use one of {sorted(_CLASSES)}")
    return _CLASSES[key]


class ToolOptions(TypedDict, total=False):
    """The options of :func:`oncegraph.tool` that every way of making a tool from code
    takes (a function, a LangChain tool); :func:`option_fields` reads them."""

    name: str | None
    description: str | None
    effect: str | EffectClass
    reconcile: Callable[..., Any] | None
    simulate: Callable[..., Any] | None
    probe: Callable[..., Any] | None
    recipient: str | Callable[[dict[str, Any]], str] | None
    mask: Sequence[str]
    retry: EffectRetry | None
    timeout: float | None
    inline: bool
    dedup: str | None
    dedup_window: float | datetime.timedelta | None


class FunctionToolOptions(ToolOptions, total=False):
    """:class:`ToolOptions` and those only a function's tool takes."""

    compensate: Tool | Callable[..., Any] | str | None
    replay: str
    source_version: Callable[[Any], Any] | None


def known_options(options: Mapping[str, Any], kind: Any, maker: str) -> None:
    """A TypeError, as for an unknown keyword argument of ``maker``, if ``options`` names
    one that is not a key of the TypedDict ``kind``."""
    for key in options:
        if key not in kind.__optional_keys__ | kind.__required_keys__:
            raise TypeError(f"{maker}() got an unexpected keyword argument {key!r}")


def option_fields(options: ToolOptions, name: str) -> dict[str, Any]:
    """The :class:`Tool` fields of the shared options (each checked, the defaults of
    :func:`oncegraph.tool` for those not given) of the tool ``name``."""
    return {
        "effect": effect_class(options.get("effect", "write")),
        "reconcile": options.get("reconcile"),
        "simulate": options.get("simulate"),
        "probe": options.get("probe"),
        "recipient": options.get("recipient"),
        "mask": tuple(options.get("mask", ())),
        "retry": options.get("retry"),
        "timeout": options.get("timeout"),
        "inline": options.get("inline", False),
        "dedup": dedup_text(options.get("dedup"), name),
        **window_fields(options.get("dedup_window", UNSAID), name),
    }


def check_inline(what: str, *, inline: bool, is_async: bool, timeout: float | None) -> None:
    """A ConfigError if ``inline=True`` cannot apply: to a coroutine, or with a timeout.
    ``what`` names the tool as the user knows it (``"tool <fn>"``, ``"LangChain tool 'x'"``)."""
    if inline and is_async:
        raise ConfigError(
            f"{what} is a coroutine function; inline=True is for sync functions "
            "(coroutines already run on the event loop)"
        )
    if inline and timeout is not None:
        raise ConfigError(
            f"{what}: an inline tool runs on the event loop thread and cannot be timed "
            "out; pass timeout= or inline=True, not both"
        )


__all__ = [
    "UNSAID",
    "FunctionToolOptions",
    "Tool",
    "ToolOptions",
    "Validator",
    "check_inline",
    "dedup_text",
    "effect_class",
    "known_options",
    "option_fields",
    "window_fields",
    "window_seconds",
    "with_version",
]
