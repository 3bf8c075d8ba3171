"""The chat-model port: ``ChatModel`` and ``ModelResponse`` (``resolve_model``, which
picks an adapter, is in :mod:`oncegraph.prebuilt.models.resolve`).

Invariants an implementer keeps:

- ``generate`` is a pure request/response call: it never mutates ``messages`` or
  ``tools`` and keeps no conversation state, so a resumed process with a fresh model
  object continues exactly where the old one stopped.
- A :class:`ModelResponse` round-trips through JSON unchanged
  (``ModelResponse.from_json(r.to_json()) == r``); the agent records ``to_json()`` in the
  effect ledger as the model call's result and an evidence replay rebuilds it from there.
- Every tool call in a response has a non-empty ``id`` that is unique within the
  response; when the provider gives none the adapter assigns ``call_1``, ``call_2``, ...
  in order (:func:`synthetic_call_id`), so the same response always gets the same ids.
  An id holding a character no store keeps (NUL, a lone surrogate: a provider's or a
  model's text) is rewritten by :class:`ModelResponse` itself, for every adapter, into
  its :func:`~oncegraph.ledger.keys.storable_id` form: the stored assistant message, the
  tool's answer and the next request all carry that one id.
- A model that can stream also offers ``generate_stream`` (:class:`StreamingChatModel`):
  the same call through the provider's streaming API, handing each text delta to
  ``on_text`` as it arrives and returning the WHOLE response, equal to what ``generate``
  would have returned for the same answer. Only that whole response is recorded, so a
  resumed run reuses it and never streams (or pays for) the turn again.
- Adapters leave their SDK's own retries off by default (``max_retries=0``): the agent
  retries model calls through the ledger (``ReactAgent(model_retry=...)``), and two
  stacked retry layers would multiply attempts and hide them from the effect record.

The provider adapters live in sibling modules and import their SDK at import time;
:func:`~oncegraph.prebuilt.models.resolve.resolve_model` imports them lazily so that a
missing SDK only matters to someone who asked for that provider, and then fails with the
exact install command.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from oncegraph import _json
from oncegraph.errors import ConfigError, OnceGraphError
from oncegraph.ledger.keys import storable_id
from oncegraph.messages import Message, ToolCall, ToolSpec

_RESPONSE_KEYS = frozenset(
    {"content", "tool_calls", "provider_message_id", "usage", "raw_finish_reason", "model"}
)

OnText = Callable[[str], None]
"""Receives each text delta of a streamed answer, in order, as it arrives."""


@runtime_checkable
class ChatModel(Protocol):
    """A chat model the agent can call.

    ``name`` identifies the model in run records (``"google/gemini-2.5-flash"``).
    ``generate`` sends the whole conversation and the tool specs, and returns one
    assistant turn. It must not mutate its arguments nor keep per-conversation state.

    An adapter that holds network clients may also offer ``async def aclose(self)``,
    releasing the clients it opened (the provider adapters do; they also close them
    when the event loop that used them ends). It is not part of the Protocol: callers
    look for it (``getattr(model, "aclose", None)``), and a model must keep working
    after it, opening new clients on demand.
    """

    name: str

    async def generate(
        self, messages: Sequence[Message], *, tools: Sequence[ToolSpec]
    ) -> ModelResponse: ...


@runtime_checkable
class StreamingChatModel(ChatModel, Protocol):
    """A :class:`ChatModel` that can also stream its answer's text.

    ``generate_stream`` makes the same request as ``generate`` through the provider's
    streaming API, calls ``on_text(delta)`` for each piece of text as it arrives (never
    with an empty string) and returns the whole :class:`ModelResponse`, tool calls and
    usage included. The deltas joined equal the response's ``content``.
    """

    async def generate_stream(
        self, messages: Sequence[Message], *, tools: Sequence[ToolSpec], on_text: OnText
    ) -> ModelResponse: ...


@dataclass(frozen=True, slots=True)
class ModelResponse:
    """One assistant turn as returned by a model; JSON round-trips unchanged.

    ``usage`` uses the common keys ``input_tokens``, ``output_tokens`` and
    ``total_tokens`` (only those the provider reported). ``raw_finish_reason`` is the
    provider's own stop reason string, unchanged (``"tool_calls"``, ``"tool_use"``,
    ``"STOP"``...). ``model`` names the model that answered when the agent had a choice
    (fallback models); adapters leave it ``None``, and ``to_json`` omits it then.
    ``model_version`` is the model the provider says served the turn (OpenAI's and
    Anthropic's ``model``, Gemini's ``modelVersion``, LangChain's
    ``response_metadata["model_name"]``): the turn's effect keeps it as its source
    version. It is not part of ``to_json`` (the recorded result stays as it was).
    """

    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    provider_message_id: str | None = None
    usage: Mapping[str, int] = field(default_factory=dict)
    raw_finish_reason: str | None = None
    model: str | None = None
    model_version: str | None = None

    def __post_init__(self) -> None:
        # A provider's id with NUL or a lone surrogate would fail every commit of the
        # run (PostgreSQL text holds no NUL; no store encodes a surrogate) and leave
        # its thread blocked: each such id gets the form every store keeps.
        calls = self.tool_calls
        if any(storable_id(c["id"]) != c["id"] for c in calls if isinstance(c.get("id"), str)):
            fixed = tuple(
                {**c, "id": storable_id(c["id"])} if isinstance(c.get("id"), str) else c
                for c in calls
            )
            object.__setattr__(self, "tool_calls", fixed)

    def to_message(self, message_id: str) -> Message:
        """The assistant message to append to the conversation, with its persistent id."""
        message: Message = {"role": "assistant", "content": self.content, "id": message_id}
        if self.tool_calls:
            message["tool_calls"] = [
                {"id": call["id"], "name": call["name"], "args": copy.deepcopy(call["args"])}
                for call in self.tool_calls
            ]
        return message

    def to_json(self) -> dict[str, Any]:
        """A JSON-compatible dict (the form recorded in the effect ledger)."""
        data: dict[str, Any] = {
            "content": self.content,
            "tool_calls": [
                {"id": call["id"], "name": call["name"], "args": copy.deepcopy(call["args"])}
                for call in self.tool_calls
            ],
            "provider_message_id": self.provider_message_id,
            "usage": dict(self.usage),
            "raw_finish_reason": self.raw_finish_reason,
        }
        if self.model is not None:
            data["model"] = self.model
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | str | bytes) -> ModelResponse:
        """Rebuild a response from :meth:`to_json` output (a dict or its JSON text).

        Missing keys take their defaults and a tool call without ``id`` gets
        ``call_<n>`` (so hand-written scripts stay short); unknown keys and wrong types
        raise :class:`~oncegraph.errors.ConfigError` naming the field.
        """
        if isinstance(data, (str, bytes)):
            data = _json.loads(data)
        if not isinstance(data, Mapping):
            raise ConfigError(f"a model response must be a JSON object, got {type(data).__name__}")
        unknown = set(data) - _RESPONSE_KEYS
        if unknown:
            raise ConfigError(
                f"unknown model response field(s) {sorted(unknown)}; "
                f"allowed: {sorted(_RESPONSE_KEYS)}"
            )
        content = data.get("content")
        if content is None:
            content = ""
        if not isinstance(content, str):
            raise ConfigError(f"model response 'content' must be a string, got {content!r}")
        raw_calls = data.get("tool_calls") or []
        if not isinstance(raw_calls, Sequence) or isinstance(raw_calls, (str, bytes)):
            raise ConfigError(f"model response 'tool_calls' must be a list, got {raw_calls!r}")
        calls = tuple(_tool_call_from(raw, index) for index, raw in enumerate(raw_calls))
        _check_unique_ids(calls)
        usage = data.get("usage") or {}
        if not isinstance(usage, Mapping) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
            for k, v in usage.items()
        ):
            raise ConfigError(f"model response 'usage' must map str to int, got {usage!r}")
        return cls(
            content=content,
            tool_calls=calls,
            provider_message_id=_opt_str(data, "provider_message_id"),
            usage=dict(usage),
            raw_finish_reason=_opt_str(data, "raw_finish_reason"),
            model=_opt_str(data, "model"),
        )


# -- helpers shared by the adapters (not public API) ----------------------------------

_SYNTHETIC_ID = re.compile(r"call_[0-9]+")


def served_model(value: Any) -> str | None:
    """The model a provider's response says served it (``model``), when it says."""
    return value if isinstance(value, str) and value else None


