"""Anthropic Messages adapter (official ``anthropic`` SDK, async client).

Mapping (ours -> wire): every system message is joined (blank line between, in
order) into the top-level ``system`` parameter; an assistant message becomes content
blocks (a ``text`` block when there is text, then one ``tool_use`` block per tool call
with its ``id``, ``name`` and ``input``); tool messages become ``tool_result`` blocks
(``tool_use_id``, ``is_error`` for ``status: "error"``) in a user message; consecutive
messages of the same wire role are merged, as the API requires results to follow their
``tool_use`` turn directly. A ``ToolSpec`` becomes ``{"name", "description",
"input_schema"}``. Back: text blocks are concatenated, ``tool_use`` blocks become tool
calls with the provider's ids; other blocks (thinking) are not kept.

Streaming (``generate_stream``) uses the SDK's ``messages.stream``: text deltas go to
``on_text`` as they arrive, and the SDK's accumulated final message is mapped exactly as
``generate`` maps a whole one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import Any, Unpack

from oncegraph.errors import ConfigError
from oncegraph.messages import Message, ToolCall, ToolSpec
from oncegraph.prebuilt.models._client import (
    ClientOptions,
    SDKChatModel,
    SDKOptions,
    Wire,
    sdk_import,
)
from oncegraph.prebuilt.models.base import (
    ModelResponse,
    OnText,
    content_text,
    split_system,
    synthetic_call_id,
    tool_call_id_of,
    tool_result_text,
)

with sdk_import("anthropic", "anthropic"):
    import anthropic

DEFAULT_MAX_TOKENS = 4096
_WIRE = Wire("id", "model", "usage", ("input_tokens", "output_tokens", None))


class AnthropicChatModel(SDKChatModel["anthropic.AsyncAnthropic", dict[str, Any]]):
    """A :class:`~oncegraph.prebuilt.models.ChatModel` over the Anthropic Messages API.

    ``AnthropicChatModel(model, *, api_key=None, base_url=None, timeout=None,
    max_retries=0, max_tokens=4096, params=None, client=None)``: ``api_key`` defaults
    to ``ANTHROPIC_API_KEY`` and ``base_url`` to ``ANTHROPIC_BASE_URL`` (both read by
    the SDK); ``timeout`` is in seconds; ``max_tokens`` is required by the API (default
    4096); ``params`` are extra request fields (``temperature``...) sent on every call.
    A leading ``"anthropic/"`` is stripped from the model id. ``max_retries`` is the
    SDK's own retry count, 0 by default: the agent's ledger retries model calls, once.
    ``aclose()`` closes the clients it opened.
    """

    __slots__ = ("max_tokens",)

    provider = "anthropic"
    label = "Anthropic"
    example = "claude-sonnet-4-6"
    key_env = "ANTHROPIC_API_KEY"
    errors = (anthropic.AnthropicError,)

    def __init__(
        self,
        model: str,
        *,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        **options: Unpack[SDKOptions[anthropic.AsyncAnthropic]],
    ) -> None:
        super().__init__(model, **options)
        self.max_tokens = max_tokens

    def _connect(self, options: ClientOptions) -> anthropic.AsyncAnthropic:
        return anthropic.AsyncAnthropic(**options.httpx_keywords())

    def _disconnect(self, client: anthropic.AsyncAnthropic) -> Awaitable[None]:
        return client.close()

    def _request(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> dict[str, Any]:
        system, wire_messages = to_anthropic_messages(messages)
        request: dict[str, Any] = {
            "max_tokens": self.max_tokens,
            **self.params,
            "model": self.model,
            "messages": wire_messages,
        }
        if system is not None:
            request["system"] = system
        if tools:
            request["tools"] = to_anthropic_tools(tools)
        return request

    async def _send(
        self, client: anthropic.AsyncAnthropic, request: dict[str, Any]
    ) -> ModelResponse:
        return from_anthropic(await client.messages.create(**request))

    async def _stream(
        self, client: anthropic.AsyncAnthropic, request: dict[str, Any], on_text: OnText
    ) -> ModelResponse:
        async with client.messages.stream(**request) as stream:
            async for text in stream.text_stream:
                if text:
                    on_text(text)
            final = await stream.get_final_message()
        return from_anthropic(final)


def from_anthropic(response: Any) -> ModelResponse:
    texts: list[str] = []
    calls: list[ToolCall] = []
    for block in response.content:
        if block.type == "text":
            texts.append(block.text)
        elif block.type == "tool_use":
            args = block.input if isinstance(block.input, dict) else {}
            calls.append(
                {"id": block.id or synthetic_call_id(len(calls)), "name": block.name, "args": args}
            )
    return _WIRE.answer(response, "".join(texts), calls, response.stop_reason)


def to_anthropic_messages(
    messages: Sequence[Message],
) -> tuple[str | None, list[dict[str, Any]]]:
    system, rest = split_system(messages)
    out: list[dict[str, Any]] = []
    for message in rest:
        role = message["role"]
        blocks = _blocks(message)
        if not blocks:
            continue  # the API rejects empty turns; an empty message carries nothing
        wire_role = "assistant" if role == "assistant" else "user"
        if out and out[-1]["role"] == wire_role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": wire_role, "content": blocks})
    return system, out


def to_anthropic_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    return [
        {
            "name": spec["name"],
            "description": spec.get("description", ""),
            "input_schema": spec.get("parameters") or {"type": "object", "properties": {}},
        }
        for spec in tools
    ]


def _blocks(message: Message) -> list[dict[str, Any]]:
    role = message["role"]
    content = message.get("content")
    if role == "tool":
        block: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": tool_call_id_of(message),
            "content": tool_result_text(content),
        }
        if message.get("status") == "error":
            block["is_error"] = True
        return [block]
    if role == "assistant":
        text = content_text(content)
        blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        blocks.extend(
            {"type": "tool_use", "id": call["id"], "name": call["name"], "input": call["args"]}
            for call in message.get("tool_calls") or ()
        )
        return blocks
    if role == "user":
        if isinstance(content, list):
            # text parts are normalized; other parts are Anthropic's own blocks
            return [
                {"type": "text", "text": part} if isinstance(part, str) else dict(part)
                for part in content
            ]
        text = content_text(content)
        return [{"type": "text", "text": text}] if text else []
    raise ConfigError(f"unknown message role {role!r} in {message!r}")


__all__ = ["AnthropicChatModel"]
