"""The virtual entry and exit nodes, and the first part of a task's ``path``."""

START = "__start__"
END = "__end__"

# A task's path (``PregelTask.path``, ``config["metadata"]["langgraph_path"]``) starts
# with one of these: PULL for a node the graph's edges ran, PUSH for a ``Send``.
PULL = "__pregel_pull"
PUSH = "__pregel_push"


def push_path(index: int) -> tuple[str, int, bool]:
    """The path of the ``index``-th ``Send`` of a step, as LangGraph spells it."""
    return (PUSH, index, False)


def triggers(node: str, pushed: bool) -> tuple[str, ...]:
    """What started a task, as LangGraph names it: ``("branch:to:<node>",)`` for a node
    the graph's edges ran, ``(PUSH,)`` for a ``Send``."""
    return (PUSH,) if pushed else (f"branch:to:{node}",)
