"""LangChain chat models (``langchain_core`` ``BaseChatModel``) as oncegraph models.

``ReactAgent(model=ChatOpenAI(...))`` and ``ReactAgent(model="openai:gpt-4o-mini")``
(LangChain's ``provider:model`` form, built by ``langchain``'s ``init_chat_model``) both
end here: :class:`LangChainChatModel` wraps the model so the agent calls it like any
other adapter, and every call is still one recorded model effect (a resumed run reuses
the recorded answer and never calls the LangChain model for that turn again).

Mapping (ours -> LangChain): messages through
:func:`oncegraph.state.lcmessages.to_langchain` (``SystemMessage``, ``HumanMessage``,
``AIMessage`` with its ``tool_calls``, ``ToolMessage`` with its ``tool_call_id``); tool
specs as OpenAI-style function dicts to ``bind_tools``, which every tool-calling
LangChain model accepts. Back: the ``AIMessage``'s text parts are the content, its
``tool_calls`` the tool calls (``call_<n>`` when a call has no id), ``usage_metadata``
the usage, ``response_metadata``'s ``finish_reason`` / ``stop_reason`` the raw finish
reason. A tool call LangChain could not parse (``invalid_tool_calls``) is an error:
nothing runs and a resume asks the model again.

``generate_stream`` calls ``astream`` and hands each text delta to ``on_text``; the
chunks added up are the whole response. A model that does not stream answers in one
chunk (LangChain falls back to ``ainvoke``), which is then one delta.

Retries: the LangChain model's own retries (``ChatOpenAI(max_retries=2)`` by default)
are left as the user configured them; they happen inside one recorded try, invisible
to the ledger. The agent's ``model_retry`` is the recorded retry layer: pass
``max_retries=0`` to the LangChain model to have only that one.

``langchain_core`` is imported only when such a model is wrapped; ``langchain`` (and the
provider's package, e.g. ``langchain-openai``) only for a ``provider:model`` string.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from oncegraph.errors import ConfigError, OnceGraphError
from oncegraph.messages import Message, ToolCall, ToolSpec
from oncegraph.prebuilt.models.base import (
    ModelResponse,
    OnText,
    served_model,
    synthetic_call_id,
    tool_result_text,
)
from oncegraph.state import lcmessages

# LangChain's own ``provider:model`` form: a provider key (letters, digits, ``_``), a
# colon, the model. Our ``provider/model`` form is told apart by its slash.
_LANGCHAIN_ID = re.compile(r"[A-Za-z][A-Za-z0-9_]*:[^\s].*", re.DOTALL)
# Message ids LangChain makes up itself when the provider sent none (a run's uuid):
# not the provider's, so not recorded as such.
_LANGCHAIN_IDS = ("lc_run-", "run-")
# The provider packages of the common ``init_chat_model`` providers, for the install hint.
_PROVIDER_PACKAGES = {
    "openai": "langchain-openai",
    "azure_openai": "langchain-openai",
    "anthropic": "langchain-anthropic",
    "google_genai": "langchain-google-genai",
    "google_vertexai": "langchain-google-vertexai",
    "bedrock": "langchain-aws",
    "bedrock_converse": "langchain-aws",
    "ollama": "langchain-ollama",
    "mistralai": "langchain-mistralai",
    "groq": "langchain-groq",
}

# This adapter streams its deltas itself (on_text): the node's LangChain token handler
# (oncegraph.runtime.lcstream) leaves its calls alone, so no token is streamed twice.
_OWN_STREAM: Any = {"tags": ["nostream"]}


def is_langchain_model(value: Any) -> bool:
    """True for a LangChain ``BaseChatModel`` (False, without importing, if LangChain
    chat models were never imported)."""
    module = sys.modules.get("langchain_core.language_models")
    return module is not None and isinstance(value, module.BaseChatModel)


def is_langchain_runnable(value: Any) -> bool:
    """True for a LangChain ``Runnable`` (a chat model with tools bound, with retries,
    ...); False, without importing, if LangChain runnables were never imported."""
    module = sys.modules.get("langchain_core.runnables")
    return module is not None and isinstance(value, module.Runnable)


def is_langchain_id(model: str) -> bool:
    """True when ``model`` is written in LangChain's ``provider:model`` form
    (``"openai:gpt-4o-mini"``) rather than ours (``"openai/gpt-4o-mini"``)."""
    prefix = model.partition(":")[0]
    return "/" not in prefix and _LANGCHAIN_ID.fullmatch(model) is not None


def _provider_package(model: str) -> str:
    provider = model.partition(":")[0].lower()
    return _PROVIDER_PACKAGES.get(provider, f"langchain-{provider.replace('_', '-')}")


def init_model(model: str, **options: Any) -> LangChainChatModel:
    """``langchain``'s ``init_chat_model(model, **options)``, wrapped; a missing
    package raises ``ImportError`` naming the pip install."""
    package = _provider_package(model)
    try:
        from langchain.chat_models import init_chat_model
    except ImportError as exc:
        raise ImportError(
            f"model {model!r} is in LangChain's provider:model form, which needs the "
            f"langchain package and the provider's: pip install langchain {package} "
            "(or write it in oncegraph's form, e.g. 'openai/gpt-4o-mini')"
        ) from exc
    try:
        built = init_chat_model(model, **options)
    except ImportError as exc:
        raise ImportError(
            f"LangChain model {model!r} needs its provider's package ({exc}): pip install {package}"
        ) from exc
    except Exception as exc:  # the provider's own refusal (no API key, a bad option...)
        raise ConfigError(
            f"LangChain could not build model {model!r}: {type(exc).__name__}: {exc}. "
            "Fix the options given after the model (api_key=..., or the provider's "
            "environment variable), or build the LangChain model yourself and pass it "
            "(an id in oncegraph's own form is written with a slash: 'openai/gpt-4o-mini')"
        ) from exc
    return LangChainChatModel(built)


class LangChainChatModel:
    """A :class:`~oncegraph.prebuilt.models.ChatModel` over a LangChain chat model.

    ``name`` is ``"langchain/<class>:<model>"`` (``"langchain/ChatOpenAI:gpt-4o-mini"``),
    the model from its ``model_name`` or ``model`` attribute (``"langchain/<class>"``
    when it has neither). ``chat_model`` is the wrapped object, used as it is.
    """

    __slots__ = ("chat_model", "name")

    def __init__(self, chat_model: Any) -> None:
        if not is_langchain_model(chat_model):
            raise ConfigError(
                f"{type(chat_model).__name__} is not a LangChain chat model "
                "(langchain_core.language_models.BaseChatModel)"
            )
        self.chat_model = chat_model
        self.name = model_name(chat_model)

    def _runnable(self, tools: Sequence[ToolSpec]) -> Any:
        if not tools:
            return self.chat_model
        specs = [_tool_dict(spec) for spec in tools]
        try:
            return self.chat_model.bind_tools(specs)
        except NotImplementedError:
            raise ConfigError(
                f"the LangChain model {type(self.chat_model).__name__} cannot call tools "
                "(it does not implement bind_tools); give the agent a model that does, "
                "or no tools"
            ) from None

    async def generate(
        self, messages: Sequence[Message], *, tools: Sequence[ToolSpec]
    ) -> ModelResponse:
        runnable = self._runnable(tools)
        answer = await runnable.ainvoke(to_langchain_messages(messages), _OWN_STREAM)
        return self.from_langchain(answer)

    async def generate_stream(
        self, messages: Sequence[Message], *, tools: Sequence[ToolSpec], on_text: OnText
    ) -> ModelResponse:
        runnable = self._runnable(tools)
        whole: Any = None
        async for chunk in runnable.astream(to_langchain_messages(messages), _OWN_STREAM):
            text = _text(chunk.content)
            if text:
                on_text(text)
            whole = chunk if whole is None else whole + chunk
        if whole is None:
            raise OnceGraphError(f"model {self.name} streamed no answer at all")
        return self.from_langchain(whole)

    def from_langchain(self, message: Any) -> ModelResponse:
        """Our response for LangChain's ``AIMessage`` (or the chunks of one, added up)."""
        if getattr(message, "type", None) not in ("ai", "AIMessageChunk"):
            raise OnceGraphError(
                f"model {self.name} answered with a {type(message).__name__}, not an AIMessage"
            )
        invalid = list(getattr(message, "invalid_tool_calls", None) or ())
        if invalid:
            bad = invalid[0]
            raise OnceGraphError(
                f"model {self.name} called tool {bad.get('name')!r} with arguments that are "
                f"not a valid JSON object: {bad.get('args')!r}; nothing was run. Retry the "
                "run (resume) to ask the model again."
            )
        calls: list[ToolCall] = []
        for index, call in enumerate(message.tool_calls or ()):
            args = call.get("args")
            if not isinstance(args, Mapping):
                raise OnceGraphError(
                    f"model {self.name} called tool {call.get('name')!r} with arguments "
                    f"{args!r}, which are not a JSON object; nothing was run. Retry the run "
                    "(resume) to ask the model again."
                )
            calls.append(
                {
                    "id": call.get("id") or synthetic_call_id(index),
                    "name": call["name"],
                    "args": dict(args),
                }
            )
        usage: dict[str, int] = {}
        for key, value in (getattr(message, "usage_metadata", None) or {}).items():
            if key in ("input_tokens", "output_tokens", "total_tokens") and isinstance(value, int):
                usage[key] = value
        metadata = getattr(message, "response_metadata", None) or {}
        finish = metadata.get("finish_reason") or metadata.get("stop_reason")
        message_id = message.id
        if not isinstance(message_id, str) or message_id.startswith(_LANGCHAIN_IDS):
            message_id = metadata.get("id")  # where some integrations keep the provider's
        if not isinstance(message_id, str) or not message_id:
            message_id = None
        return ModelResponse(
            content=_text(message.content),
            tool_calls=tuple(calls),
            provider_message_id=message_id,
            usage=usage,
            raw_finish_reason=finish if isinstance(finish, str) else None,
            model_version=served_model(metadata.get("model_name") or metadata.get("model")),
        )


