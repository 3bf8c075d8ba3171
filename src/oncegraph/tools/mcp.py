"""The tools of an MCP server as oncegraph tools, every call under the ledger.

::

    from mcp import StdioServerParameters
    from oncegraph.tools.mcp import MCPTools

    async with MCPTools(
        StdioServerParameters(command="refund-server"),   # or "http://host:8000/mcp"
        effects={"create_refund": "write"},   # it deduplicates on the _meta key
    ) as server:
        app = ReactAgent(model, tools=await server.atools()).compile(checkpointer=...)
        await app.ainvoke(...)

(``server.tools()`` lists them from sync code; ``server.close()`` closes from sync code.)

Each MCP tool becomes a :class:`~oncegraph.tools.tool.Tool` with the server's name,
description and input schema. Every call goes through the ledger like any other tool
call, and carries the call's idempotency key (``current_effect().idempotency_key``,
stable across crashes and resumes) in the request's ``_meta`` under
:data:`IDEMPOTENCY_META_KEY` (or ``meta_key=``), where a server can use it to deduplicate.

Its effect class (:func:`annotated_class`): the one the user declares always wins
(``effects``, ``tool_options[name]["effect"]``, or ``default_effect`` for every tool not
named). Otherwise it comes from the server's annotations, failing closed: ``read`` only
for a tool marked both ``readOnlyHint`` and ``idempotentHint``; ``write`` (run again
after an unknown outcome, with the same key) only for one marked ``idempotentHint`` and
``destructiveHint: false``; anything else (no annotations, destructive, not idempotent)
is ``irreversible``, so an unknown outcome is reconciled or parked for review, never
re-sent. Almost no MCP server deduplicates on a ``_meta`` key, so ``write`` by default
(what a plain function gets) would re-send a refund after a crash. A server's annotations
can only make a tool run again where the server itself says running again is harmless;
a server that lies about that is not one to call with money. Declare a tool ``write``
where you know the server deduplicates on the key (see :mod:`oncegraph.testing.recipient`
to check), or ``irreversible`` with a ``reconcile`` hook in ``tool_options``.

Invariants:

* Arguments are checked against the tool's input schema before anything is recorded; bad
  ones go back to the model as an error it can correct.
* A result with ``isError`` raises :class:`MCPToolError` (the model sees the server's
  text); the ledger records the failure. A structured result is returned as is, else the
  content blocks (one text block as a plain string).
* One MCP session per running event loop (the sync facade's loop and the user's own are
  different loops), opened on first use by a task of its own so that it is closed by the
  task that opened it (the SDK's anyio scopes require it). A session whose connection
  died is replaced on the next call. :meth:`MCPTools.aclose` closes every session, each on
  its own loop.
* ``crash_point(AFTER_MCP_CALL)`` marks the moment the server's answer arrived and
  nothing is recorded yet, for crash tests (``ONCEGRAPH_CRASH_AT=after_mcp_call``).
* Needs the ``mcp`` extra (``pip install "oncegraph[mcp]"``, the official SDK, v2).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Self

from oncegraph._loopbound import LoopBound
from oncegraph.errors import ConfigError, ToolArgumentsError
from oncegraph.runtime.context import crash_point, current_effect
from oncegraph.runtime.faults import declare_crash_point
from oncegraph.storage.records import EffectClass
from oncegraph.tools.base import Tool, Validator, effect_class
from oncegraph.tools.schema import json_schema_problems

AFTER_MCP_CALL = declare_crash_point("after_mcp_call")  # answered; not yet recorded

__all__ = ["IDEMPOTENCY_META_KEY", "MCPToolError", "MCPTools", "annotated_class"]

IDEMPOTENCY_META_KEY = "io.oncegraph/idempotency-key"
"""The ``_meta`` key of a call's idempotency key (the effect id: one per tool call,
the same on every attempt and after a resume)."""

_TOOL_OPTIONS = {
    "name",
    "description",
    "effect",
    "reconcile",
    "simulate",
    "probe",
    "recipient",
    "mask",
    "retry",
    "timeout",
    "dedup",
}


class MCPToolError(RuntimeError):
    """The MCP server answered a tool call with ``isError``; the message is its text."""


def _mcp() -> Any:
    try:
        import mcp
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError('MCP tools need the MCP SDK: pip install "oncegraph[mcp]"') from exc
    return mcp


class _Connection:
    """One open MCP client, held by a task of its own on one event loop."""

    def __init__(self, make_client: Callable[[], Any], server_name: str) -> None:
        self._make_client = make_client
        self._server_name = server_name
        self._ready = asyncio.Event()
        self._closing = asyncio.Event()
        self._error: BaseException | None = None
        self.client: Any = None
        self._task: asyncio.Task[None] | None = None

    @property
    def alive(self) -> bool:
        return self._task is not None and not self._task.done()

    async def open(self) -> _Connection:
        self._task = asyncio.get_running_loop().create_task(self._hold(), name="oncegraph-mcp")
        await self._ready.wait()
        if self._error is not None or self.client is None:
            await asyncio.gather(self._task, return_exceptions=True)
            cause = _leaf(self._error) if self._error is not None else "closed while opening"
            raise ConnectionError(
                f"could not open an MCP session with {self._server_name}: {cause}"
            ) from self._error
        return self

    async def _hold(self) -> None:
        try:
            async with self._make_client() as client:
                self.client = client
                self._ready.set()
                await self._closing.wait()
        except Exception as exc:
            if not self._ready.is_set():
                self._error = exc
        finally:
            self.client = None
            self._ready.set()

    async def aclose(self) -> None:
        self._closing.set()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)


class MCPTools:
    """The tools of one MCP server, with a session per event loop.

    ``server``: a URL (streamable HTTP), an ``mcp.StdioServerParameters`` (a command
    run as a subprocess, spoken to over stdio), or anything else ``mcp.Client`` accepts.
    ``effects``: tool name -> effect class (``"read"``, ``"write"``, ``"irreversible"``);
    ``default_effect`` for the rest (None: from each tool's annotations, see the module
    docstring). ``tool_options``: tool name -> options of
    :func:`oncegraph.tool` (``reconcile``, ``recipient``, ``mask``, ``retry``,
    ``timeout``, ``description``, ``name``, ``effect``). ``include``: load only these
    tools. ``recipient``: the effect records' recipient (default: the server's name).
    ``client_options``: more keyword arguments for ``mcp.Client``.
    """

    def __init__(
        self,
        server: Any,
        *,
        effects: Mapping[str, str | EffectClass] | None = None,
        default_effect: str | EffectClass | None = None,
        tool_options: Mapping[str, Mapping[str, Any]] | None = None,
        include: Sequence[str] | None = None,
        recipient: str | None = None,
        meta_key: str = IDEMPOTENCY_META_KEY,
        read_timeout: float | None = None,
        client_options: Mapping[str, Any] | None = None,
    ) -> None:
        _mcp()
        self.server = server
        self.effects = {k: effect_class(v) for k, v in (effects or {}).items()}
        self.default_effect = None if default_effect is None else effect_class(default_effect)
        self.tool_options = {k: dict(v) for k, v in (tool_options or {}).items()}
        for tool_name, options in self.tool_options.items():
            unknown = set(options) - _TOOL_OPTIONS
            if unknown:
                raise ConfigError(
                    f"tool_options[{tool_name!r}] has unknown options {sorted(unknown)}; "
                    f"use {sorted(_TOOL_OPTIONS)}"
                )
        self.include = None if include is None else tuple(include)
        self.recipient = recipient
        self.meta_key = meta_key
        self.read_timeout = read_timeout
        self.client_options = dict(client_options or {})
        self._connections: LoopBound[_Connection] = LoopBound()

    # -- sessions --------------------------------------------------------------------------

    def _make_client(self) -> Any:
        return _mcp().Client(
            self.server, read_timeout_seconds=self.read_timeout, **self.client_options
        )

    async def client(self) -> Any:
        """The running loop's ``mcp.Client`` (connected on first use, or again after the
        connection died). A server that cannot be reached is a ``ConnectionError``."""
        conn = await self._connections.aget(self._open)
        if not conn.alive or conn.client is None:
            await self._connections.aclose_current(_close)
            conn = await self._connections.aget(self._open)
        return conn.client

    async def _open(self) -> _Connection:
        return await _Connection(self._make_client, _server_name(self.server)).open()

    async def aclose(self) -> None:
        """Close every session, each on its own loop."""
        await self._connections.aclose_all(_close)

    def close(self) -> None:
        """:meth:`aclose` from sync code (no event loop may run in this thread)."""
        _refuse_running_loop("close", "aclose")
        asyncio.run(self.aclose())

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    # -- tools -----------------------------------------------------------------------------

    async def atools(self) -> list[Tool]:
        """The server's tools (every page of ``tools/list``), as oncegraph tools."""
        client = await self.client()
        listed: list[Any] = []
        cursor: str | None = None
        while True:
            page = await client.list_tools(cursor=cursor)
            listed.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        names = {t.name for t in listed}
        wanted = self.include if self.include is not None else tuple(t.name for t in listed)
        missing = [n for n in wanted if n not in names]
        if missing:
            raise ConfigError(
                f"the MCP server has no tools {missing}; it has {sorted(names)}"
            )
        for configured in [*self.effects, *self.tool_options]:
            if configured not in names:
                raise ConfigError(
                    f"effects/tool_options name {configured!r}, which the MCP server does not "
                    f"have; it has {sorted(names)}"
                )
        return [self._tool(t) for t in listed if t.name in wanted]

    def tools(self) -> list[Tool]:
        """:meth:`atools` from sync code; the session used for listing is closed again
        (calls open their own on the loop they run on)."""

        async def list_and_close() -> list[Tool]:
            try:
                return await self.atools()
            finally:
                await self._connections.aclose_current(_close)

        _refuse_running_loop("tools", "atools")
        return asyncio.run(list_and_close())

    def _tool(self, listed: Any) -> Tool:
        options = dict(self.tool_options.get(listed.name, {}))
        effect = options.pop("effect", self.effects.get(listed.name, self.default_effect))
        if effect is None:  # the user said nothing of this tool: the server's hints decide
            effect = annotated_class(getattr(listed, "annotations", None))
        name = options.pop("name", listed.name)
        description = options.pop("description", None)
        if description is None:
            description = listed.description or getattr(listed, "title", None) or ""
            if not description:
                raise ConfigError(
                    f"MCP tool {listed.name!r} has no description, and a model chooses tools "
                    f"by their descriptions: pass tool_options={{{listed.name!r}: "
                    '{"description": ...}} (or "" to go without one on purpose)'
                )
        schema = dict(listed.input_schema)
        remote_name = listed.name
        call = self._caller(remote_name)
        return Tool(
            name=name,
            fn=call,
            description=description,
            parameters=schema,
            param_names=tuple(schema.get("properties", {})),
            effect=effect_class(effect),
            is_async=True,
            validator=_schema_validator(name, schema),
            recipient=options.pop("recipient", self.recipient or _server_name(self.server)),
            mask=tuple(options.pop("mask", ())),
            **options,
        )

    def _caller(self, remote_name: str) -> Callable[..., Any]:
        async def call(**arguments: Any) -> Any:
            meta: dict[str, Any] = {}
            with contextlib.suppress(ConfigError):  # called outside the ledger: no key
                meta[self.meta_key] = current_effect().idempotency_key
            client = await self.client()
            result = await client.call_tool(remote_name, arguments, meta=meta or None)
            crash_point(AFTER_MCP_CALL)
            return _result_value(remote_name, result)

        call.__name__ = remote_name
        return call


