"""Google Gemini adapter (official ``google-genai`` SDK, ``client.aio``).

Mapping (ours -> wire): every system message is joined (blank line between, in order)
into ``config.system_instruction``; user messages become ``role: "user"`` contents,
assistant messages ``role: "model"`` contents with a text part and one
``function_call`` part per tool call; tool messages become ``function_response`` parts
(``name`` from the message or from the assistant call with that id,
``response={"output": ...}`` or ``{"error": ...}`` for ``status: "error"``) in a user
content; consecutive contents of the same role are merged. A ``ToolSpec`` becomes a
``FunctionDeclaration`` with ``parameters_json_schema`` (the JSON schema as is).
Automatic function calling is always disabled: the agent runs tools, through the ledger.

Ids: Gemini may return function calls without ids; they get ``call_1``, ``call_2``...
(by position) and such synthetic ids are not sent back to the API, real ones are.
Thought parts are dropped from the content.

Streaming (``generate_stream``) uses ``generate_content_stream`` (``streamGenerateContent``
over SSE): each chunk's text parts go to ``on_text`` as they arrive; the chunks' parts,
the last usage, id and finish reason are joined into one response, mapped exactly as
``generate`` maps a whole one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence
from typing import Any

from oncegraph.errors import ConfigError, OnceGraphError
from oncegraph.messages import Message, ToolCall, ToolSpec
from oncegraph.prebuilt.models._client import ClientOptions, SDKChatModel, Wire, sdk_import
from oncegraph.prebuilt.models.base import (
    ModelResponse,
    OnText,
    content_text,
    is_synthetic_call_id,
    split_system,
    synthetic_call_id,
    tool_names_by_call_id,
)

with sdk_import("google", "google-genai"):
    from google import genai
    from google.genai import types

#: what a call sends: the contents and the generation config
_Request = tuple[list[types.Content], types.GenerateContentConfig]

_WIRE = Wire(
    "response_id",
    "model_version",
    "usage_metadata",
    ("prompt_token_count", "candidates_token_count", "total_token_count"),
)


class GoogleChatModel(SDKChatModel["genai.Client", _Request]):
    """A :class:`~oncegraph.prebuilt.models.ChatModel` over the Gemini API.

    ``GoogleChatModel(model, *, api_key=None, base_url=None, timeout=None,
    max_retries=0, params=None, client=None)``: ``api_key`` defaults to
    ``GOOGLE_API_KEY`` / ``GEMINI_API_KEY`` (read by the SDK); ``base_url`` overrides
    the endpoint; ``timeout`` is in seconds; ``params`` are extra
    ``GenerateContentConfig`` fields (``temperature``...). A leading ``"google/"`` is
    stripped from the model id (``"google/gemini-2.5-flash"`` -> ``"gemini-2.5-flash"``).
    ``max_retries`` is the SDK's own retry count, 0 by default: the agent's ledger
    retries model calls, once. ``aclose()`` closes the clients it opened.
    """

    __slots__ = ()

    provider = "google"
    label = "Gemini"
    example = "gemini-2.5-flash"
    key_env = "GEMINI_API_KEY (or GOOGLE_API_KEY)"
    errors = (ValueError,)

    def _connect(self, options: ClientOptions) -> genai.Client:
        http = types.HttpOptions(base_url=options.base_url)
        if options.timeout is not None:
            http.timeout = max(1, round(options.timeout * 1000))  # the SDK takes milliseconds
        if options.max_retries:  # None or 0: the SDK never retries (its default without options)
            http.retry_options = types.HttpRetryOptions(attempts=options.max_retries + 1)
        return genai.Client(api_key=options.api_key, http_options=http)

    def _disconnect(self, client: genai.Client) -> Awaitable[None]:
        return client.aio.aclose()

    def _request(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> _Request:
        system, contents = to_google_contents(messages)
        config = types.GenerateContentConfig(
            **self.params,
            system_instruction=system,
            tools=to_google_tools(tools) if tools else None,
            automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
        )
        return contents, config

    async def _send(self, client: genai.Client, request: _Request) -> ModelResponse:
        contents, config = request
        response = await client.aio.models.generate_content(
            model=self.model, contents=contents, config=config
        )
        return self.from_google(response)

    async def _stream(
        self, client: genai.Client, request: _Request, on_text: OnText
    ) -> ModelResponse:
        contents, config = request
        stream = await client.aio.models.generate_content_stream(
            model=self.model, contents=contents, config=config
        )
        parts: list[types.Part] = []
        last: types.GenerateContentResponse | None = None
        finish: Any = None
        try:
            async for chunk in stream:
                last = chunk
                candidate = chunk.candidates[0] if chunk.candidates else None
                if candidate is None:
                    continue
                if candidate.finish_reason is not None:
                    finish = candidate.finish_reason
                for part in (candidate.content.parts if candidate.content else None) or ():
                    parts.append(part)
                    if part.text and not part.thought and part.function_call is None:
                        on_text(part.text)
        finally:
            close = getattr(stream, "aclose", None)
            if close is not None:  # an early exit must not leave the response open
                await close()
        if last is None:
            raise OnceGraphError(f"model {self.name} streamed no response")
        if not parts and not last.candidates:
            return self.from_google(last)  # blocked: the error names the reason
        joined = types.GenerateContentResponse(
            candidates=[
                types.Candidate(
                    content=types.Content(role="model", parts=parts), finish_reason=finish
                )
            ],
            usage_metadata=last.usage_metadata,
            response_id=last.response_id,
            model_version=last.model_version,
            prompt_feedback=last.prompt_feedback,
        )
        return self.from_google(joined)

    def from_google(self, response: types.GenerateContentResponse) -> ModelResponse:
        if not response.candidates:
            feedback = response.prompt_feedback
            reason = feedback.block_reason if feedback is not None else None
            raise OnceGraphError(
                f"model {self.name} returned no candidates"
                + (f" (prompt blocked: {_enum_str(reason)})" if reason is not None else "")
            )
        candidate = response.candidates[0]
        texts: list[str] = []
        calls: list[ToolCall] = []
        parts = candidate.content.parts if candidate.content is not None else None
        for part in parts or ():
            if part.function_call is not None:
                call = part.function_call
                calls.append(
                    {
                        "id": call.id or synthetic_call_id(len(calls)),
                        "name": call.name or "",
                        "args": dict(call.args or {}),
                    }
                )
            elif part.text is not None and not part.thought:
                texts.append(part.text)
        finish = _enum_str(candidate.finish_reason)
        return _WIRE.answer(response, "".join(texts), calls, finish)


def to_google_contents(messages: Sequence[Message]) -> tuple[str | None, list[types.Content]]:
    system, rest = split_system(messages)
    names = tool_names_by_call_id(rest)
    out: list[types.Content] = []
    for message in rest:
        role = "model" if message["role"] == "assistant" else "user"
        parts = _parts(message, names)
        if not parts:
            continue
        if out and out[-1].role == role and out[-1].parts is not None:
            out[-1].parts.extend(parts)
        else:
            out.append(types.Content(role=role, parts=parts))
    return system, out


def to_google_tools(tools: Sequence[ToolSpec]) -> list[types.Tool | Any]:
    return [
        types.Tool(
            function_declarations=[
                types.FunctionDeclaration(
                    name=spec["name"],
                    description=spec.get("description", ""),
                    parameters_json_schema=spec.get("parameters")
                    or {"type": "object", "properties": {}},
                )
                for spec in tools
            ]
        )
    ]


def _parts(message: Message, names: Mapping[str, str]) -> list[types.Part]:
    role = message["role"]
    content = message.get("content")
    if role == "tool":
        call_id = message.get("tool_call_id") or ""
        name = message.get("name") or names.get(call_id)
        if not name:
            raise ConfigError(
                f"tool message {message!r} names no tool and its tool_call_id matches no "
                "assistant tool call; Gemini needs the tool name for a function response"
            )
        key = "error" if message.get("status") == "error" else "output"
        response = types.FunctionResponse(name=name, response={key: content}, id=_wire_id(call_id))
        return [types.Part(function_response=response)]
    if role == "assistant":
        text = content_text(content)
        parts = [types.Part(text=text)] if text else []
        parts.extend(
            types.Part(
                function_call=types.FunctionCall(
                    name=call["name"], args=call["args"], id=_wire_id(call["id"])
                )
            )
            for call in message.get("tool_calls") or ()
        )
        return parts
    if role == "user":
        text = content_text(content)
        return [types.Part(text=text)] if text else []
    raise ConfigError(f"unknown message role {role!r} in {message!r}")


def _wire_id(call_id: str) -> str | None:
    return None if not call_id or is_synthetic_call_id(call_id) else call_id


def _enum_str(value: Any) -> str | None:
    if value is None:
        return None
    return str(getattr(value, "value", value))


__all__ = ["GoogleChatModel"]
