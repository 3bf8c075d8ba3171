"""LangGraph's ``langgraph.store`` names: a key-value store shared across threads
(:class:`~oncegraph.store.base.BaseStore`, :class:`~oncegraph.store.memory.InMemoryStore`).

Pass one to ``compile(store=...)`` (or ``@entrypoint(store=...)``); a node gets it
through a parameter named ``store`` or as ``runtime.store``, and a subgraph shares its
parent's. A store is not the ledger: a write to it is an overwrite by key, so a node
that runs again after a crash writes the same item again (make the value depend only
on the node's input), and nothing in a store is replayed or reconciled.
"""

from oncegraph.store.base import BaseStore, Item, SearchItem

__all__ = ["BaseStore", "Item", "SearchItem"]
