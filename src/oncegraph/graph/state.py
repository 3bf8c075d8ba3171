"""LangGraph's ``langgraph.graph.state`` names: ``StateGraph`` and
``CompiledStateGraph`` (oncegraph's :class:`~oncegraph.app.CompiledGraph`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from oncegraph.graph.builder import StateGraph

if TYPE_CHECKING:
    from oncegraph.app import CompiledGraph as CompiledStateGraph

__all__ = ["CompiledStateGraph", "StateGraph"]


def __getattr__(name: str) -> Any:
    if name == "CompiledStateGraph":  # the app module imports the graph package
        from oncegraph.app import CompiledGraph

        return CompiledGraph
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
