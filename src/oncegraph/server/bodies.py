"""Reading request bodies and parameters: bounded, parsed, checked, or a clear 400.

A route reads its body with :func:`json_object` (the API) or :func:`form` (the UI);
both count the bytes as they arrive and stop at the server's limit (413), so a body
sent without ``Content-Length`` is bounded too. A command's fields are checked against
its model (:func:`model`, :mod:`oncegraph.server.schemas`): a bad one is a 400 that
names the field and what it should be.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar
from urllib.parse import parse_qsl

import orjson
from pydantic import BaseModel, ValidationError
from starlette.requests import Request

from oncegraph.server.limits import too_large
from oncegraph.server.problems import ApiError, bad_request
from oncegraph.server.schemas import MAX_TEXT

M = TypeVar("M", bound=BaseModel)


async def read(request: Request) -> bytes:
    limit: int = request.app.state.max_body
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, "payload_too_large", too_large(limit))
        chunks.append(chunk)
    return b"".join(chunks)


async def json_object(request: Request, *, empty_ok: bool = False) -> dict[str, Any]:
    """The body as a JSON object (an empty body is ``{}`` when ``empty_ok``)."""
    body = await read(request)
    if not body.strip():
        if empty_ok:
            return {}
        raise bad_request('the request needs a JSON object body, e.g. {"reason": "..."}')
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise bad_request(f"the body is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise bad_request(f"the body must be a JSON object; got {type(value).__name__}")
    return value


async def form(request: Request) -> dict[str, str]:
    """An ``application/x-www-form-urlencoded`` body (the UI's forms)."""
    return parse_form(await read(request))


def parse_form(body: bytes) -> dict[str, str]:
    """The fields of an ``application/x-www-form-urlencoded`` body already read."""
    try:
        pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False)
    except UnicodeDecodeError:
        raise bad_request("the form is not valid UTF-8") from None
    return dict(pairs)


def model(shape: type[M], body: Mapping[str, Any]) -> M:
    """``body`` checked against ``shape`` (a model of :mod:`oncegraph.server.schemas`), or
    a 400 naming the first bad field and what it should be."""
    try:
        return shape.model_validate(body)
    except ValidationError as exc:
        raise bad_request(_first_problem(shape, exc)) from None


def _first_problem(shape: type[BaseModel], exc: ValidationError) -> str:
    error = exc.errors(include_url=False)[0]
    name = ".".join(str(part) for part in error["loc"])
    kind = error["type"]
    if kind == "extra_forbidden":
        unknown = sorted({str(e["loc"][-1]) for e in exc.errors() if e["type"] == kind})
        fields = shape.model_fields if len(error["loc"]) == 1 else _nested(shape, error["loc"])
        return (
            f"unknown field(s) {', '.join(map(repr, unknown))}; this request takes "
            f"{', '.join(fields)}"
        )
    if kind == "missing":
        return f"{name!r} is required"
    if kind == "string_too_short" and error.get("ctx", {}).get("min_length") == 1:
        return f"{name!r} must not be empty"
    got = error.get("input")
    if kind.endswith("_type"):
        return f"{name!r} must be {_JSON_TYPES.get(kind, kind)}; got {_json_type(got)}"
    said = str(error["msg"]).removeprefix("Value error, ")
    for prefix in ("Input should", "String should", "List should", "Value should"):
        said = said.replace(prefix, "must", 1) if said.startswith(prefix) else said
    return f"{name!r} {said}" + (f"; got {got!r}" if kind in ("literal_error", "enum") else "")


_JSON_TYPES = {
    "bool_type": "true or false",
    "dict_type": "a JSON object",
    "float_type": "a number",
    "int_type": "an integer",
    "list_type": "a list",
    "model_type": "a JSON object",
    "string_type": "a string",
}


def _json_type(value: Any) -> str:
    """The JSON name of ``value``'s type: what the sender wrote."""
    for kind, name in ((bool, "a boolean"), (int | float, "a number"), (str, "a string")):
        if isinstance(value, kind):
            return name
    if isinstance(value, dict):
        return "an object"
    return "an array" if isinstance(value, list) else "null"


def _nested(shape: type[BaseModel], loc: tuple[Any, ...]) -> Sequence[str]:
    """The field names of the model at ``loc`` (the unknown field's parent)."""
    for part in loc[:-1]:
        annotation = shape.model_fields[str(part)].annotation
        inner = [a for a in getattr(annotation, "__args__", (annotation,)) if a is not None]
        shape = next(a for a in inner if isinstance(a, type) and issubclass(a, BaseModel))
    return list(shape.model_fields)


def _text(name: str, value: str) -> str:
    """A query parameter's text: as a body's text field is checked."""
    if len(value) > MAX_TEXT:
        raise bad_request(f"{name!r} is longer than {MAX_TEXT} characters")
    if any(ord(c) < 32 and c not in "\t\n\r" for c in value) or "\x7f" in value:
        raise bad_request(f"{name!r} must not contain control characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise bad_request(f"{name!r} is not valid Unicode text") from None
    return value


def limit(request: Request, default: int = 100, maximum: int = 1000) -> int:
    raw = request.query_params.get("limit")
    if raw is None:
        return default
    if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= maximum:
        raise bad_request(f"limit must be an integer from 1 to {maximum}; got {raw!r}")
    return int(raw)


def query_text(request: Request, name: str) -> str | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    return _text(name, raw)


__all__ = ["form", "json_object", "limit", "model", "parse_form", "query_text", "read"]
