"""LangGraph's ``langgraph.constants`` names: ``START`` and ``END``; and the config key of
a node-finished observer (``CONFIG_KEY_NODE_FINISHED``: ``{"configurable":
{CONFIG_KEY_NODE_FINISHED: callback}}`` calls ``callback(node_name)`` each time a node
finishes, at every depth of subgraphs); ``PULL`` and ``PUSH``, the first part of a task's
``path`` (a node the graph's edges ran, a ``Send``)."""

from oncegraph.graph.constants import END, PULL, PUSH, START
from oncegraph.runtime.config import NODE_FINISHED as CONFIG_KEY_NODE_FINISHED

__all__ = ["CONFIG_KEY_NODE_FINISHED", "END", "PULL", "PUSH", "START"]
