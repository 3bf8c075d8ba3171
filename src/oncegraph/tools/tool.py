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

import inspect
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeAlias, Unpack, overload

from oncegraph.errors import ConfigError
from oncegraph.graph.inputs import replay_class
from oncegraph.tools.base import (
    UNSAID,
    FunctionToolOptions,
    Tool,
    Validator,
    check_inline,
    dedup_text,
    effect_class,
    known_options,
    option_fields,
    window_fields,
    with_version,
)
from oncegraph.tools.docstrings import parse_docstring
from oncegraph.tools.schema import arguments_of

if TYPE_CHECKING:
    from langchain_core.tools import BaseTool

ToolLike: TypeAlias = "Tool | Callable[..., Any] | BaseTool"
"""What ``ReactAgent(tools=...)`` and ``ToolNode`` accept: a :class:`Tool`, a function, or
a LangChain ``BaseTool`` (the ``langchain`` extra)."""

def _make(fn: Callable[..., Any], **options: Unpack[FunctionToolOptions]) -> Tool:
    known_options(options, FunctionToolOptions, "_make")
    if not callable(fn):
        raise ConfigError(f"{fn!r} is not callable and cannot be a tool")
    is_async = inspect.iscoroutinefunction(fn)
    inline, timeout = options.get("inline", False), options.get("timeout")
    check_inline(f"tool {fn!r}", inline=inline, is_async=is_async, timeout=timeout)
    tool_name = options.get("name") or getattr(fn, "__name__", None)
    if not tool_name or tool_name == "<lambda>":
        raise ConfigError(f"cannot name tool {fn!r}; pass name=...")
    source_version = options.get("source_version")
    if source_version is not None and not callable(source_version):
        raise ConfigError(
            f"tool {tool_name!r}: source_version= is a function of the tool's result that "
            "returns the version of what it read (e.g. lambda row: row['etag']); got "
            f"{source_version!r}"
        )
    doc = parse_docstring(inspect.getdoc(fn))
    description = options.get("description")
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
        is_async=is_async,
        validator=arguments.validate,
        **option_fields(options, tool_name),
        compensate=compensating(options.get("compensate"), tool_name),
        replay=replay_class(options.get("replay", "recorded"), f"tool {tool_name!r}"),
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


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(**options: Unpack[FunctionToolOptions]) -> Callable[[Callable[..., Any]], Tool]: ...


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


__all__ = [
    "UNSAID",
    "Tool",
    "ToolLike",
    "Validator",
    "as_tool",
    "compensating",
    "dedup_text",
    "effect_class",
    "tool",
    "window_fields",
    "with_version",
]
