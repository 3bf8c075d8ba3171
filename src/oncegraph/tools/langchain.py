"""LangChain tools (``langchain_core.tools.BaseTool``) as oncegraph tools.

``as_tool(base_tool, effect=..., recipient=..., ...)`` (and :class:`ToolNode` /
``ReactAgent``, which call it for every tool they get) turns a LangChain tool into a
:class:`~oncegraph.tools.tool.Tool` that runs under the ledger like any other::

    from langchain_core.tools import StructuredTool

    refund = StructuredTool.from_function(refund_order, description="Refund an order.")
    ToolNode([as_tool(refund, effect="irreversible", reconcile=find_refund)])

Invariants:

* Name, description and argument schema are the LangChain tool's own (its
  ``tool_call_schema``: injected arguments are not shown to the model), unless
  ``name=`` / ``description=`` are given. The effect class defaults to ``write``, as
  for a plain function: LangChain does not say what a tool does to the world.
* Arguments are checked against that schema before anything is recorded, so a bad call
  goes back to the model as an error it can correct; the tool then receives the JSON
  arguments as the model sent them and LangChain validates them once more, as it always
  does.
* A tool with a native coroutine (``coroutine=`` or its own ``_arun``) is awaited on the
  event loop; any other runs ``invoke`` in oncegraph's worker thread, so ``tool_timeout``
  and the rule of one attempt in flight apply as to any sync tool (LangChain's own
  ``ainvoke`` would hide the thread in its executor).
* ``langchain-core`` is imported only when such a tool is converted (``pip install
  "oncegraph[langchain]"``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Unpack

from pydantic import BaseModel, ValidationError

from oncegraph.errors import ConfigError, ToolArgumentsError
from oncegraph.tools.base import Tool, ToolOptions, check_inline, known_options, option_fields
from oncegraph.tools.schema import describe_validation_error

__all__ = ["from_langchain"]


def _langchain() -> Any:
    try:
        import langchain_core.tools as lc_tools
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            'LangChain tools need langchain-core: pip install "oncegraph[langchain]"'
        ) from exc
    return lc_tools


def _native_async(base_tool: Any, lc_tools: Any) -> bool:
    if hasattr(base_tool, "coroutine") and hasattr(base_tool, "func"):  # Tool, StructuredTool
        return base_tool.coroutine is not None
    return type(base_tool)._arun is not lc_tools.BaseTool._arun


def _schema_of(base_tool: Any) -> tuple[dict[str, Any], type[BaseModel] | None]:
    schema = base_tool.tool_call_schema
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        parameters = schema.model_json_schema()
        parameters.pop("title", None)
        parameters.pop("description", None)  # the tool's description, said once
        return parameters, schema
    if isinstance(schema, Mapping):
        return dict(schema), None
    raise ConfigError(
        f"LangChain tool {base_tool.name!r}: its tool_call_schema is neither a pydantic "
        f"model nor a JSON schema (got {type(schema).__name__})"
    )


def from_langchain(base_tool: Any, **options: Unpack[ToolOptions]) -> Tool:
    """A :class:`Tool` that calls the LangChain tool ``base_tool``; the options are those
    of :func:`oncegraph.tool`."""
    known_options(options, ToolOptions, "from_langchain")
    lc_tools = _langchain()
    if not isinstance(base_tool, lc_tools.BaseTool):
        raise ConfigError(f"{base_tool!r} is not a LangChain BaseTool")
    tool_name = options.get("name") or base_tool.name
    description = options.get("description")
    text = base_tool.description if description is None else description
    if description is None and not text:
        raise ConfigError(
            f"LangChain tool {tool_name!r} has no description, and a model chooses tools by "
            'their descriptions: give it one, or pass description=... (description="" to go '
            "without one on purpose)"
        )
    parameters, model = _schema_of(base_tool)
    is_async = _native_async(base_tool, lc_tools)
    check_inline(
        f"LangChain tool {tool_name!r}",
        inline=options.get("inline", False),
        is_async=is_async,
        timeout=options.get("timeout"),
    )

    def validate(args: Mapping[str, Any]) -> dict[str, Any]:
        if model is not None:
            try:
                model.model_validate(dict(args))
            except ValidationError as exc:
                raise ToolArgumentsError(
                    tool_name, describe_validation_error(tool_name, exc)
                ) from None
        return dict(args)

    if is_async:

        async def call_async(**kwargs: Any) -> Any:
            return await base_tool.ainvoke(kwargs)

        fn: Any = call_async
    else:

        def call_sync(**kwargs: Any) -> Any:
            return base_tool.invoke(kwargs)

        fn = call_sync
    names = tuple(parameters.get("properties", {}))
    return Tool(
        name=tool_name,
        fn=fn,
        description=text,
        parameters=parameters,
        param_names=names,
        is_async=is_async,
        validator=validate,
        **option_fields(options, tool_name),
        source=_source(base_tool, is_async),
    )


def _source(base_tool: Any, is_async: bool) -> Any:
    """The user's own function behind ``base_tool`` (what the key check reads): its
    ``func`` / ``coroutine`` (``Tool``, ``StructuredTool``, ``@tool``), else its class's
    ``_arun`` / ``_run``."""
    own = getattr(base_tool, "coroutine" if is_async else "func", None)
    if callable(own):
        return own
    return type(base_tool)._arun if is_async else type(base_tool)._run
