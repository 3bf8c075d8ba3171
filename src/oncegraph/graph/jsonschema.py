"""The JSON schemas of what a graph takes and returns (``get_input_jsonschema`` /
``get_output_jsonschema``), as LangGraph makes them. Pure.

A TypedDict or pydantic schema is described by pydantic as it is; a dataclass (or
plain annotated class) field by field, optional where it has a default, is annotated
``Optional`` or ``NotRequired``; a root-value state as a model with one ``root`` field.
"""

from __future__ import annotations

import dataclasses
import sys
import types
import typing
from typing import Any, get_args, get_origin

import pydantic
import typing_extensions  # pydantic's own dependency

from oncegraph.state.channels import StateSchema


def json_schema(schema: StateSchema, name: str) -> dict[str, Any]:
    """The JSON schema of ``schema`` (a state, input or output schema), titled ``name``."""
    source = schema.source
    if schema.kind == "pydantic":
        out: dict[str, Any] = source.model_json_schema()
        return out
    # typing_extensions' check: it knows its own TypedDict too (a distinct class before
    # Python 3.12), which typing.is_typeddict does not
    if schema.kind == "typeddict" and typing_extensions.is_typeddict(source):
        try:
            described: dict[str, Any] = pydantic.TypeAdapter(source).json_schema()
            return described
        except pydantic.PydanticUserError:  # typing.TypedDict before Python 3.12
            pass
    if schema.kind == "root":
        root: type[pydantic.BaseModel] = pydantic.create_model(
            name, root=(_update_type(source), None)
        )
        return root.model_json_schema()
    if schema.kind == "dict":
        return {"title": name, "type": "object"}
    hints = typing.get_type_hints(source, include_extras=True)
    fields: dict[str, Any] = {
        key: (_update_type(hint), _default(key, hint, source)) for key, hint in hints.items()
    }
    model: type[pydantic.BaseModel] = pydantic.create_model(name, **fields)
    return model.model_json_schema()


def _update_type(hint: Any) -> Any:
    """The type an update of the field has: its annotation without the reducer and
    without ``Required`` / ``NotRequired``, with ``typing.TypedDict`` classes inside it
    made ``typing_extensions`` ones (pydantic describes only those before Python 3.12)."""
    return _describable(_unwrapped(hint)[0])


def _describable(tp: Any) -> Any:
    if isinstance(tp, type) and typing.is_typeddict(tp) and sys.version_info < (3, 12):
        hints = typing.get_type_hints(tp, include_extras=True)
        fields = {k: _describable(v) for k, v in hints.items()}
        made: Any = typing_extensions.TypedDict(tp.__name__, fields, total=tp.__total__)  # type: ignore[misc]
        return made
    origin, args = get_origin(tp), get_args(tp)
    if origin in (typing.Required, typing.NotRequired) and args:
        return origin[_describable(args[0])]
    if origin is typing.Annotated:
        return typing.Annotated[(_describable(args[0]), *tp.__metadata__)]
    if origin in (list, tuple, set, frozenset, dict) and args:
        return origin[tuple(_describable(a) for a in args)]
    if origin in (typing.Union, types.UnionType) and args:
        return typing.Union[tuple(_describable(a) for a in args)]  # noqa: UP007
    return tp


def _unwrapped(hint: Any) -> tuple[Any, bool | None]:
    """``(type, required)``: ``required`` is True / False under ``Required`` /
    ``NotRequired``, None when neither wraps it."""
    required: bool | None = None
    while True:
        origin = get_origin(hint)
        if origin is typing.Annotated:
            hint = get_args(hint)[0]
        elif origin in (typing.Required, typing.NotRequired):
            required = origin is typing.Required
            hint = get_args(hint)[0]
        else:
            return hint, required


def _default(name: str, hint: Any, source: Any) -> Any:
    """``...`` for a required field, else its default (``None`` for an optional one)."""
    base, required = _unwrapped(hint)
    if required is True:
        return ...
    if required is False or name in getattr(source, "__optional_keys__", ()):
        return None
    if name in getattr(source, "__required_keys__", ()):
        return ...  # a total TypedDict's key, even one that may hold None
    if dataclasses.is_dataclass(source):
        for f in dataclasses.fields(source):
            if f.name != name:
                continue
            if f.default is not dataclasses.MISSING and f.default is not ...:
                return f.default
            if f.default_factory is not dataclasses.MISSING:
                return f.default_factory()
    origin = get_origin(base)
    if origin in (typing.Union, types.UnionType) and type(None) in get_args(base):
        return None
    return ...


__all__ = ["json_schema"]
