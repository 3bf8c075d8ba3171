"""``ToolNode``: run the tool calls of the last assistant message through the ledger.

Each call is its own command (``<assistant message id>:<tool_call_id>``, each part in
the form every store keeps: :func:`~oncegraph.ledger.keys.tool_command_id`) and its own
effect record, so finished siblings are served from the ledger when the node re-runs.
Calls run in parallel, at most ``limits.concurrency`` at once; a turn over
``limits.per_turn`` or ``limits.per_run`` runs nothing and tells the model why
(:mod:`oncegraph.tools.limits`). A tool that raises becomes an error tool message the model can
read; a failure of the protocol itself (ledger down, unknown outcome, request mismatch)
stops the run, because answering the model would be guessing.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from oncegraph import _json
from oncegraph.errors import (
    ConfigError,
    EffectFailedError,
    ToolArgumentsError,
    _CrashSignal,
    _ParkSignal,
)
from oncegraph.ledger.keys import effect_id_for, tool_command_id
from oncegraph.ledger.perform import ToolFailed, perform
from oncegraph.ledger.planned import intent_record, planned
from oncegraph.runtime.context import CallSite, TaskContext, current_task
from oncegraph.runtime.streaming import wants
from oncegraph.state import lcmessages
from oncegraph.storage.records import EffectRecord
from oncegraph.tools.limits import ToolLimits
from oncegraph.tools.tool import Tool, ToolLike, as_tool

T = TypeVar("T")


def _content(result: Any) -> str:
    return result if isinstance(result, str) else _json.dumps_str(result)


def tool_identity(tools: Iterable[Tool]) -> list[str]:
    """One fingerprint part per tool (sorted): name, effect class, parameter schema."""
    return sorted(
        f"tool:{t.name}:{t.effect}:{hashlib.sha256(_json.canonical(t.parameters)).hexdigest()}"
        for t in tools
    )


class ToolNode:
    def __init__(
        self,
        tools: Sequence[ToolLike],
        *,
        messages_key: str = "messages",
        name: str = "tools",
        limits: ToolLimits | None = None,
    ) -> None:
        self.tools = {t.name: t for t in map(as_tool, tools)}
        if len(self.tools) != len(tools):
            raise ConfigError("two tools share a name; give each tool a unique name")
        if limits is not None and not isinstance(limits, ToolLimits):
            raise ConfigError(f"limits must be a ToolLimits; got {limits!r}")
        self.limits = limits if limits is not None else ToolLimits()
        self.messages_key = messages_key
        self.__name__ = name

    @property
    def effect_masks(self) -> dict[str, tuple[str, ...]]:
        """The fields each tool declared in ``mask=[...]``, for operator views."""
        return {t.name: t.mask for t in self.tools.values() if t.mask}

    def plan_intents(
        self,
        state: Any,
        *,
        site: CallSite,
        hash_key: bytes | None = None,
    ) -> list[EffectRecord]:
        """The intents of the calls this node will make from ``state`` at ``site``, for the
        driver to write with the checkpoint that decided them (:mod:`oncegraph.ledger.planned`):
        ``write`` tools whose arguments validate, in a turn within the limits. Exactly
        the records the calls would begin, so the step that runs them finds them."""
        messages = lcmessages.messages_of(state, self.messages_key)
        last = lcmessages.last_message(messages)
        if last.get("role") != "assistant":
            return []
        message_id = last.get("id")
        calls = list(last.get("tool_calls") or ())
        if not message_id or not calls or self.limits.refusal(messages, len(calls)):
            return []
        ids = [str(c.get("id") or "") for c in calls]
        intents = []
        for call, call_id in zip(calls, ids, strict=True):
            tool = self.tools.get(str(call.get("name") or ""))
            if not call_id or ids.count(call_id) > 1 or tool is None or not planned(tool.effect):
                continue
            args = call.get("args")
            try:
                tool.validate(args)
            except ToolArgumentsError:
                continue  # answered with an error, never called: nothing to plan
            try:
                record = intent_record(
                    site,
                    effect_type=tool.name,
                    effect_class=tool.effect,
                    command_id=tool_command_id(str(message_id), call_id),
                    request=args,
                    recipient=tool.recipient_for(args),
                    key=hash_key,
                    row_version=1,
                )
            except ConfigError:
                # arguments no request hash can be taken of (text with a lone surrogate):
                # nothing to plan; the step itself says what is wrong, and the run fails
                # resumable instead of stopping inside its commit with the thread held
                continue
            intents.append(record)
        return intents

    def __oncegraph_fingerprint__(self) -> list[str]:
        """Its tools in the graph fingerprint: names, parameter schemas, effect classes."""
        return tool_identity(self.tools.values())

    async def __call__(self, state: Any) -> Any:
        """The tool messages answering the last assistant message's calls: under
        ``messages_key`` (``{messages_key: [...]}``), or the list itself when the state
        is a message list (a graph whose root state is ``list[Message]``). They are
        LangChain ``ToolMessage`` objects when the assistant message is a LangChain one."""
        ctx = current_task()
        if ctx is None:
            raise ConfigError("ToolNode must run as a node of a compiled graph")
        messages = lcmessages.messages_of(state, self.messages_key)
        if not messages:
            raise ConfigError(f"ToolNode found no {self.messages_key!r} in the state")
        last = lcmessages.last_message(messages)
        root = isinstance(state, list)
        if last.get("role") != "assistant" or not last.get("tool_calls"):
            return [] if root else {}
        message_id = last.get("id")
        if not message_id:
            raise ConfigError("the assistant message has no id; store messages via add_messages")
        calls = list(last["tool_calls"])
        replies: list[Any] | None = self.refuse(ctx, messages, message_id, calls)
        if replies is None:
            replies = await self.run_calls(ctx, message_id, calls)
        if lcmessages.is_message(messages[-1]):  # answered in the shape the model spoke
            replies = [lcmessages.to_langchain(r) for r in replies]
        return replies if root else {self.messages_key: replies}

    def refuse(
        self, ctx: TaskContext, messages: Sequence[Any], message_id: str, calls: list[Any]
    ) -> list[dict[str, Any]] | None:
        """One error tool message per call when the turn is over a limit, else ``None``."""
        why = self.limits.refusal(messages, len(calls))
        if why is None:
            return None
        return [tool_reply(ctx, message_id, call, "error", f"Error: {why}") for call in calls]

    async def run_calls(
        self, ctx: TaskContext, message_id: str, calls: list[Any]
    ) -> list[dict[str, Any]]:
        """Run ``calls`` through the ledger, at most ``limits.concurrency`` at once."""
        if len(calls) == 1:  # the common case: no task to schedule
            return [await self._run(ctx, message_id, calls[0], True)]
        width = self.limits.concurrency
        if width is None or len(calls) <= width:
            return await settle([self._run(ctx, message_id, c, False) for c in calls])
        slots = asyncio.Semaphore(width)

        async def bounded(call: Any) -> dict[str, Any]:
            async with slots:
                return await self._run(ctx, message_id, call, False)

        return await settle([bounded(c) for c in calls])

    async def _run(
        self, ctx: TaskContext, message_id: str, call: Mapping[str, Any], fold: bool
    ) -> dict[str, Any]:
        call_id = str(call.get("id") or "")
        name = str(call.get("name") or "")
        command_id = tool_command_id(message_id, call_id)
        if not call_id:
            content = "Error: the tool call has no id; it was not executed."
            return tool_reply(ctx, message_id, call, "error", content)
        tool = self.tools.get(name)
        if tool is None:
            content = f"Error: unknown tool {name!r}; available: {sorted(self.tools)}"
            return tool_reply(ctx, message_id, call, "error", content)
        # The ledger records the JSON arguments the model sent (``args``): they are the
        # request, so the request hash (guarantee 6) and a resumed run's lookup depend only on
        # what the model said, never on how validation coerced it. The tool body gets the
        # validated, coerced values (``kwargs``). Bad arguments go back to the model as an
        # error it can correct; nothing is recorded or called for them.
        args = call.get("args")
        try:
            kwargs = tool.validate(args)
        except ToolArgumentsError as exc:
            content = f"Error: {exc}. Correct the arguments and call {name} again."
            return tool_reply(ctx, message_id, call, "error", content)
        assert isinstance(args, dict)
        events = wants(ctx.emit, "events")  # nothing is built for a caller that does not listen
        if events:
            ctx.emit(
                "events",
                {
                    "event": "tool_start",
                    "node": ctx.node,
                    "tool": name,
                    "tool_call_id": call_id,
                    "args": args,
                },
            )
        effect_call = tool.effect_call(
            command_id, args, kwargs, ctx.config.tool_timeout, fold=fold, replay=tool.replay
        )
        try:
            result = (await perform(ctx, effect_call)).result
        except EffectFailedError as exc:
            message = tool_reply(ctx, message_id, call, "error", f"Error: {exc}")
        except ToolFailed as failed:  # the tool itself failed: tell the model
            error = f"Error: {type(failed.error).__name__}: {failed.error}"
            message = tool_reply(ctx, message_id, call, "error", error)
        else:
            message = tool_reply(ctx, message_id, call, "success", _content(result))
        if events:
            ctx.emit(
                "events",
                {
                    "event": "tool_end",
                    "node": ctx.node,
                    "tool": name,
                    "tool_call_id": call_id,
                    "status": message["status"],
                },
            )
        return message


def tool_message_id(ctx: TaskContext, name: str, message_id: str, call_id: str) -> str:
    """The id of the tool message answering call ``call_id`` of assistant message
    ``message_id``: made from the call's effect id under the run id effects are keyed
    with, so a recorded replay answers the call with the original run's message id."""
    command_id = tool_command_id(message_id, call_id)
    return "tool_" + effect_id_for(ctx.key_run_id, name, command_id)[:32]


