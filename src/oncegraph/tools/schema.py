"""A tool's parameters as a pydantic model: its JSON schema and argument validation.

:func:`arguments_of` turns a function's signature into :class:`Arguments`: a pydantic
model with one field per keyword-passable parameter (its annotation, its default, its
description), the JSON schema the model is shown, and :meth:`Arguments.validate`, which
turns the JSON arguments a model sent into the values the function receives.

Invariants:

* The schema is pydantic's (``model_json_schema()``) minus the top-level ``title`` (the
  synthetic model's name, which tells a model nothing). Every type pydantic knows
  (Enum, date/datetime, TypedDict, dataclass, Literal, Optional, nested models, ...)
  gets its full schema, nested types under ``$defs``.
* A parameter's description comes from ``Annotated[..., Field(description=...)]`` (or a
  ``Field(...)`` default) first, else from the docstring (Google, NumPy or reST, see
  :mod:`oncegraph.tools.docstrings`).
* Validation is pydantic's lax mode, so values are coerced: ``"red"`` becomes
  ``Color.RED``, ``"2026-01-31"`` a ``date``, an object a dataclass. Unknown arguments
  are refused unless the function takes ``**kwargs``. The validated values are what the
  function receives; the JSON the model sent is what the ledger records (see
  :class:`~oncegraph.tools.node.ToolNode`).
* A parameter type pydantic cannot validate, or cannot show as JSON schema, is a
  :class:`~oncegraph.errors.ConfigError` when the tool is made, naming the parameter.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, get_args, get_origin, get_type_hints

from oncegraph.errors import ConfigError, ToolArgumentsError
from oncegraph.tools.docstrings import Docstring, parse_docstring

if TYPE_CHECKING:  # pydantic is imported when the first tool is made, not by `import oncegraph`
    from pydantic import BaseModel, ValidationError
    from pydantic.fields import FieldInfo

__all__ = ["Arguments", "arguments_of", "describe_validation_error", "json_schema_problems"]


@dataclass(frozen=True, slots=True)
class Arguments:
    """The parameters of one tool.

    ``model``: the pydantic model (one field per parameter); ``schema``: its JSON schema;
    ``names``: field name -> parameter name (they differ only for a parameter whose name
    pydantic reserves, such as ``json`` or ``_x``, which rides under an alias).
    """

    tool_name: str
    model: type[BaseModel]
    schema: dict[str, Any]
    names: Mapping[str, str]
    var_keyword: bool = False

    @property
    def param_names(self) -> tuple[str, ...]:
        return tuple(self.names.values())

    def validate(self, args: Any) -> dict[str, Any]:
        """The keyword arguments for the function, validated and coerced from ``args``.

        Raises :class:`~oncegraph.errors.ToolArgumentsError` naming every bad argument.
        """
        from pydantic import ValidationError
        if not isinstance(args, Mapping):
            raise ToolArgumentsError(
                self.tool_name,
                f"arguments for {self.tool_name} must be a JSON object; got {args!r}",
            )
        try:
            validated = self.model.model_validate(dict(args))
        except ValidationError as exc:
            raise ToolArgumentsError(
                self.tool_name, describe_validation_error(self.tool_name, exc)
            ) from None
        out = {param: getattr(validated, field) for field, param in self.names.items()}
        if validated.model_extra:
            out.update(validated.model_extra)
        return out


def describe_validation_error(tool_name: str, exc: ValidationError) -> str:
    """One line per problem, each naming the argument, what is wrong and what came."""
    problems = []
    for err in exc.errors(include_url=False):
        where = ".".join(str(p) for p in err["loc"]) or "(arguments)"
        line = f"{where}: {err['msg']}"
        if err["type"] not in ("missing", "extra_forbidden") and "input" in err:
            line += f" (got {_short(err['input'])})"
        problems.append(line)
    return f"invalid arguments for {tool_name}: " + "; ".join(problems)


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _reserved(name: str) -> bool:
    from pydantic import BaseModel

    return name.startswith("_") or hasattr(BaseModel, name)


def _annotated_description(annotation: Any) -> str | None:
    from pydantic.fields import FieldInfo

    if get_origin(annotation) is Annotated:
        for meta in reversed(get_args(annotation)[1:]):
            if isinstance(meta, FieldInfo) and meta.description:
                return meta.description
    return None


def arguments_of(
    fn: Callable[..., Any], tool_name: str, docstring: Docstring | None = None
) -> Arguments:
    """The :class:`Arguments` of ``fn``'s keyword-passable parameters."""
    import pydantic
    hints = _type_hints(fn, tool_name)
    doc = docstring if docstring is not None else parse_docstring(inspect.getdoc(fn))
    fields: dict[str, Any] = {}
    names: dict[str, str] = {}
    var_keyword = False
    for i, p in enumerate(inspect.signature(fn).parameters.values()):
        if p.kind is p.VAR_KEYWORD:
            var_keyword = True
            continue
        if p.kind is p.VAR_POSITIONAL:
            continue  # a model sends named arguments only
        if p.kind is p.POSITIONAL_ONLY and p.default is p.empty:
            raise ConfigError(
                f"tool {tool_name!r}: parameter {p.name!r} is positional-only; a tool is "
                "called with keyword arguments, so drop the '/' from its signature"
            )
        if p.kind is p.POSITIONAL_ONLY:
            continue  # has a default and cannot be passed by name: leave it alone
        annotation = hints.get(p.name, Any)
        reserved = _reserved(p.name)
        field_name = f"param_{i}" if reserved else p.name
        info = _field(p, annotation, doc.params.get(p.name), p.name if reserved else None)
        fields[field_name] = (annotation, info)
        names[field_name] = p.name
    config = pydantic.ConfigDict(
        extra="allow" if var_keyword else "forbid",
        protected_namespaces=(),
    )
    try:
        model = pydantic.create_model(tool_name, __config__=config, **fields)
        schema = model.model_json_schema()
    except (pydantic.PydanticUserError, pydantic.PydanticSchemaGenerationError) as exc:
        culprit = _culprit(fields, names)
        raise ConfigError(
            f"tool {tool_name!r}: {culprit}its parameters must be types pydantic can validate "
            "and show as JSON schema (str, int, Enum, date, TypedDict, dataclass, a pydantic "
            f"model, ...): {exc}"
        ) from exc
    schema.pop("title", None)
    return Arguments(tool_name, model, schema, names, var_keyword)


