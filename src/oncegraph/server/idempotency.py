"""``Idempotency-Key``: a state-changing request sent again gets the first one's answer.

The semantics of the IETF draft "The Idempotency-Key HTTP Header Field", on every
``POST`` that changes something (the API's starts and commands, the web UI's forms,
whose key is a hidden field made per page):

* the key is claimed before the request acts, in one insert a second request with the
  key cannot also win (:meth:`~oncegraph.storage.protocols.IdempotencyStore.claim_request`),
  under the caller's scope (the app, the key's tenant, its name and role): one caller's
  key never answers another caller;
* the same key with the same request (method, path and query, body as JSON) gets the
  first request's answer again: its status code and body, with ``Idempotent-Replayed:
  true``. A start's answer names the same run: a start's run id is chosen and bound to
  the key before the run starts. A start that streams (``runs/stream``, AG-UI) streams
  that same run again;
* the same key with another request is ``422``; a key whose first request is still in
  flight is ``409`` with ``Retry-After``;
* a request refused before it did anything (``4xx``, ``5xx``) gives its key back, so it
  may be sent again with the same key once fixed; a start whose run exists keeps it;
* keys are kept for the server's window (``create_app(idempotency_window=...)``, 24 h by
  default), measured from the first request, then pruned.

A crash between claiming and answering leaves the key in flight, and nobody holds it: a
request's claim is held, while it runs, by a liveness lock that dies with its process
(the store's run lock: an OS file lock, a PostgreSQL session lock), as a run's is. A
retry that finds the key in flight and takes its lock knows the first request's process
is gone; it goes on in its place: a start finds its bound run (taking it over if it was
left running, starting it under that id if the crash came first), a command is done
again if it still applies.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

import orjson
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Message

from oncegraph.errors import ConfigError
from oncegraph.ids import new_run_id
from oncegraph.server import bodies
from oncegraph.server.auth import Principal
from oncegraph.server.context import caller, served
from oncegraph.server.problems import ApiError, response
from oncegraph.storage.protocols import IdempotencyStore, RunLock
from oncegraph.storage.records import now
from oncegraph.storage.requests import IdempotencyRecord, check_key

HEADER = "Idempotency-Key"
FIELD = "idempotency_key"  # the web UI's hidden form field
REPLAYED = "Idempotent-Replayed"
DEFAULT_WINDOW = 24 * 3600.0
IN_FLIGHT = "request_in_flight"


@dataclass(frozen=True, slots=True)
class Keys:
    """How long the server keeps keys (``app.state.keys``)."""

    window: float = DEFAULT_WINDOW

    def __post_init__(self) -> None:
        if isinstance(self.window, bool) or not isinstance(self.window, (int, float)) or not (
            self.window > 0
        ):
            raise ConfigError(
                f"idempotency_window must be a positive number of seconds; got {self.window!r}"
            )


@dataclass(frozen=True, slots=True)
class Keyed:
    """The claimed key of the request being served (``request.state.keyed``)."""

    # ``retried``: the key was claimed before this request: its first request finished
    # (a stream is served again) or its process is gone (nobody held the key)
    record: IdempotencyRecord
    retried: bool


def keyed(request: Request) -> Keyed | None:
    found: Keyed | None = getattr(request.state, "keyed", None)
    return found


def bound_run(request: Request) -> str | None:
    """The run id this request's key is bound to (a start: its run's id), or None."""
    found = keyed(request)
    return found.record.run_id if found is not None else None


def retried(request: Request) -> bool:
    """Was this request's key claimed before (see :class:`Keyed`)? Then what its first
    send did may be done already: a command looks before it acts again."""
    found = keyed(request)
    return found is not None and found.retried


Handler = Callable[[Request], Awaitable[Response]]


async def once(
    request: Request,
    principal: Principal,
    handler: Handler,
    *,
    binds_run: bool = False,
    streams: bool = False,
    form: bool = False,
) -> Response:
    """Serve ``request`` with ``handler``, once per idempotency key (module docstring).

    ``binds_run``: the request starts a run, whose id is bound to the key before it
    starts (the handler reads it with :func:`bound_run`). ``streams``: its answer is a
    stream, given again by calling ``handler`` (which streams the bound run) instead of
    from the stored answer. ``form``: the key may come in the form field :data:`FIELD`.
    """
    key = request.headers.get(HEADER)
    if key is None and not form:
        return await handler(request)
    raw = await bodies.read(request)
    fields = _form(raw) if form else None
    if key is None and fields is not None:
        key = fields.get(FIELD) or None
    again = with_body(request, raw)
    if key is None:
        return await handler(again)
    try:
        key = check_key(key.strip())
    except ConfigError as exc:
        raise ApiError(400, "bad_request", f"{HEADER}: {exc}") from None
    store = _store(request)
    scope = _scope(request, principal)
    fingerprint = _fingerprint(request, raw, fields)
    lock = await store.lock_run(_lock_name(scope, key))
    if lock is None:  # the first request holds it: still in flight
        await _refuse_in_flight(store, scope, key, fingerprint)
    try:
        return await _serve(
            request, again, handler, store, lock, scope, key, fingerprint, binds_run, streams
        )
    finally:
        with contextlib.suppress(Exception):  # at worst it goes with this process
            await asyncio.shield(lock.release())


async def _serve(
    request: Request,
    again: Request,
    handler: Handler,
    store: Any,
    lock: RunLock,
    scope: str,
    key: str,
    fingerprint: str,
    binds_run: bool,
    streams: bool,
) -> Response:
    at = now()
    window = _keys(request).window
    claim = IdempotencyRecord(
        scope=scope,
        key=key,
        request_hash=fingerprint,
        created_at=at,
        expires_at=at + window,
        run_id=new_run_id() if binds_run else None,
    )
    stored, created = await store.claim_request(claim)
    if not created:
        _same_request(stored, fingerprint)
        if stored.finished and not streams:
            return _replay(stored)
    request.state.keyed = Keyed(stored, retried=not created)
    try:
        given = await handler(again)
    except Exception:
        await _given_back(request, store, stored)
        raise
    # cancelled (the server stops): the key stays in flight, as after a crash; a retry
    # finds what the request did and goes on from there
    if given.status_code >= 400:  # refused (the UI renders its refusals as pages)
        await _given_back(request, store, stored)
        return given
    if not stored.finished:
        await store.finish_request(
            stored, status_code=given.status_code, response=_answer(given, stored)
        )
    return given


def api_route(handler: Handler, *, binds_run: bool = False, streams: bool = False) -> Handler:
    """An API route served :func:`once` per ``Idempotency-Key`` (none: as it is)."""

    async def wrapped(request: Request) -> Response:
        if HEADER not in request.headers:
            return await handler(request)
        principal = caller(request)
        try:
            return await once(request, principal, handler, binds_run=binds_run, streams=streams)
        except ApiError as exc:
            if exc.code == IN_FLIGHT:
                return response(exc, {"Retry-After": "1"})
            raise

    wrapped.__name__ = getattr(handler, "__name__", "handler")
    return wrapped


UiHandler = Callable[[Request, Principal], Awaitable[Response]]


async def _refuse_in_flight(
    store: IdempotencyStore, scope: str, key: str, fingerprint: str
) -> None:
    found = await store.get_request(scope, key)
    if found is not None:
        _same_request(found, fingerprint)
    raise ApiError(
        409,
        IN_FLIGHT,
        f"a request with {HEADER} {key!r} is still being processed; wait for its answer, "
        "or send this one again in a moment with the same key (it then gets that answer)",
        retry_after=1,
    )


def _same_request(record: IdempotencyRecord, fingerprint: str) -> None:
    if record.request_hash != fingerprint:
        raise ApiError(
            422,
            "idempotency_key_reused",
            f"{HEADER} {record.key!r} was used for another request (a different path or "
            "body); a key names one request: send a new key for a new request",
        )


async def _given_back(request: Request, store: Any, record: IdempotencyRecord) -> None:
    """A refused request: its key may be used again, unless a run was bound to it and
    exists (then a retry finds that run)."""
    if record.finished:
        return
    store_of_runs = served(request).graph.store
    if record.run_id is not None and await store_of_runs.get_run(record.run_id) is not None:
        return
    await store.release_request(record)


def _answer(given: Response, record: IdempotencyRecord) -> dict[str, Any]:
    """What a retry gets again: the body and the headers that say where to look."""
    answer: dict[str, Any] = {"media_type": given.media_type}
    if record.run_id is not None:
        answer["run_id"] = record.run_id
    if isinstance(given, StreamingResponse):
        return answer  # streamed again from its run
    answer["body"] = bytes(given.body).decode("utf-8", "replace")
    location = given.headers.get("location")
    if location:
        answer["location"] = location
    return answer


def _replay(record: IdempotencyRecord) -> Response:
    answer = record.response or {}
    headers = {REPLAYED: "true"}
    if isinstance(answer.get("location"), str):
        headers["location"] = answer["location"]
    body = answer.get("body")
    media = answer.get("media_type")
    return Response(
        content=body.encode("utf-8") if isinstance(body, str) else b"",
        status_code=record.status_code or 200,
        media_type=media if isinstance(media, str) else None,
        headers=headers,
    )


def _store(request: Request) -> Any:
    store = served(request).graph.store
    if not isinstance(store, IdempotencyStore):
        raise ApiError(
            400,
            "idempotency_unsupported",
            f"this server's store ({type(store).__name__}) keeps no idempotency keys: send "
            f"the request without {HEADER}, or serve the app on SQLite or PostgreSQL",
        )
    return store


def _keys(request: Request) -> Keys:
    found = getattr(request.app.state, "keys", None)
    return found if isinstance(found, Keys) else Keys()


def _scope(request: Request, principal: Principal) -> str:
    """Whose keys these are: the app, the key's tenant, its name and role."""
    app_id = served(request).graph.app_id
    return json.dumps([app_id, principal.tenant, principal.name, principal.role.label])


