"""LangGraph's ``langgraph.constants`` names: ``START`` and ``END``; the config key of
a node-finished observer (``CONFIG_KEY_NODE_FINISHED``: ``{"configurable":
{CONFIG_KEY_NODE_FINISHED: callback}}`` calls ``callback(node_name)`` each time a node
finishes, at every depth of subgraphs); the config key of an observer of the attempts
of nodes with a ``TimeoutPolicy`` (``CONFIG_KEY_TIMED_ATTEMPT_OBSERVER``: the callback
gets each attempt's start, progress and finish events); and the names a snapshot's tasks and a
checkpoint tuple's pending writes use: ``PULL`` / ``PUSH`` (the first element of a
task's ``path``: a node the edges pulled, a ``Send``), ``ERROR``, ``INTERRUPT`` and
``RESUME`` (the channel of a pending write that holds a failed task's error, a question
it asked, an answer to it)."""

from oncegraph.graph.constants import END, PULL, PUSH, START
from oncegraph.runtime.config import NODE_FINISHED as CONFIG_KEY_NODE_FINISHED
from oncegraph.runtime.watched import TIMED_ATTEMPT_OBSERVER as CONFIG_KEY_TIMED_ATTEMPT_OBSERVER

ERROR = "__error__"
INTERRUPT = "__interrupt__"
RESUME = "__resume__"

__all__ = [
    "CONFIG_KEY_NODE_FINISHED",
    "CONFIG_KEY_TIMED_ATTEMPT_OBSERVER",
    "END",
    "ERROR",
    "INTERRUPT",
    "PULL",
    "PUSH",
    "RESUME",
    "START",
]
