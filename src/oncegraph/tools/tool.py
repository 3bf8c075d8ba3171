"""``@tool``: declare a function's effect class and recovery hooks.

Plain functions work as tools unchanged (class ``write``). ``@tool(effect=...)`` adds::

    @tool(effect="irreversible", reconcile=find_charge, recipient="payments",
          mask=["card"], retry=EffectRetry(max_attempts=1))
    def charge(order_id: str, amount: float) -> dict: ...

``dedup_window=`` says how long the recipient keeps an idempotency key (seconds or a
``timedelta``; ``None``: forever; not given: unknown), which a redelivery's preview
states and checks (:mod:`oncegraph.runs.redelivery`); ``source_version=fn`` computes the
version of what a read tool read from its result, kept on the effect.

``reconcile(effect_record)`` asks the provider what happened to an UNKNOWN effect and
returns a :class:`~oncegraph.ledger.outcomes.Reconciled`; ``simulate(**args)`` stands in
for the tool in simulation replays; ``probe(effect_record)`` checks an ``accepted``
effect.

The model sees the tool's name, description and the JSON schema of its parameters
(:mod:`oncegraph.tools.schema`: pydantic's schema of the signature, parameter
descriptions from ``Field(description=...)`` or the docstring). The description is
the docstring's text before its sections (``Args:`` ...) or ``description=...``. A tool
without one is a :class:`~oncegraph.errors.ConfigError`: a model picks tools by their
descriptions, and a silent empty one makes it guess. Pass ``description=""`` to opt out
explicitly (a tool that no model chooses, e.g. one a graph's own node calls).

Arguments are validated (and coerced, ``"red"`` -> ``Color.RED``) before anything is
recorded; bad ones go back to the model as an error tool message it can correct.

A sync tool runs in a worker thread, so ``tool_timeout`` can be enforced and a slow call
does not stall other runs on the event loop. ``@tool(inline=True)`` calls it on the event
loop thread instead, saving the hand-off: for quick, CPU-only tools that never block. An
inline tool cannot be timed out; ``tool_timeout`` does not apply to it.
"""

from __future__ import annotations

import datetime
import functools
import inspect
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias, overload

from oncegraph.errors import ConfigError, ToolArgumentsError
from oncegraph.graph.inputs import ReplayClass, replay_class
from oncegraph.ledger.masks import register as register_mask
from oncegraph.ledger.outcomes import Accepted, Completed
from oncegraph.ledger.perform import RunsOn
from oncegraph.ledger.retry import EffectRetry
from oncegraph.messages import ToolSpec
from oncegraph.runs.redelivery import window_seconds
from oncegraph.runtime import executor
from oncegraph.storage.records import EffectClass
from oncegraph.tools.docstrings import parse_docstring
from oncegraph.tools.schema import arguments_of

if TYPE_CHECKING:
    from langchain_core.tools import BaseTool

Validator = Callable[[Mapping[str, Any]], dict[str, Any]]
ToolLike: TypeAlias = "Tool | Callable[..., Any] | BaseTool"
"""What ``ReactAgent(tools=...)`` and ``ToolNode`` accept: a :class:`Tool`, a function, or
a LangChain ``BaseTool`` (the ``langchain`` extra)."""

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
    retry: EffectRetry | None = None,
    timeout: float | None = None,
    inline: bool = False,
    dedup: str | None = None,
    compensate: Any = None,
    replay: str = "recorded",
    dedup_window: Any = UNSAID,
    source_version: Callable[[Any], Any] | None = None,
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
    tool_name = name or getattr(fn, "__name__", None)
    if not tool_name or tool_name == "<lambda>":
        raise ConfigError(f"cannot name tool {fn!r}; pass name=...")
    if source_version is not None and not callable(source_version):
        raise ConfigError(
            f"tool {tool_name!r}: source_version= is a function of the tool's result that "
            "returns the version of what it read (e.g. lambda row: row['etag']); got "
            f"{source_version!r}"
        )
    doc = parse_docstring(inspect.getdoc(fn))
    if description is None:
        description = doc.description
        if not description:
            raise ConfigError(
                f"tool {tool_name!r} has no description, and a model chooses tools by their "
                "descriptions: give the function a docstring, or pass description=... "
                '(description="" to go without one on purpose)'
            )
    arguments = arguments_of(fn, tool_name, doc)
    return Tool(
        name=tool_name,
        fn=fn,
        description=description,
        parameters=arguments.schema,
        param_names=arguments.param_names,
        effect=effect_class(effect),
        reconcile=reconcile,
        simulate=simulate,
        probe=probe,
        recipient=recipient,
        mask=tuple(mask),
        retry=retry,
        timeout=timeout,
        is_async=is_async,
        inline=inline,
        validator=arguments.validate,
        dedup=dedup_text(dedup, tool_name),
        compensate=compensating(compensate, tool_name),
        replay=replay_class(replay, f"tool {tool_name!r}"),
        **window_fields(dedup_window, tool_name),
        source_version=source_version,
    )


def compensating(value: Any, name: str) -> Tool | str | None:
    """``compensate=`` as a Tool (a function is made one), a tool's name, or None; any
    other value is a ConfigError naming what it must be."""
    if value is None or isinstance(value, Tool):
        return value
    if isinstance(value, str):
        if not value.strip():
            raise ConfigError(f"tool {name!r}: compensate= names a tool; got an empty name")
        return value.strip()
    if callable(value):
        return as_tool(value)
    raise ConfigError(
        f"tool {name!r}: compensate= is the tool that undoes its effect (a Tool, a function "
        f"or the name of a tool of the graph); got {value!r}"
    )


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
    retry: EffectRetry | None = None,
    timeout: float | None = None,
    inline: bool = False,
    dedup: str | None = None,
    compensate: Tool | Callable[..., Any] | str | None = None,
    replay: str = "recorded",
    dedup_window: float | datetime.timedelta | None = ...,
    source_version: Callable[[Any], Any] | None = None,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(fn: Callable[..., Any] | None = None, /, **options: Any) -> Any:
    """Make ``fn`` a tool; usable bare (``@tool``) or with options (``@tool(effect=...)``)."""
    if fn is not None:
        return as_tool(fn, **options)
    return lambda f: as_tool(f, **options)


def as_tool(value: Any, **options: Any) -> Tool:
    """A :class:`Tool` from a function, a LangChain ``BaseTool`` or a Tool (as is).

    ``options`` are those of :func:`tool`; a LangChain tool takes them too (its name,
    description and argument schema are its own unless given).
    """
    if isinstance(value, Tool):
        if options:
            raise ConfigError(
                f"{value.name!r} is already a Tool; pass the options where it was made"
            )
        return value
    if _is_langchain_tool(value):
        from oncegraph.tools.langchain import from_langchain

        return from_langchain(value, **options)
    return _make(value, **options)


def _is_langchain_tool(value: Any) -> bool:
    """A LangChain ``BaseTool``, checked without importing langchain-core."""
    module = sys.modules.get("langchain_core.tools")
    base = getattr(module, "BaseTool", None)
    return isinstance(base, type) and isinstance(value, base)
