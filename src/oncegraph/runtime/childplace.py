"""Where a subgraph task keeps its checkpoints and what it adds to the namespace.

Pure naming, shared by the code that runs subgraphs (:mod:`oncegraph.runtime.subgraph`)
and the code that lists them (the history's task states, the run readers), so the lister
does not import the runner.
"""

from __future__ import annotations


def child_thread(thread_id: str, task: str, checkpoint_id: str, n: int = 0) -> str:
    """The thread a subgraph's checkpoints live on (see the module docstring)."""
    return f"{thread_id}|{task}:{checkpoint_id}{f'#{n}' if n else ''}"


def child_place(
    stateful: bool, thread_id: str, task: str, node: str, checkpoint_id: str, step: int, n: int = 0
) -> tuple[str, tuple[str, ...]]:
    """Where the ``n``-th subgraph task ``task`` (of node ``node``, at parent checkpoint
    ``checkpoint_id`` of step ``step - 1``) runs keeps its checkpoints, and the elements it
    adds to the namespace, as LangGraph names them: ``("<task>:<step>",)`` for the first,
    ``("<task>:<step>", "<n>")`` for the n-th; a stateful subgraph's (``compile(
    checkpointer=True)``) thread is the same for every call on the parent's thread, and
    its namespace is the node's name."""
    if stateful:
        where = f"{thread_id}|{node}{f'#{n}' if n else ''}"
        return where, (node, str(n)) if n else (node,)
    element = f"{task}:{step}"
    return child_thread(thread_id, task, checkpoint_id, n), (element, str(n)) if n else (element,)


__all__ = ["child_place", "child_thread"]
