"""The chat-model port: one Protocol, one response value, and its implementations.

``ChatModel`` is what the agent calls; ``ModelResponse`` is what it gets back and what
the ledger records (JSON only); ``StreamingChatModel`` is a model that can also stream its
text (``generate_stream``). ``ScriptedModel`` is a deterministic model for tests and
demos. The provider adapters (``openai``, ``anthropic``, ``google`` submodules) are NOT
imported here: each needs its SDK extra and is built by :func:`resolve_model`, which also
wraps a LangChain chat model (an instance or a ``provider:model`` string) in the
``langchain`` submodule's ``LangChainChatModel``.
"""

from __future__ import annotations

from oncegraph.prebuilt.models.base import (
    ChatModel,
    ModelResponse,
    StreamingChatModel,
)
from oncegraph.prebuilt.models.resolve import resolve_model
from oncegraph.prebuilt.models.scripted import ScriptedModel

__all__ = ["ChatModel", "ModelResponse", "ScriptedModel", "StreamingChatModel", "resolve_model"]
