"""Reading request bodies and parameters: bounded, parsed, checked, or a clear 400.

A route reads its body with :func:`json_object` (the API) or :func:`form` (the UI);
both count the bytes as they arrive and stop at the server's limit (413), so a body
sent without ``Content-Length`` is bounded too. Field readers (:func:`text`,
:func:`choice`, ...) name the field and what it should be.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import parse_qsl

import orjson
from starlette.requests import Request

from oncegraph.server.limits import too_large
from oncegraph.server.problems import ApiError, bad_request

MAX_TEXT = 10_000


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


def only(body: Mapping[str, Any], allowed: Sequence[str]) -> None:
    unknown = sorted(set(body) - set(allowed))
    if unknown:
        raise bad_request(
            f"unknown field(s) {', '.join(map(repr, unknown))}; this request takes "
            f"{', '.join(allowed)}"
        )


def text(body: Mapping[str, Any], name: str, *, required: bool = False) -> str | None:
    value = body.get(name)
    if value is None:
        if required:
            raise bad_request(f"{name!r} is required (a non-empty string)")
        return None
    if not isinstance(value, str):
        raise bad_request(f"{name!r} must be a string; got {type(value).__name__}")
    if required and not value.strip():
        raise bad_request(f"{name!r} must not be empty")
    if len(value) > MAX_TEXT:
        raise bad_request(f"{name!r} is longer than {MAX_TEXT} characters")
    if any(ord(c) < 32 and c not in "\t\n\r" for c in value) or "\x7f" in value:
        raise bad_request(f"{name!r} must not contain control characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise bad_request(f"{name!r} is not valid Unicode text") from None
    return value


def required_text(body: Mapping[str, Any], name: str) -> str:
    value = text(body, name, required=True)
    assert value is not None
    return value


def choice(body: Mapping[str, Any], name: str, options: Sequence[str], default: str) -> str:
    value = body.get(name, default)
    if value not in options:
        raise bad_request(f"{name!r} must be one of {', '.join(options)}; got {value!r}")
    return str(value)


def flag(body: Mapping[str, Any], name: str) -> bool:
    value = body.get(name, False)
    if not isinstance(value, bool):
        raise bad_request(f"{name!r} must be true or false; got {value!r}")
    return value


def strings(body: Mapping[str, Any], name: str) -> list[str]:
    value = body.get(name, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise bad_request(f"{name!r} must be a list of strings")
    return list(value)


def obj(body: Mapping[str, Any], name: str, *, required: bool = False) -> dict[str, Any] | None:
    value = body.get(name)
    if value is None:
        if required:
            raise bad_request(f"{name!r} is required (a JSON object)")
        return None
    if not isinstance(value, dict):
        raise bad_request(f"{name!r} must be a JSON object; got {type(value).__name__}")
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
    return text({name: raw}, name)


__all__ = [
    "choice",
    "flag",
    "form",
    "json_object",
    "limit",
    "obj",
    "only",
    "query_text",
    "read",
    "required_text",
    "strings",
    "text",
]
