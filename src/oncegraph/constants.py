"""LangGraph's ``langgraph.constants`` names: ``START`` and ``END``; and the config key of
a node-finished observer (``CONFIG_KEY_NODE_FINISHED``: ``{"configurable":
{CONFIG_KEY_NODE_FINISHED: callback}}`` calls ``callback(node_name)`` each time a node
finishes, at every depth of subgraphs)."""

from oncegraph.graph.constants import END, START
from oncegraph.runtime.config import NODE_FINISHED as CONFIG_KEY_NODE_FINISHED

__all__ = ["CONFIG_KEY_NODE_FINISHED", "END", "START"]
