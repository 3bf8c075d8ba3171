"""A LangChain chat model's tokens in ``stream_mode="messages"``.

While a node runs and the caller streams ``messages``, LangChain Runnables the node
calls see a callback handler of the task (in the node's ``config["callbacks"]`` and in
LangChain's own context variable, so a model called without passing ``config`` finds
it too). Being a streaming handler, it makes ``model.invoke`` stream: each token chunk
is emitted as ``(AIMessageChunk, metadata)``, and a model call that streamed nothing
emits its whole message when it ends. A call tagged ``nostream`` is not streamed.
Nothing here is imported, and no handler is made, unless LangChain is loaded and the
caller streams ``messages``.
"""

from __future__ import annotations

import contextvars
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any
from uuid import UUID

from oncegraph.runtime.streaming import wants
from oncegraph.state import lcmessages as lc

if TYPE_CHECKING:
    from oncegraph.runtime.context import TaskContext

NOSTREAM = "nostream"
_classes: dict[str, type] = {}


def _handler_class() -> type:
    found = _classes.get("handler")
    if found is not None:
        return found
    from langchain_core.callbacks import BaseCallbackHandler
    from langchain_core.outputs import ChatGenerationChunk
    from langchain_core.tracers._streaming import _StreamingCallbackHandler

    class TokenStream(BaseCallbackHandler, _StreamingCallbackHandler[Any]):
        """Emits a task's chat model tokens (see the module docstring)."""

        run_inline = True  # called in order, on the caller's thread

        def __init__(self, ctx: TaskContext, meta: dict[str, Any]) -> None:
            self.ctx = ctx
            self.meta = meta
            self.runs: dict[UUID, dict[str, Any]] = {}
            self.streamed: set[UUID] = set()

        def tap_output_aiter(self, run_id: UUID, output: AsyncIterator[Any]) -> Any:
            return output

        def tap_output_iter(self, run_id: UUID, output: Iterator[Any]) -> Any:
            return output

        def on_chat_model_start(
            self,
            serialized: dict[str, Any],
            messages: Any,
            *,
            run_id: UUID,
            tags: list[str] | None = None,
            metadata: dict[str, Any] | None = None,
            **kwargs: Any,
        ) -> None:
            if tags and NOSTREAM in tags:
                return
            meta = {**(metadata or {}), **self.meta}
            if tags:
                meta["tags"] = list(tags)
            self.runs[run_id] = meta

        def on_llm_new_token(  # type: ignore[override]
            self, token: str, *, chunk: Any = None, run_id: UUID, **kwargs: Any
        ) -> None:
            meta = self.runs.get(run_id)
            if meta is None or not isinstance(chunk, ChatGenerationChunk):
                return
            self.streamed.add(run_id)
            self.ctx.emit("messages", (chunk.message, meta))

        def on_llm_end(self, response: Any, *, run_id: UUID, **kwargs: Any) -> None:
            meta = self.runs.pop(run_id, None)
            if meta is None or run_id in self.streamed:
                self.streamed.discard(run_id)
                return
            for generations in getattr(response, "generations", ()):
                for generation in generations:
                    message = getattr(generation, "message", None)
                    if message is not None:
                        self.ctx.emit("messages", (message, meta))

        def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
            self.runs.pop(run_id, None)
            self.streamed.discard(run_id)

    _classes["handler"] = TokenStream
    return TokenStream


def token_handler(ctx: TaskContext, meta: dict[str, Any]) -> Any | None:
    """The task's handler when the caller streams ``messages`` and LangChain is loaded."""
    if lc._module() is None or not wants(ctx.emit, "messages"):
        return None
    return _handler_class()(ctx, meta)


def child_config(config: dict[str, Any]) -> contextvars.Token[Any] | None:
    """Make ``config`` (with the handler) the parent config of the LangChain Runnables
    the node calls without passing one; None when nothing was set."""
    if not config.get("callbacks"):
        return None
    from langchain_core.runnables.config import var_child_runnable_config

    return var_child_runnable_config.set(config)  # type: ignore[arg-type]


def reset_child(token: contextvars.Token[Any] | None) -> None:
    if token is not None:
        from langchain_core.runnables.config import var_child_runnable_config

        var_child_runnable_config.reset(token)


__all__ = ["child_config", "reset_child", "token_handler"]