def tool_reply(
    ctx: TaskContext, message_id: str, call: Mapping[str, Any], status: str, content: Any
) -> dict[str, Any]:
    """The tool message answering ``call`` (of assistant message ``message_id``)."""
    call_id = str(call.get("id") or "")
    name = str(call.get("name") or "")
    return {
        "role": "tool",
        "tool_call_id": call_id,
        "name": name,
        "id": tool_message_id(ctx, name, message_id, call_id),
        "status": status,
        "content": content,
    }


async def settle(coros: list[Coroutine[Any, Any, T]]) -> list[T]:
    """Run sibling calls concurrently and return when ALL of them have ended (guarantee 13).

    Unlike ``asyncio.gather``, one sibling that parks the run or fails never returns
    while the others still run: each is finished and recorded first. Then the strongest
    signal is raised (a crash, then a park, then the first error, in call order). If the
    step itself is cancelled, the siblings are cancelled and waited for too.
    """
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        await asyncio.wait(tasks)
    except asyncio.CancelledError:
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks)
        raise
    errors = [t.exception() for t in tasks if not t.cancelled() and t.exception() is not None]
    for kind in (_CrashSignal, _ParkSignal, BaseException):
        for error in errors:
            if isinstance(error, kind):
                raise error
    return [t.result() for t in tasks]