def _lock_name(scope: str, key: str) -> str:
    digest = hashlib.sha256(f"{scope}\n{key}".encode("utf-8", "surrogatepass")).hexdigest()
    return f"request:{digest[:40]}"


def _fingerprint(request: Request, raw: bytes, fields: dict[str, str] | None) -> str:
    """The request a key names: method, path and query, and the body, read as JSON (or
    as form fields) so that spacing and key order do not make it another request."""
    if fields is not None:
        body = orjson.dumps(sorted((k, v) for k, v in fields.items() if k != FIELD))
    else:
        try:
            body = orjson.dumps(orjson.loads(raw), option=orjson.OPT_SORT_KEYS) if raw else b""
        except orjson.JSONDecodeError:
            body = raw
    head = f"{request.method} {request.url.path}?{request.url.query}\n".encode()
    return hashlib.sha256(head + body).hexdigest()


def _form(raw: bytes) -> dict[str, str]:
    try:
        return dict(parse_qsl(raw.decode("utf-8"), keep_blank_values=True))
    except UnicodeDecodeError:
        raise ApiError(400, "bad_request", "the form is not valid UTF-8") from None


def with_body(request: Request, raw: bytes) -> Request:
    """``request`` again, its body (already read) given to the handler as it came."""
    given = False

    async def receive() -> Message:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": raw, "more_body": False}
        return await request.receive()  # then: the client's disconnect

    return Request(request.scope, receive)


__all__ = [
    "DEFAULT_WINDOW",
    "FIELD",
    "HEADER",
    "REPLAYED",
    "Keyed",
    "Keys",
    "api_route",
    "bound_run",
    "keyed",
    "once",
    "retried",
    "with_body",
]