def _hint(annotations: Any, snake: str, camel: str) -> Any:
    value = getattr(annotations, snake, None)
    return getattr(annotations, camel, None) if value is None else value


def annotated_class(annotations: Any) -> EffectClass:
    """The class a tool's MCP annotations allow when the user declared none, failing
    closed (the MCP defaults: not read-only, destructive, not idempotent): ``read`` only
    if read-only AND idempotent, ``write`` only if idempotent and not destructive, else
    ``irreversible``."""
    if annotations is None:
        return EffectClass.IRREVERSIBLE
    read_only = _hint(annotations, "read_only_hint", "readOnlyHint") is True
    idempotent = _hint(annotations, "idempotent_hint", "idempotentHint") is True
    destructive = _hint(annotations, "destructive_hint", "destructiveHint") is not False
    if read_only and idempotent:
        return EffectClass.READ
    if idempotent and not destructive:
        return EffectClass.WRITE
    return EffectClass.IRREVERSIBLE


def _leaf(exc: BaseException) -> BaseException:
    """The first real error inside (nested) exception groups, as anyio raises them."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


async def _close(conn: _Connection) -> None:
    await conn.aclose()


def _refuse_running_loop(sync_name: str, async_name: str) -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise ConfigError(
        f"MCPTools.{sync_name}() is for sync code; in async code use await .{async_name}()"
    )


def _server_name(server: Any) -> str:
    if isinstance(server, str):
        return server
    command = getattr(server, "command", None)
    if command:
        return " ".join([str(command), *map(str, getattr(server, "args", []) or [])])[:200]
    return type(server).__name__


def _block_value(block: Any) -> Any:
    if getattr(block, "type", None) == "text":
        return block.text
    dump: Any = block.model_dump(mode="json", by_alias=True, exclude_none=True)
    return dump


def _result_value(name: str, result: Any) -> Any:
    blocks = [_block_value(b) for b in result.content]
    if result.is_error:
        text = " ".join(b if isinstance(b, str) else str(b) for b in blocks)
        raise MCPToolError(f"MCP tool {name!r} failed: {text or 'no details given'}")
    if result.structured_content is not None:
        return result.structured_content
    if len(blocks) == 1:
        return blocks[0]
    return blocks


def _schema_validator(name: str, schema: Mapping[str, Any]) -> Validator:
    """Check arguments against the tool's JSON schema (jsonschema ships with the SDK)."""
    problems_of = json_schema_problems(
        schema, f"MCP tool {name!r} has an invalid input schema", "(arguments)"
    )

    def validate(args: Mapping[str, Any]) -> dict[str, Any]:
        problems = problems_of(dict(args))
        if problems:
            raise ToolArgumentsError(name, f"invalid arguments for {name}: {problems}")
        return dict(args)

    return validate
