"""``ToolNode``: run the tool calls of the last assistant message through the ledger.

Each call is its own command (``<assistant message id>:<tool_call_id>``) and its own
effect record, so finished siblings are served from the ledger when the node re-runs.
Calls run in parallel. A tool that raises becomes an error tool message the model can
read; a failure of the protocol itself (ledger down, unknown outcome, request mismatch)
stops the run, because answering the model would be guessing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from oncegraph import _json
from oncegraph.errors import ConfigError, EffectFailedError, OnceGraphError
from oncegraph.ids import effect_id_for, tool_command_id
from oncegraph.ledger.perform import EffectCall, perform
from oncegraph.runtime.context import TaskContext, current_task
from oncegraph.state import lcmessages
from oncegraph.tools.tool import Tool, as_tool


def _content(result: Any) -> str:
    return result if isinstance(result, str) else _json.dumps_str(result)


class ToolNode:
    def __init__(
        self,
        tools: Sequence[Tool | Callable[..., Any]],
        *,
        messages_key: str = "messages",
        name: str = "tools",
    ) -> None:
        self.tools = {t.name: t for t in map(as_tool, tools)}
        if len(self.tools) != len(tools):
            raise ConfigError("two tools share a name; give each tool a unique name")
        self.messages_key = messages_key
        self.__name__ = name

    async def __call__(self, state: Any) -> dict[str, Any]:
        ctx = current_task()
        if ctx is None:
            raise ConfigError("ToolNode must run as a node of a compiled graph")
        messages = (
            state.get(self.messages_key)
            if isinstance(state, Mapping)
            else getattr(state, self.messages_key, None)
        )
        if not messages:
            raise ConfigError(f"ToolNode found no {self.messages_key!r} in the state")
        last = messages[-1]
        if lcmessages.is_message(last):  # a LangChain AIMessage: read it as our dict
            last = lcmessages.to_message_dict(last)
        if last.get("role") != "assistant" or not last.get("tool_calls"):
            return {}
        message_id = last.get("id")
        if not message_id:
            raise ConfigError("the assistant message has no id; store messages via add_messages")
        calls = list(last["tool_calls"])
        if len(calls) == 1:  # the common case: no task to schedule
            return {self.messages_key: [await self._run(ctx, message_id, calls[0], True)]}
        results = await asyncio.gather(*(self._run(ctx, message_id, c, False) for c in calls))
        return {self.messages_key: list(results)}

    async def _run(
        self, ctx: TaskContext, message_id: str, call: Mapping[str, Any], fold: bool
    ) -> dict[str, Any]:
        call_id = str(call.get("id") or "")
        name = str(call.get("name") or "")
        command_id = tool_command_id(message_id, call_id)
        base = {"role": "tool", "tool_call_id": call_id, "name": name}
        msg_id = "tool_" + effect_id_for(ctx.run_id, name, command_id)[:32]
        if not call_id:
            return {
                **base,
                "id": msg_id,
                "status": "error",
                "content": "Error: the tool call has no id; it was not executed.",
            }
        tool = self.tools.get(name)
        if tool is None:
            return {
                **base,
                "id": msg_id,
                "status": "error",
                "content": f"Error: unknown tool {name!r}; available: {sorted(self.tools)}",
            }
        args = call.get("args")
        problem = _check_args(tool, args)
        if problem:
            return {**base, "id": msg_id, "status": "error", "content": f"Error: {problem}"}
        assert isinstance(args, dict)
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
        effect_call = EffectCall(
            effect_type=name,
            effect_class=tool.effect,
            command_id=command_id,
            request=args,
            fn=lambda: tool.acall(args),
            recipient=tool.recipient_for(args),
            reconcile=tool.reconcile,
            probe=tool.probe,
            retry=tool.retry,
            timeout=tool.timeout_in(ctx.config.tool_timeout),
            fold=fold,
        )
        try:
            result = await perform(ctx, effect_call)
        except EffectFailedError as exc:
            message = {**base, "id": msg_id, "status": "error", "content": f"Error: {exc}"}
        except OnceGraphError:
            raise
        except Exception as exc:  # the tool itself failed: tell the model
            message = {
                **base,
                "id": msg_id,
                "status": "error",
                "content": f"Error: {type(exc).__name__}: {exc}",
            }
        else:
            message = {**base, "id": msg_id, "status": "success", "content": _content(result)}
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


def _check_args(tool: Tool, args: Any) -> str | None:
    if not isinstance(args, dict):
        return f"arguments for {tool.name} must be a JSON object; got {args!r}"
    unknown = sorted(set(args) - set(tool.param_names))
    if unknown and not _has_var_kw(tool):
        return f"{tool.name} got unexpected arguments {unknown}; expected {list(tool.param_names)}"
    missing = [p for p in tool.parameters.get("required", []) if p not in args]
    if missing:
        return f"{tool.name} is missing required arguments {missing}"
    return None


def _has_var_kw(tool: Tool) -> bool:
    import inspect

    return any(p.kind is p.VAR_KEYWORD for p in inspect.signature(tool.fn).parameters.values())
