"""Which of a node's parameters get something injected, as LangGraph injects them.

The first parameter is the state. A later parameter named ``config``, ``writer``,
``store`` or ``runtime``, or annotated ``RunnableConfig``, ``StreamWriter``,
``BaseStore``, ``Runtime`` or ``NodeError`` (an error handler's; or named ``error``),
gets that value by keyword. A node whose second positional parameter is none of these
gets the config there, as before (``def node(state, cfg)``). Pure: reads signatures.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable
from typing import Any

from oncegraph.state.channels import StateSchema

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


def input_schema_of(fn: Callable[..., Any], state: Any) -> StateSchema | None:
    """The schema a node's first parameter is annotated with, if it is a state class
    (TypedDict, dataclass, pydantic model) other than the graph's state."""
    target = fn if inspect.isroutine(fn) else type(fn).__call__
    try:
        params = list(inspect.signature(fn).parameters.values())
        hints = typing.get_type_hints(target)
    except Exception:  # unresolvable annotations: the node reads the graph's state
        return None
    if not params or params[0].name not in hints:
        return None
    hint = hints[params[0].name]
    if hint is state or not isinstance(hint, type) or hint is dict:
        return None
    is_state_class = (
        (issubclass(hint, dict) and hasattr(hint, "__total__"))
        or dataclasses.is_dataclass(hint)
        or isinstance(getattr(hint, "model_fields", None), dict)
    )
    if not is_state_class:
        return None
    try:
        return StateSchema.of(hint)
    except Exception:
        return None


__all__ = ["INJECTABLE", "StreamWriter", "injected", "input_schema_of"]
