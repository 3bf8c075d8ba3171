"""oncegraph's HTTP server: a REST API with Server-Sent Events and an operator web UI.

``oncegraph serve module:app`` (or :func:`serve`) serves one compiled graph; every route
calls the run service. ``oncegraph serve --db runs.db`` serves a database without the
app's code (:mod:`~oncegraph.server.database_app`). Needs the ``server`` extra:
``pip install 'oncegraph[server]'``.

Modules, one job each: :mod:`~oncegraph.server.factory` (the ASGI app),
:mod:`~oncegraph.server.auth` (keys and roles), :mod:`~oncegraph.server.tenancy` (the
one tenant check), :mod:`~oncegraph.server.limits` (413 and 429),
:mod:`~oncegraph.server.api` (REST routes), :mod:`~oncegraph.server.operations` (the
commands, shared by API and UI), :mod:`~oncegraph.server.hub` and
:mod:`~oncegraph.server.sse` (streams), :mod:`~oncegraph.server.agui` (AG-UI),
:mod:`~oncegraph.server.openapi` and :mod:`~oncegraph.server.schemas` (the document),
:mod:`~oncegraph.server.ui` and :mod:`~oncegraph.server.diff` (the web UI),
:mod:`~oncegraph.server.bodies` (reading requests), :mod:`~oncegraph.server.encode`
(JSON, masked), :mod:`~oncegraph.server.loading` (what to serve).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from starlette.types import ASGIApp

    from oncegraph.app import CompiledGraph

_HINT = "the oncegraph server needs its extra: pip install 'oncegraph[server]'"


def _require() -> None:
    try:
        import jinja2  # noqa: F401
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise ImportError(f"{_HINT} ({exc})") from exc


def create_app(graph: CompiledGraph, **options: Any) -> ASGIApp:
    """The ASGI app serving ``graph``; see :func:`oncegraph.server.factory.create_app`."""
    _require()
    from oncegraph.server.factory import create_app as factory

    return factory(graph, **options)


def serve(
    target: str | None,
    host: str = "127.0.0.1",
    port: int = 8000,
    database: str | None = None,
    keys: Any = None,
    workers: int = 1,
    log_level: str = "INFO",
    **options: Any,
) -> None:
    """Serve the compiled graph ``target`` names (``"module:attr"`` or
    ``"path/to/file.py:attr"``) until interrupted; with ``target=None``, the
    ``database`` alone, without the app's code (runs, effects, audit, Resolve effect and
    Abandon; the commands that run the graph say to serve the app).

    ``database``: a SQLite path or a ``postgresql://`` DSN (default: the app's own
    checkpointer, or SQLite ``oncegraph.db``). ``keys``: API keys and roles (see
    :func:`oncegraph.server.auth.key_ring`; default ``ONCEGRAPH_API_KEYS``, else a
    generated admin key printed at start-up). ``workers``: server processes on the one
    store (:mod:`oncegraph.server.processes`). ``log_level``: the lowest level the server
    logs; each request is logged at ``INFO`` (so ``"WARNING"`` logs no request). Other
    options go to :func:`create_app`.
    """
    _require()
    import uvicorn

    from oncegraph.errors import ConfigError
    from oncegraph.server.loading import compiled, database_only, load_target

    level = logging.getLevelName(str(log_level).upper())
    if not isinstance(level, int):
        raise ConfigError(f"log_level must be DEBUG, INFO, WARNING or ERROR; got {log_level!r}")
    access_log = level <= logging.INFO  # a request is logged at INFO
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ConfigError(f"workers must be a whole number >= 1; got {workers!r}")
    if target is None and database is None:
        raise ConfigError(
            "nothing to serve: name the app (module:attr or file.py:attr), or a database "
            "to open without the app's code (database='runs.db' or a postgresql:// URL)"
        )
    if workers > 1:
        from oncegraph.server.processes import serve_processes

        serve_processes(
            target,
            database,
            host=host,
            port=port,
            workers=workers,
            keys=keys,
            options=options,
            log_level=logging.getLevelName(level),
            access_log=access_log,
        )
        return
    if target is not None:
        graph = compiled(load_target(target), database)
    else:
        assert database is not None
        graph = database_only(database)
    # Logging set up by the caller (the CLI's --log-format json) is kept as it is; uvicorn
    # configures its own only where nobody did.
    asgi = create_app(graph, keys=keys, **options)
    from uvicorn.config import LOGGING_CONFIG

    config = uvicorn.Config(
        asgi,
        host=host,
        port=port,
        log_level=logging.getLevelName(level).lower(),
        access_log=access_log,
        log_config=None if logging.getLogger().handlers else LOGGING_CONFIG,
    )
    uvicorn.Server(config).run()


__all__ = ["create_app", "serve"]
