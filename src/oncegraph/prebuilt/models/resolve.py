"""Which :class:`~oncegraph.prebuilt.models.base.ChatModel` a ``model=`` argument names.

The adapters (``openai``, ``anthropic``, ``google``, ``langchain``) import the port in
:mod:`oncegraph.prebuilt.models.base`; this module imports the adapters (the provider ones
by name, when asked for), so the port never imports an adapter.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from oncegraph.errors import ConfigError
from oncegraph.prebuilt.models import langchain as lc
from oncegraph.prebuilt.models.base import ChatModel

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

PROVIDERS: Mapping[str, tuple[str, str]] = {
    # provider -> (module, class)
    "openai": ("oncegraph.prebuilt.models.openai", "OpenAIChatModel"),
    "anthropic": ("oncegraph.prebuilt.models.anthropic", "AnthropicChatModel"),
    "google": ("oncegraph.prebuilt.models.google", "GoogleChatModel"),
}


def resolve_model(
    model: str | ChatModel | BaseChatModel, provider: str | None = None, **options: Any
) -> ChatModel:
    """Turn ``model`` (+ ``provider``) into a :class:`ChatModel`.

    - A ``ChatModel`` instance is returned as is (``options`` must then be empty).
    - A LangChain chat model (``ChatOpenAI(...)``, any ``BaseChatModel``) is wrapped in
      :class:`~oncegraph.prebuilt.models.langchain.LangChainChatModel`.
    - A string is a model id for ``provider`` (``"openai"``, ``"anthropic"`` or
      ``"google"``); with ``provider=None`` the id must start with one of those names
      (``"google/gemini-2.5-flash"``). ``options`` go to the adapter
      (``api_key=``, ``base_url=``, ``timeout=``, ...).
    - A string in LangChain's ``provider:model`` form (``"openai:gpt-4o-mini"``, with
      ``provider=None``) is built by ``langchain``'s ``init_chat_model(model,
      **options)`` and wrapped as above.
    - ``"scripted"`` cannot be built from a string: pass a ``ScriptedModel``.

    A missing SDK raises ``ImportError`` whose message is the install command.
    """
    if not isinstance(model, str):
        if lc.is_langchain_model(model):
            if options:
                raise ConfigError(
                    f"model options {sorted(options)} only apply when the model is given by "
                    "name; configure the LangChain model itself instead"
                )
            return lc.LangChainChatModel(model)
        if lc.is_langchain_runnable(model):
            raise ConfigError(
                f"model is a LangChain {type(model).__name__}, not a chat model; pass the "
                "chat model itself (e.g. ChatOpenAI(...), not ChatOpenAI(...).bind_tools(...) "
                "or .with_retry()): the agent binds its tools, and its model_retry= does the "
                "recorded retries"
            )
        if not isinstance(model, ChatModel):
            raise ConfigError(
                f"model must be a model id string or a ChatModel (an object with a "
                f"'name' and an async 'generate'), got {type(model).__name__}"
            )
        if options:
            raise ConfigError(
                f"model options {sorted(options)} only apply when the model is given by "
                "name; configure the ChatModel instance itself instead"
            )
        return model
    if not model:
        raise ConfigError("model id is empty; pass e.g. model='google/gemini-2.5-flash'")
    if provider is None:
        if lc.is_langchain_id(model):
            return lc.init_model(model, **options)
        prefix, sep, _ = model.partition("/")
        if not sep or prefix.lower() not in PROVIDERS:
            raise ConfigError(
                f"cannot tell the provider of model {model!r}: pass provider= one of "
                f"{sorted(PROVIDERS)} or prefix the id with it (e.g. 'openai/gpt-4o'), "
                "or write it in LangChain's provider:model form (e.g. 'openai:gpt-4o', "
                "with langchain installed), or pass a LangChain chat model"
            )
        provider = prefix
    key = provider.lower()
    if key == "scripted":
        raise ConfigError(
            "provider 'scripted' cannot be built from a string; pass "
            "model=ScriptedModel([...]) from oncegraph.prebuilt.models"
        )
    if key not in PROVIDERS:
        raise ConfigError(
            f"unknown model provider {provider!r}; valid choices: {sorted(PROVIDERS)} "
            "(or pass a ChatModel instance as model=)"
        )
    module_name, class_name = PROVIDERS[key]
    cls = getattr(importlib.import_module(module_name), class_name)
    try:
        built: ChatModel = cls(model, **options)
    except TypeError as exc:
        raise ConfigError(f"bad option for the {key} model adapter: {exc}") from exc
    return built


__all__ = ["PROVIDERS", "resolve_model"]
