"""What a running node can reach, as LangGraph's ``langgraph.config`` offers it.

``get_stream_writer()`` gives the running node a writer whose chunks reach callers that
stream with ``stream_mode="custom"`` (from sync and async nodes alike, in order);
``get_config()`` gives the node's config (the same dict a node that takes a ``config``
parameter receives).
"""

from __future__ import annotations

from typing import Any

from oncegraph.errors import ConfigError
from oncegraph.graph.params import StreamWriter
from oncegraph.runtime.context import TaskContext, current_task


def _task(what: str) -> TaskContext:
    ctx = current_task()
    if ctx is None:
        raise ConfigError(f"{what}() can only be called inside a running graph node")
    return ctx


def get_stream_writer() -> StreamWriter:
    """A writer for ``stream_mode="custom"``: ``writer(chunk)`` streams ``chunk``."""
    ctx = _task("get_stream_writer")
    emit = ctx.emit

    def writer(chunk: Any) -> None:
        emit("custom", chunk)

    return writer


def get_config() -> dict[str, Any]:
    """The running node's config (thread id, configurable keys, LangGraph metadata)."""
    from oncegraph.runtime.tasks import node_config

    return node_config(_task("get_config"))


__all__ = ["StreamWriter", "get_config", "get_stream_writer"]
