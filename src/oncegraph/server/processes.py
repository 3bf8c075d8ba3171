"""Serving from several processes on one store: ``oncegraph serve --workers N``.

Each process is a whole server (uvicorn's supervisor starts them and restarts one that
dies) over the SAME database, so what one process does every other one sees: runs,
effects, the audit log and the ``Idempotency-Key`` records live in the store, never in a
process. A run started over HTTP runs in the process that took the request; a stream
asked of another process is read from the run's checkpoints; a run whose process died is
taken over by another one's recovery pass, behind the run's liveness lock, as a crashed
single server's is.

What stays per process: the request-rate buckets (``--rate``/``--burst`` hold for each
process, so N processes admit up to N times the rate) and the event buffers of the runs
each process started.

The supervisor hands its children what to serve in one environment variable
(:data:`ENV`), as JSON: the target, the database and the options given. A generated admin
key is made once, by the supervisor, and printed once, so every process answers the same
key. A store private to one process (the in-memory one) is refused.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
from typing import Any

from oncegraph.errors import ConfigError

ENV = "ONCEGRAPH_SERVE_PROCESSES"


def serve_processes(
    target: str | None,
    database: str | None,
    *,
    host: str,
    port: int,
    workers: int,
    keys: Any,
    options: dict[str, Any],
    log_level: str,
    access_log: bool,
) -> None:
    """Run ``workers`` server processes on ``host:port`` over one store (see the module)."""
    import uvicorn

    from oncegraph.server.auth import ENV_KEYS, announce, parse_spec

    _shared_store(target, database)
    if keys is not None and not isinstance(keys, str):
        raise ConfigError(
            "with several server processes, give the keys as a spec string "
            "(key=role[@tenant][#name],...) or in ONCEGRAPH_API_KEYS, so every process "
            f"reads the same ones; got {type(keys).__name__}"
        )
    spec = keys if keys is not None else os.environ.get(ENV_KEYS, "")
    if not spec.strip():  # one generated key for every process, printed once
        generated = secrets.token_urlsafe(24)
        spec = f"{generated}=admin#generated-admin"
        announce(generated)
    parse_spec(spec)  # a bad spec is refused here, once, not by every process
    try:
        handed = json.dumps({"target": target, "database": database, "options": options})
    except TypeError as exc:
        raise ConfigError(
            f"with several server processes every option must be plain data (text, "
            f"numbers, lists); {exc}"
        ) from None
    os.environ[ENV] = handed
    os.environ[ENV_KEYS] = spec
    config = uvicorn.Config(
        "oncegraph.server.processes:from_environment",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level=log_level.lower(),
        access_log=access_log,
    )
    from uvicorn.supervisors import Multiprocess

    with contextlib.suppress(KeyboardInterrupt):
        Multiprocess(config, sockets=[tcp_listener(config.bind_socket())]).run()


def tcp_listener(sock: socket.socket) -> socket.socket:
    """``sock`` (a bound TCP listener) as a socket that says it is TCP.

    uvicorn binds the supervisor's listener with the protocol left at 0, and asyncio
    turns Nagle's algorithm off (``TCP_NODELAY``) only on accepted sockets that say
    ``IPPROTO_TCP``: without this every response after the first on a kept-alive
    connection waited for the client's delayed acknowledgement, about 40 ms on Linux.
    The descriptor, its address and its inheritability are kept."""
    if sock.family not in (socket.AF_INET, socket.AF_INET6) or sock.proto == socket.IPPROTO_TCP:
        return sock
    inheritable = sock.get_inheritable()
    tcp = socket.socket(sock.family, sock.type, socket.IPPROTO_TCP, fileno=sock.detach())
    tcp.set_inheritable(inheritable)
    return tcp


def from_environment() -> Any:
    """The ASGI app of one server process, made from what the supervisor handed down."""
    from oncegraph.server.factory import create_app
    from oncegraph.server.loading import compiled, database_only, load_target

    handed = os.environ.get(ENV)
    if not handed:
        raise ConfigError(
            f"{ENV} is not set: this factory is for the processes oncegraph serve "
            "--workers N starts; run that command instead"
        )
    spec = json.loads(handed)
    target, database = spec["target"], spec["database"]
    if target is not None:
        graph = compiled(load_target(target), database)
    else:
        graph = database_only(database)
    return create_app(graph, keys=None, **spec["options"])


def _shared_store(target: str | None, database: str | None) -> None:
    """Refuse a store that other processes cannot see, before any process starts."""
    from oncegraph.server.loading import compiled, load_target
    from oncegraph.storage.memory import InMemoryCheckpointer

    if target is None:
        return  # a database named on the command line: a file or a server, shared
    graph = compiled(load_target(target), database)
    if isinstance(graph.checkpointer, InMemoryCheckpointer):
        raise ConfigError(
            "several server processes need a store they all see; this app's is in memory, "
            "private to one process. Serve it with --db runs.db (SQLite) or --database "
            "postgresql://..., or with one process"
        )


__all__ = ["ENV", "from_environment", "serve_processes", "tcp_listener"]