def _type_hints(fn: Callable[..., Any], tool_name: str) -> dict[str, Any]:
    """``fn``'s resolved annotations; string annotations may also name its closure's
    variables. An unresolvable one is a ConfigError naming the parameter."""
    try:
        return get_type_hints(fn, include_extras=True)
    except Exception:
        pass
    try:
        local = dict(inspect.getclosurevars(fn).nonlocals)
    except (TypeError, ValueError):
        local = {}
    hints: dict[str, Any] = {}
    for name, annotation in getattr(fn, "__annotations__", {}).items():
        try:
            hints.update(
                get_type_hints(_Holder({name: annotation}), fn.__globals__, local, True)
            )
        except Exception as exc:
            raise ConfigError(
                f"tool {tool_name!r}: cannot resolve the annotation {annotation!r} of "
                f"{name!r} ({exc}); define the types a tool's signature names at module level"
            ) from exc
    return hints


class _Holder:
    """Something with ``__annotations__``, to resolve one annotation at a time."""

    def __init__(self, annotations: dict[str, Any]) -> None:
        self.__annotations__ = annotations


def _culprit(fields: Mapping[str, Any], names: Mapping[str, str]) -> str:
    """``"parameter 'x' (T) is the problem; "`` for the first field pydantic refuses."""
    import pydantic

    for field_name, (annotation, _) in fields.items():
        try:
            pydantic.TypeAdapter(annotation).json_schema()
        except (pydantic.PydanticUserError, pydantic.PydanticSchemaGenerationError):
            return f"parameter {names[field_name]!r} ({annotation!r}) is the problem; "
    return ""


def _field(
    p: inspect.Parameter, annotation: Any, doc_description: str | None, alias: str | None
) -> FieldInfo:
    """The field of parameter ``p``: its default, and the docstring's description unless
    a ``Field`` already describes it; ``alias`` (the parameter's name) for a reserved name."""
    from pydantic import Field
    from pydantic.fields import FieldInfo

    described = _annotated_description(annotation) is not None
    if isinstance(p.default, FieldInfo):  # def f(x: int = Field(3, description=...))
        changes: dict[str, Any] = {}
        if doc_description and not described and p.default.description is None:
            changes["description"] = doc_description
        if alias is not None:
            changes.update(
                alias=alias, validation_alias=alias, serialization_alias=alias, alias_priority=2
            )
        return FieldInfo.merge_field_infos(p.default, **changes) if changes else p.default
    extra: dict[str, Any] = {} if alias is None else {"alias": alias}
    if doc_description and not described:
        extra["description"] = doc_description
    default: Any = ... if p.default is p.empty else p.default
    return Field(default, **extra)  # type: ignore[no-any-return]


def json_schema_problems(
    schema: Mapping[str, Any], invalid: str, whole: str
) -> Callable[[Any], str | None]:
    """A check of values against the JSON schema ``schema`` (``jsonschema`` must be
    installed): ``None`` for a valid value, else its problems, ``path: message`` each
    (``whole`` for the value itself), in path order, joined by ``; ``. A schema that is
    not valid JSON schema is a ConfigError, ``invalid`` then what is wrong with it."""
    import jsonschema

    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ConfigError(f"{invalid}: {exc.message}") from exc
    validator = cls(schema)

    def problems(value: Any) -> str | None:
        errors = sorted(validator.iter_errors(value), key=lambda e: list(e.path))
        if not errors:
            return None
        return "; ".join(f"{'.'.join(map(str, e.path)) or whole}: {e.message}" for e in errors)

    return problems