def token_usage(
    input_tokens: int | None, output_tokens: int | None, total_tokens: int | None
) -> dict[str, int]:
    """A response's token counts under our names (``ModelResponse.usage``); a count the
    provider did not give is left out."""
    counts = (
        ("input_tokens", input_tokens),
        ("output_tokens", output_tokens),
        ("total_tokens", total_tokens),
    )
    return {key: value for key, value in counts if value is not None}


def synthetic_call_id(index: int) -> str:
    """The id given to the ``index``-th (0-based) tool call when the provider gave none."""
    return f"call_{index + 1}"


def is_synthetic_call_id(call_id: str) -> bool:
    return _SYNTHETIC_ID.fullmatch(call_id) is not None


def install_hint(extra: str, sdk: str) -> str:
    return (
        f"the {extra} model adapter needs the {sdk} package; "
        f'install it with: pip install "oncegraph[{extra}]"'
    )


def content_text(content: Any) -> str:
    """The text of a message ``content``: a string, or the text of its text parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts: list[str] = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, Mapping) and part.get("type") == "text":
                texts.append(str(part.get("text", "")))
            else:
                raise ConfigError(
                    f"unsupported message content part {part!r}; this adapter sends text "
                    "parts only ({'type': 'text', 'text': ...})"
                )
        return "".join(texts)
    return _json.dumps_str(content)


def tool_result_text(content: Any) -> str:
    """A tool message's content as the string providers expect (JSON for non-strings)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(p, Mapping) and p.get("type") == "text" for p in content
    ):
        return content_text(content)
    return _json.dumps_str(content)


