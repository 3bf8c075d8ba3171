"""JSON schema of a function's parameters, from its signature and docstring."""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable
from typing import Any, Literal, get_args, get_origin, get_type_hints

_SIMPLE: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    dict: {"type": "object"},
    list: {"type": "array"},
    type(None): {"type": "null"},
    Any: {},
}


def json_schema(tp: Any) -> dict[str, Any]:
    if tp in _SIMPLE:
        return dict(_SIMPLE[tp])
    origin = get_origin(tp)
    args = get_args(tp)
    if origin is typing.Annotated:
        return json_schema(args[0])
    if origin is Literal:
        return {"enum": list(args)}
    if origin in (typing.Union, types.UnionType):
        return {"anyOf": [json_schema(a) for a in args]}
    if origin in (list, tuple, set, frozenset):
        out: dict[str, Any] = {"type": "array"}
        if args and args[-1] is not Ellipsis:
            out["items"] = json_schema(args[0])
        return out
    if origin is dict:
        return {"type": "object"}
    model_schema = getattr(tp, "model_json_schema", None)
    if callable(model_schema):
        return dict(model_schema())
    return {}


def function_parameters(fn: Callable[..., Any]) -> tuple[dict[str, Any], list[str]]:
    """``(schema, parameter names)`` for ``fn``'s keyword-passable parameters."""
    try:
        hints = get_type_hints(fn, include_extras=True)
    except Exception:
        hints = {}
    props: dict[str, Any] = {}
    required: list[str] = []
    names: list[str] = []
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        names.append(p.name)
        props[p.name] = json_schema(hints.get(p.name, Any))
        if p.default is inspect.Parameter.empty:
            required.append(p.name)
    schema: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        schema["required"] = required
    return schema, names


def description_of(fn: Callable[..., Any]) -> str:
    doc = inspect.getdoc(fn) or ""
    return doc.strip().split("\n\n")[0].replace("\n", " ")
