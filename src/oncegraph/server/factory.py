"""The ASGI app: :func:`create_app` puts the API, the web UI and the limits together.

Order of the layers, outermost first: security headers on every response
(:mod:`oncegraph.server.headers`); the gate (:class:`~oncegraph.server.limits.Gate`:
the caller's key verified, the rate limit by that key or, without one, by address (429),
and an API request without a valid key answered 401 before its body is read); body size
by ``Content-Length`` (413); then Starlette's routing with one error handler that turns
every refusal into the JSON of :mod:`oncegraph.server.problems` (the UI renders its own
pages). The app opens the graph's store at start-up (migrating it) and its readers
(:mod:`oncegraph.server.reading`: listings on a connection and thread of their own) and,
at shutdown, cancels runs it started (they stay resumable) and closes the readers.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Iterable, Mapping
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp

from oncegraph.app import CompiledGraph
from oncegraph.errors import ConfigError, OnceGraphError
from oncegraph.server import api, openapi, ui, ui_compensate, ui_effects, ui_redeliver
from oncegraph.server.auth import ApiKey, key_ring
from oncegraph.server.compensation import compensation_role
from oncegraph.server.context import Served, masked_message, request_masker
from oncegraph.server.database_app import has_code
from oncegraph.server.forms import parse_origins
from oncegraph.server.headers import SecurityHeaders
from oncegraph.server.hub import KEEPALIVE, RunHub
from oncegraph.server.idempotency import DEFAULT_WINDOW, Keys
from oncegraph.server.limits import BodyLimit, Gate
from oncegraph.server.problems import ApiError, from_exception, response
from oncegraph.server.reading import Readers
from oncegraph.server.recovery import RECOVER_EVERY, Recovery

log = logging.getLogger("oncegraph.server")
STATIC = Path(__file__).parent / "static"

MAX_BODY = 1024 * 1024  # 1 MiB
RATE = 50.0  # requests per second per verified key, on average
BURST = 200
AUTH_RATE = 1.0  # requests per second per address without a valid key (key guessing)
AUTH_BURST = 20


async def _api_error(request: Request, exc: Exception) -> Response:
    found = from_exception(exc)
    if found is None:  # not ours to map: a bug, shown without internals
        log.error(
            "unhandled error on %s %s: %s",
            request.method,
            request.url.path,
            request_masker(request).traceback(exc),
        )
        found = ApiError(500, "internal_error", "internal error; see the server log")
    message = await masked_message(request, found.message)
    if message != found.message:  # a message quoting a masked value: its masked form
        found = ApiError(found.status, found.code, message, **found.extra)
    return response(found)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    message = exc.detail if exc.status_code != 404 else f"no route {request.url.path}"
    headers = dict(exc.headers or {})
    return response(ApiError(exc.status_code, code, str(message)), headers or None)


async def _home(request: Request) -> Response:
    return RedirectResponse("/ui/runs", status_code=303)


async def _openapi(request: Request) -> Response:
    return JSONResponse(openapi.document())


def create_app(
    graph: CompiledGraph,
    *,
    keys: str | Mapping[str, Any] | Iterable[ApiKey] | None = None,
    max_body: int = MAX_BODY,
    rate: float = RATE,
    burst: int = BURST,
    auth_rate: float = AUTH_RATE,
    auth_burst: int = AUTH_BURST,
    origins: str | Iterable[str] | None = None,
    max_runs: int = 256,
    max_events: int = 2000,
    idempotency_window: float = DEFAULT_WINDOW,
    recover_every: float | None = RECOVER_EVERY,
    recover: bool = True,
    keepalive: float = KEEPALIVE,
    compensate_role: str = "admin",
) -> ASGIApp:
    """The server's ASGI app for ``graph`` (which must have a checkpointer), or for a
    database alone (a :class:`~oncegraph.server.database_app.DatabaseApp`: what needs
    the app's code is refused, with words saying to serve the app).

    ``keys``: see :func:`oncegraph.server.auth.key_ring` (``None`` reads
    ``ONCEGRAPH_API_KEYS``; with none anywhere, an admin key is generated and printed).
    ``rate``/``burst``: requests per second (on average) and bursts per verified key, for
    keys without their own; ``auth_rate``/``auth_burst``: the same per client address for
    requests without a valid key and for login attempts. ``origins``: the public origins
    (``https://ops.example.com``) of a server behind a proxy, the only ones whose pages
    may post the UI's forms; by default the origin each request was addressed to.
    ``idempotency_window``: seconds an ``Idempotency-Key`` is kept (its first request
    answers every retry for that long; 24 h). ``recover``: take over, at start-up and
    then every ``recover_every`` seconds (None: at start-up only), the app's runs a dead
    process left ``running`` (:mod:`oncegraph.server.recovery`). ``keepalive``: seconds
    of silence before an event stream sends a comment line. ``compensate_role``: who may
    compensate an effect (``"admin"``, or ``"operator"``).
    """
    if not isinstance(graph, CompiledGraph):
        raise ConfigError(f"create_app() needs a compiled graph; got {type(graph).__name__}")
    graph.service  # noqa: B018 - no checkpointer: ConfigError naming the fix, now
    for name, value in (("max_body", max_body), ("burst", burst), ("auth_burst", auth_burst)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"{name} must be a whole number >= 1; got {value!r}")
    for name, number in (("rate", rate), ("auth_rate", auth_rate)):
        if not isinstance(number, (int, float)) or not 0 < number < float("inf"):
            raise ConfigError(f"{name} must be a positive number of requests per second")
    allowed = parse_origins(origins)
    ring, generated = key_ring(keys)
    if generated is not None:
        from oncegraph.server.auth import announce

        announce(generated)
    if isinstance(keepalive, bool) or not isinstance(keepalive, (int, float)) or keepalive <= 0:
        raise ConfigError(f"keepalive must be a positive number of seconds; got {keepalive!r}")
    keys_kept = Keys(idempotency_window)
    hub = RunHub(graph, max_runs=max_runs, max_events=max_events, keepalive=keepalive)
    readers = Readers(graph)
    # a database served without the app's code cannot go on with anyone's runs
    recovery = Recovery(hub, every=recover_every) if recover and has_code(graph) else None

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await graph.setup()
        readers.start()
        if recovery is not None:
            recovery.start()
        try:
            yield
        finally:
            if recovery is not None:
                await recovery.stop()
            await hub.aclose()
            await readers.aclose()

    app = Starlette(
        routes=[
            Route("/", _home, methods=["GET"]),
            Route("/openapi.json", _openapi, methods=["GET"]),
            *api.routes,
            *ui.routes,
            *ui_effects.routes,
            *ui_compensate.routes,
            *ui_redeliver.routes,
            Mount("/static", StaticFiles(directory=STATIC), name="static"),
        ],
        exception_handlers={
            ApiError: _api_error,
            OnceGraphError: _api_error,
            HTTPException: _http_error,
            Exception: _api_error,
        },
        lifespan=lifespan,
    )
    app.state.served = Served(graph, ring, hub, readers)
    app.state.compensate_role = compensation_role(compensate_role)
    app.state.keys = keys_kept
    app.state.recovery = recovery
    app.state.max_body = max_body
    app.state.origins = allowed
    app.state.generated_key = generated
    gate = Gate(
        BodyLimit(app, max_body),
        ring,
        rate=rate,
        burst=burst,
        auth_rate=auth_rate,
        auth_burst=auth_burst,
    )
    return SecurityHeaders(gate)


__all__ = ["AUTH_BURST", "AUTH_RATE", "BURST", "MAX_BODY", "RATE", "create_app"]