def tool_call_id_of(message: Message) -> str:
    """The ``tool_call_id`` of a tool message, which the providers require."""
    call_id = message.get("tool_call_id")
    if not call_id:
        raise ConfigError(f"tool message without tool_call_id: {message!r}")
    return call_id


def parse_tool_args(raw: str | None, *, tool: str, model: str) -> dict[str, Any]:
    """Parse a provider's JSON-string tool arguments into a dict (``""`` means ``{}``).

    Arguments that do not parse are never quoted in the error: they may hold a value
    the tool masks, and the error goes to logs, traces and operator views. The error
    names where the text broke (and its length) instead."""
    if raw is None or not raw.strip():
        return {}
    try:
        value = _json.loads(raw)
    except ValueError as exc:
        where = str(exc).split("\n")[0]  # the parser's words and position, not the text
        raise OnceGraphError(
            f"model {model} called tool {tool!r} with arguments that are not valid JSON "
            f"({len(raw)} characters; {where}); they are not quoted here since they may "
            "hold masked values; nothing was run. Retry the run (resume) to ask the "
            "model again."
        ) from None
    if not isinstance(value, dict):
        raise OnceGraphError(
            f"model {model} called tool {tool!r} with arguments that are a JSON "
            f"{_json_kind(value)}, not a JSON object ({len(raw)} characters, not quoted "
            "since they may hold masked values); nothing was run. Retry the run (resume) "
            "to ask the model again."
        )
    return value


def _json_kind(value: Any) -> str:
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool) or value is None:
        return "literal"
    return "number"


def split_system(messages: Sequence[Message]) -> tuple[str | None, list[Message]]:
    """Pull all system messages out (joined by blank lines, in order) for providers
    that take the system prompt as a separate parameter."""
    system = [content_text(m.get("content")) for m in messages if m["role"] == "system"]
    rest = [m for m in messages if m["role"] != "system"]
    return ("\n\n".join(system) if system else None), rest


def tool_names_by_call_id(messages: Sequence[Message]) -> dict[str, str]:
    """``tool_call_id -> tool name`` from the assistant messages (for providers whose
    tool results must name the tool)."""
    names: dict[str, str] = {}
    for message in messages:
        for call in message.get("tool_calls") or ():
            names[call["id"]] = call["name"]
    return names


def _tool_call_from(raw: Any, index: int) -> ToolCall:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"tool call #{index + 1} must be an object, got {raw!r}")
    unknown = set(raw) - {"id", "name", "args"}
    if unknown:
        raise ConfigError(
            f"tool call #{index + 1} has unknown field(s) {sorted(unknown)}; "
            "allowed: ['args', 'id', 'name']"
        )
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"tool call #{index + 1} needs a non-empty string 'name': {raw!r}")
    call_id = raw.get("id") or synthetic_call_id(index)
    if not isinstance(call_id, str):
        raise ConfigError(f"tool call #{index + 1} 'id' must be a string: {raw!r}")
    args = raw.get("args")
    if args is None:
        args = {}
    if not isinstance(args, Mapping):
        raise ConfigError(f"tool call #{index + 1} 'args' must be an object: {raw!r}")
    return {"id": call_id, "name": name, "args": copy.deepcopy(dict(args))}


def _check_unique_ids(calls: Sequence[ToolCall]) -> None:
    seen: set[str] = set()
    for call in calls:
        if call["id"] in seen:
            raise ConfigError(
                f"tool call id {call['id']!r} appears twice in one model response; "
                "tool call ids must be unique within a response"
            )
        seen.add(call["id"])


def _opt_str(data: Mapping[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"model response {key!r} must be a string or null, got {value!r}")
    return value


__all__ = [
    "ChatModel",
    "ModelResponse",
    "OnText",
    "StreamingChatModel",
    "served_model",
]
