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

#: Each kind of injected value and the annotation (its class name) that asks for it; a
#: parameter named as the kind asks for it too, ``error`` only an error handler's.
_KINDS = (
    ("config", "RunnableConfig"),
    ("writer", "StreamWriter"),
    ("store", "BaseStore"),
    ("runtime", "Runtime"),
    ("error", "NodeError"),
)

INJECTABLE = tuple(kind for kind, _ in _KINDS)

_BY_NAME = frozenset(INJECTABLE) - {"error"}
_BY_ANNOTATION = {annotation: kind for kind, annotation in _KINDS}


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
        kind = _annotation_kind(p.annotation)
        if kind is None and (p.name in _BY_NAME or (handler and p.name == "error")):
            kind = p.name
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