def model_name(chat_model: Any) -> str:
    """``"langchain/<class>:<model>"`` for a LangChain chat model."""
    label = f"langchain/{type(chat_model).__name__}"
    for attribute in ("model_name", "model", "model_id"):
        value = getattr(chat_model, attribute, None)
        if isinstance(value, str) and value:
            return f"{label}:{value}"
    return label


def to_langchain_messages(messages: Sequence[Message]) -> list[Any]:
    """Our messages as LangChain messages (a tool's result as the text it is sent as)."""
    out = []
    for message in messages:
        if isinstance(message, Mapping) and message.get("role") == "tool":
            content = message.get("content")
            if not isinstance(content, str):
                message = {**message, "content": tool_result_text(content)}
        if isinstance(message, Mapping) and message.get("role") == "assistant":
            content = message.get("content")
            if content is None:
                message = {**message, "content": ""}
        out.append(lcmessages.to_langchain(message))
    return out


def _tool_dict(spec: ToolSpec) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": spec["name"],
            "description": spec.get("description", ""),
            "parameters": spec.get("parameters") or {"type": "object", "properties": {}},
        },
    }


def _text(content: Any) -> str:
    """The text of a LangChain message content: a string, or its text blocks joined
    (tool-use, reasoning and other blocks are not text)."""
    if isinstance(content, str):
        return content
    texts: list[str] = []
    for part in content or ():
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, Mapping) and part.get("type") == "text":
            texts.append(str(part.get("text") or ""))
    return "".join(texts)


__all__ = [
    "LangChainChatModel",
    "init_model",
    "is_langchain_id",
    "is_langchain_model",
    "is_langchain_runnable",
]
