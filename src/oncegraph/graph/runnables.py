"""LangChain Runnables as nodes: ``add_node("agent", prompt | model)``.

A Runnable (anything with ``ainvoke``/``invoke`` and no ``__call__``: a chain, a
prompt, a chat model, a tool) or a dict of them (LangChain makes it a
``RunnableParallel``) runs as an async node: ``await runnable.ainvoke(state, config)``,
with the node's config in LangChain's shape (``configurable``, ``metadata``, ``tags``,
``recursion_limit``, ``callbacks``). The run's ids stay in ``configurable``: LangChain's
own ``run_id`` is a UUID of its tracer, which oncegraph's run ids are not.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

RUNNABLE_ATTR = "__langchain_runnable__"  # on a node made by as_node: its Runnable
_LANGCHAIN_KEYS = ("configurable", "metadata", "tags", "recursion_limit", "callbacks", "run_name")


def is_runnable(obj: Any) -> bool:
    """Whether ``obj`` is a LangChain Runnable (or a dict of them) rather than a function."""
    if isinstance(obj, Mapping):
        return bool(obj) and all(callable(v) or is_runnable(v) for v in obj.values())
    return not callable(obj) and callable(getattr(obj, "ainvoke", None))


def _coerced(obj: Any) -> Any:
    if not isinstance(obj, Mapping):
        return obj
    from langchain_core.runnables import base  # the langchain extra: a dict of Runnables

    coerce: Any = base.coerce_to_runnable
    return coerce(dict(obj))


def runnable_name(obj: Any) -> str | None:
    get_name = getattr(_coerced(obj), "get_name", None)
    name = get_name() if callable(get_name) else getattr(obj, "name", None)
    return name if isinstance(name, str) else None


def as_node(obj: Any) -> Callable[..., Any]:
    """An async node function that runs the Runnable ``obj`` on the node's input."""
    runnable = _coerced(obj)

    async def node(state: Any, config: dict[str, Any]) -> Any:
        handed = {k: config[k] for k in _LANGCHAIN_KEYS if k in config}
        return await runnable.ainvoke(state, handed)

    node.__name__ = runnable_name(obj) or "runnable"
    node.__qualname__ = node.__name__
    setattr(node, RUNNABLE_ATTR, runnable)  # what the drawing names (graph/view.py)
    return node


__all__ = ["RUNNABLE_ATTR", "as_node", "is_runnable", "runnable_name"]
