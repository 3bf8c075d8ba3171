"""OpenAI chat-completions adapter (official ``openai`` SDK, async client).

Mapping (ours -> wire): system messages stay in place as ``role: system``; an assistant
message's ``tool_calls`` become ``{"id", "type": "function", "function": {"name",
"arguments": <JSON string>}}``; a tool message becomes ``role: tool`` with its
``tool_call_id``; a ``ToolSpec`` becomes ``{"type": "function", "function": {...}}``.
Back: ``arguments`` are parsed from their JSON string, ids kept as the provider sent
them, ``content`` is the text (or the refusal when there is no text).

Also works with OpenAI-compatible servers through ``base_url=``; with a ``base_url``
the model id is sent verbatim (gateways use ids like ``"openai/gpt-4o"``), without one
a leading ``"openai/"`` is stripped.

Streaming (``generate_stream``) sends the same request with ``stream=True`` and
``stream_options={"include_usage": True}``; text deltas go to ``on_text`` as they
arrive, tool-call pieces are joined by their ``index``, and the whole response is
built exactly as ``generate`` builds it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from oncegraph import _json
from oncegraph.errors import ConfigError, OnceGraphError
from oncegraph.messages import Message, ToolCall, ToolSpec
from oncegraph.prebuilt.models._client import ClientOptions, SDKChatModel, Wire, sdk_import
from oncegraph.prebuilt.models.base import (
    ModelResponse,
    OnText,
    content_text,
    parse_tool_args,
    synthetic_call_id,
    tool_call_id_of,
    tool_result_text,
)

with sdk_import("openai", "openai"):
    import openai

_WIRE = Wire("id", "model", "usage", ("prompt_tokens", "completion_tokens", "total_tokens"))


class OpenAIChatModel(SDKChatModel["openai.AsyncOpenAI", dict[str, Any]]):
    """A :class:`~oncegraph.prebuilt.models.ChatModel` over OpenAI chat completions.

    ``OpenAIChatModel(model, *, api_key=None, base_url=None, timeout=None,
    max_retries=0, params=None, client=None)``: ``api_key`` defaults to
    ``OPENAI_API_KEY`` and ``base_url`` to ``OPENAI_BASE_URL`` (both read by the SDK);
    ``timeout`` is in seconds; ``params`` are extra request fields (``temperature``,
    ``max_completion_tokens``...) sent on every call. ``max_retries`` is the SDK's own
    retry count, 0 by default: the agent's ledger retries model calls, once.
    ``aclose()`` closes the clients it opened.
    """

    __slots__ = ()

    provider = "openai"
    label = "OpenAI"
    example = "gpt-4o-mini"
    key_env = "OPENAI_API_KEY"
    errors = (openai.OpenAIError,)

    def _names(self, model: str, *, own_endpoint: bool) -> tuple[str, str]:
        # a gateway's ids (own base_url or client) are sent verbatim: "openai/gpt-4o"
        if not own_endpoint:
            model = model.removeprefix("openai/")
        return model, model if model.startswith("openai/") else f"openai/{model}"

    def _connect(self, options: ClientOptions) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(**options.httpx_keywords())

    def _disconnect(self, client: openai.AsyncOpenAI) -> Awaitable[None]:
        return client.close()

    def _request(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> dict[str, Any]:
        request: dict[str, Any] = {
            **self.params,
            "model": self.model,
            "messages": to_openai_messages(messages),
        }
        if tools:
            request["tools"] = to_openai_tools(tools)
        return request

    async def _send(self, client: openai.AsyncOpenAI, request: dict[str, Any]) -> ModelResponse:
        return self.from_openai(await client.chat.completions.create(**request))

    async def _stream(
        self, client: openai.AsyncOpenAI, request: dict[str, Any], on_text: OnText
    ) -> ModelResponse:
        request["stream"] = True
        request["stream_options"] = {**request.get("stream_options", {}), "include_usage": True}
        stream = await client.chat.completions.create(**request)
        joined = _Joined()
        async with stream:
            async for chunk in stream:
                text = joined.add(chunk)
                if text:
                    on_text(text)
        return self.from_openai(joined)

    def from_openai(self, response: Any) -> ModelResponse:
        if not response.choices:
            raise OnceGraphError(f"model {self.name} returned no choices (id {response.id})")
        choice = response.choices[0]
        message = choice.message
        calls: list[ToolCall] = []
        for index, call in enumerate(message.tool_calls or ()):
            if call.type != "function":
                raise OnceGraphError(
                    f"model {self.name} returned a {call.type!r} tool call; only function "
                    "tools are supported"
                )
            name = call.function.name
            args = parse_tool_args(call.function.arguments, tool=name, model=self.name)
            calls.append({"id": call.id or synthetic_call_id(index), "name": name, "args": args})
        content = message.content or message.refusal or ""
        return _WIRE.answer(response, content, calls, choice.finish_reason)


# -- a streamed completion, joined back into the shape of a whole one ------------------


@dataclass(slots=True)
class _Function:
    name: str = ""
    arguments: str = ""


@dataclass(slots=True)
class _Call:
    id: str | None = None
    type: str = "function"
    function: _Function = field(default_factory=_Function)


@dataclass(slots=True)
class _Message:
    content: str | None = None
    refusal: str | None = None
    tool_calls: list[_Call] = field(default_factory=list)


@dataclass(slots=True)
class _Choice:
    message: _Message = field(default_factory=_Message)
    finish_reason: str | None = None


@dataclass(slots=True)
class _Joined:
    """The chunks of one streamed completion joined into what ``from_openai`` reads
    (``id``, ``model``, ``choices[0].message``, ``usage``); only choice 0 is kept."""

    id: str | None = None
    model: str | None = None  # the model that served the stream, as its chunks name it
    choices: list[_Choice] = field(default_factory=list)
    usage: Any = None
    _calls: dict[int, _Call] = field(default_factory=dict)

    def add(self, chunk: Any) -> str:
        """Fold ``chunk`` in; returns its text delta ("" when it has none)."""
        self.id = self.id or chunk.id
        self.model = self.model or getattr(chunk, "model", None)
        if chunk.usage is not None:
            self.usage = chunk.usage
        text = ""
        for choice in chunk.choices or ():
            if choice.index != 0:
                continue
            if not self.choices:
                self.choices.append(_Choice())
            joined = self.choices[0]
            delta = choice.delta
            if choice.finish_reason is not None:
                joined.finish_reason = choice.finish_reason
            if delta is None:
                continue
            if delta.content:
                text = delta.content
                joined.message.content = (joined.message.content or "") + text
            if delta.refusal:
                joined.message.refusal = (joined.message.refusal or "") + delta.refusal
            for piece in delta.tool_calls or ():
                call = self._calls.get(piece.index)
                if call is None:
                    call = self._calls[piece.index] = _Call()
                    joined.message.tool_calls.append(call)
                if piece.id:
                    call.id = piece.id
                if piece.type:
                    call.type = piece.type
                if piece.function is not None:
                    call.function.name += piece.function.name or ""
                    call.function.arguments += piece.function.arguments or ""
        return text


def to_openai_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for message in messages:
        role = message["role"]
        content = message.get("content")
        if role == "tool":
            call_id = tool_call_id_of(message)
            out.append(
                {"role": "tool", "tool_call_id": call_id, "content": tool_result_text(content)}
            )
        elif role == "assistant":
            calls = message.get("tool_calls") or []
            item: dict[str, Any] = {"role": "assistant", "content": content_text(content)}
            if calls:
                item["content"] = item["content"] or None
                item["tool_calls"] = [
                    {
                        "id": call["id"],
                        "type": "function",
                        "function": {"name": call["name"], "arguments": _dump(call["args"])},
                    }
                    for call in calls
                ]
            out.append(item)
        elif role in ("system", "user"):
            # user content lists are passed through: OpenAI's own part format
            value = (
                content if isinstance(content, list) and role == "user" else content_text(content)
            )
            item = {"role": role, "content": value}
            if message.get("name"):
                item["name"] = message["name"]
            out.append(item)
        else:
            raise ConfigError(f"unknown message role {role!r} in {message!r}")
    return out


def to_openai_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": spec["name"],
                "description": spec.get("description", ""),
                "parameters": spec.get("parameters") or {"type": "object", "properties": {}},
            },
        }
        for spec in tools
    ]


def _dump(args: Mapping[str, Any]) -> str:
    return _json.dumps_str(dict(args))


__all__ = ["OpenAIChatModel"]
