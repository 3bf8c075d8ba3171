"""``MemorySaver`` / ``InMemorySaver``: oncegraph's in-memory store under LangGraph's names."""

from oncegraph.storage.memory import InMemoryCheckpointer

MemorySaver = InMemoryCheckpointer
InMemorySaver = InMemoryCheckpointer

__all__ = ["InMemorySaver", "MemorySaver"]
