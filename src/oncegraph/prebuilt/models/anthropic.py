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

from collections.abc import Mapping, Sequence
from typing import Any

from oncegraph.errors import ConfigError
from oncegraph.messages import Message, ToolCall, ToolSpec
from oncegraph.prebuilt.models._client import SDKChatModel, Wire, answer, sdk_options
from oncegraph.prebuilt.models.base import (
    ModelResponse,
    OnText,
    content_text,
    install_hint,
    split_system,
    synthetic_call_id,
    tool_result_text,
)

try:
    import anthropic
except ImportError as exc:  # pragma: no cover - exercised by a test with the SDK hidden
    raise ImportError(install_hint("anthropic", "anthropic")) from exc

DEFAULT_MAX_TOKENS = 4096
_WIRE = Wire("id", "model", "usage", ("input_tokens", "output_tokens", None))


class AnthropicChatModel(SDKChatModel["anthropic.AsyncAnthropic"]):
    """A :class:`~oncegraph.prebuilt.models.ChatModel` over the Anthropic Messages API.

    ``api_key`` defaults to ``ANTHROPIC_API_KEY`` and ``base_url`` to
    ``ANTHROPIC_BASE_URL`` (both read by the SDK); ``timeout`` is in seconds;
    ``max_tokens`` is required by the API (default 4096); ``params`` are extra request
    fields (``temperature``...) sent on every call. A leading ``"anthropic/"`` is
    stripped from the model id. ``max_retries`` is the SDK's own retry count, 0 by
    default: the agent's ledger retries model calls, once. ``aclose()`` closes the
    clients it opened.
    """

    __slots__ = ("max_tokens",)

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float | None = None,
        max_retries: int | None = 0,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        params: Mapping[str, Any] | None = None,
        client: anthropic.AsyncAnthropic | None = None,
    ) -> None:
        model = model.removeprefix("anthropic/")
        super().__init__(
            model,
            f"anthropic/{model}",
            label="Anthropic",
            example="claude-sonnet-4-6",
            params=params,
            client=client,
            connect=lambda: anthropic.AsyncAnthropic(
                **sdk_options(api_key, base_url, timeout, max_retries)
            ),
            close=lambda c: c.close(),
            errors=(anthropic.AnthropicError,),
            key_env="ANTHROPIC_API_KEY",
        )
        self.max_tokens = max_tokens

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

    async def generate(
        self, messages: Sequence[Message], *, tools: Sequence[ToolSpec]
    ) -> ModelResponse:
        request = self._request(messages, tools)
        response = await (await self._client()).messages.create(**request)
        return from_anthropic(response)

    async def generate_stream(
        self, messages: Sequence[Message], *, tools: Sequence[ToolSpec], on_text: OnText
    ) -> ModelResponse:
        request = self._request(messages, tools)
        async with (await self._client()).messages.stream(**request) as stream:
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
    return answer(response, _WIRE, "".join(texts), calls, response.stop_reason)


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
        call_id = message.get("tool_call_id")
        if not call_id:
            raise ConfigError(f"tool message without tool_call_id: {message!r}")
        block: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": call_id,
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
