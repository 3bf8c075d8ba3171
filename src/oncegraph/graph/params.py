"""Which of a node's parameters get something injected, as LangGraph injects them.

The first parameter is the state. A later parameter named ``config``, ``writer``,
``store`` or ``runtime``, or annotated ``RunnableConfig``, ``StreamWriter``,
``BaseStore``, ``Runtime`` or ``NodeError`` (an error handler's; or named ``error``),
gets that value by keyword. A node whose second positional parameter is none of these
gets the config there, as before (``def node(state, cfg)``). Pure: reads signatures.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

StreamWriter = Callable[[Any], None]
"""What a node's ``writer`` is: ``writer(chunk)`` streams ``chunk`` (``stream_mode="custom"``)."""

INJECTABLE = ("config", "writer", "store", "runtime", "error")

_BY_NAME = {"config": "config", "writer": "writer", "store": "store", "runtime": "runtime"}
_BY_ANNOTATION = {
    "RunnableConfig": "config",
    "StreamWriter": "writer",
    "BaseStore": "store",
    "Runtime": "runtime",
    "NodeError": "error",
}


def _annotation_kind(annotation: Any) -> str | None:
    if annotation is inspect.Parameter.empty:
        return None
    if annotation == StreamWriter:
        return "writer"
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    if not text:
        text = repr(annotation)
    head = str(text).split("[", 1)[0].rsplit(".", 1)[-1].strip()
    return _BY_ANNOTATION.get(head)


def injected(fn: Callable[..., Any], *, handler: bool = False) -> tuple[tuple[str, str], ...]:
    """``(parameter, kind)`` for each parameter after the first that gets a value
    injected by keyword (``kind`` in :data:`INJECTABLE`); an error ``handler``'s
    parameter named ``error`` gets the error too."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return ()
    out: list[tuple[str, str]] = []
    for p in params[1:]:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.POSITIONAL_ONLY):
            continue
        kind = _annotation_kind(p.annotation) or _BY_NAME.get(p.name)
        if kind is None and handler and p.name == "error":
            kind = "error"
        if kind is not None:
            out.append((p.name, kind))
    return tuple(out)


__all__ = ["INJECTABLE", "StreamWriter", "injected"]
