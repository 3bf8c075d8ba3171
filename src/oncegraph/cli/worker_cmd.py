"""``oncegraph worker`` (execute queued runs) and ``oncegraph serve`` (the HTTP API and
operator UI of :mod:`oncegraph.server`, an optional part imported only when used)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import typer

from oncegraph.cli.output import CliError
from oncegraph.cli.session import DatabaseFileOpt

LogFormatOpt = Annotated[
    Literal["text", "json"],
    typer.Option("--log-format", help="log lines as text, or one JSON object per line"),
]
LogLevelOpt = Annotated[
    Literal["DEBUG", "INFO", "WARNING", "ERROR"],
    typer.Option("--log-level", case_sensitive=False, help="the lowest level logged"),
]


def register(app: typer.Typer) -> None:
    """Add ``worker`` and ``serve`` to ``app``."""

    @app.command()
    def worker(
        target: Annotated[
            str, typer.Argument(metavar="MODULE:APP", help="the compiled app (module:attr)")
        ],
        concurrency: Annotated[int, typer.Option(min=1, help="runs executed at once")] = 1,
        lease: Annotated[float, typer.Option(min=0.001, help="lease seconds")] = 30.0,
        heartbeat: Annotated[
            float | None, typer.Option(help="heartbeat seconds (default: lease / 3)")
        ] = None,
        poll: Annotated[float, typer.Option(min=0.0, help="idle poll seconds")] = 0.5,
        grace: Annotated[float, typer.Option(min=0.0, help="shutdown grace seconds")] = 0.0,
        owner: Annotated[str | None, typer.Option(help="lease owner name")] = None,
        log_format: LogFormatOpt = "text",
        log_level: LogLevelOpt = "INFO",
    ) -> None:
        """Execute queued runs from PostgreSQL (claim, lease, heartbeat); SIGTERM stops cleanly."""
        from oncegraph.cli.database import check_store
        from oncegraph.errors import ConfigError
        from oncegraph.loading import load_app
        from oncegraph.observe import configure_logging
        from oncegraph.worker.process import run_worker
        from oncegraph.worker.worker import Worker

        configure_logging(log_format, log_level)
        try:
            compiled = load_app(target)
        except ConfigError as exc:
            raise CliError(f"{target}: {exc}", code=2) from None
        if compiled.checkpointer is not None:
            check_store(compiled.checkpointer)
        try:
            worker = Worker(
                compiled,
                concurrency=concurrency,
                lease_seconds=lease,
                heartbeat_seconds=heartbeat,
                poll_seconds=poll,
                shutdown_grace_seconds=grace,
                owner=owner,
            )
        except ValueError as exc:  # the worker's own checks (heartbeat vs lease)
            raise CliError(str(exc), code=2) from None
        code = run_worker(worker)
        raise typer.Exit(code)

    @app.command()
    def serve(
        target: Annotated[
            str | None,
            typer.Argument(
                metavar="MODULE:APP",
                help="module:attr or file.py:attr of the app; leave it out to open a "
                "database (--db/--database) without the app's code: runs, effects, audit, "
                "Resolve effect and Abandon, no command that runs the graph",
                show_default=False,
            ),
        ] = None,
        host: Annotated[str, typer.Option(help="interface to listen on")] = "127.0.0.1",
        port: Annotated[int, typer.Option(min=1, max=65535, help="TCP port")] = 8000,
        database: Annotated[
            str | None,
            typer.Option(
                "--database",
                "-d",
                "--db",
                help="SQLite path or PostgreSQL DSN (default: $ONCEGRAPH_DATABASE, else the "
                "app's own checkpointer)",
                show_default=False,
            ),
        ] = None,
        database_file: DatabaseFileOpt = None,
        origin: Annotated[
            list[str] | None,
            typer.Option(
                "--origin",
                help="a public origin the UI is reached at behind a proxy, e.g. "
                "https://ops.example.com (repeat for more); only its pages may post the UI's "
                "forms (default: the origin each request was addressed to)",
                show_default=False,
            ),
        ] = None,
        rate: Annotated[
            float | None,
            typer.Option(min=0.001, help="requests per second per API key (default 50)"),
        ] = None,
        burst: Annotated[
            int | None, typer.Option(min=1, help="burst per API key (default 200)")
        ] = None,
        auth_rate: Annotated[
            float | None,
            typer.Option(
                min=0.001,
                help="requests per second per client address without a valid key, login "
                "attempts included (default 1)",
            ),
        ] = None,
        auth_burst: Annotated[
            int | None,
            typer.Option(min=1, help="burst per client address without a valid key (default 20)"),
        ] = None,
        idempotency_window: Annotated[
            float | None,
            typer.Option(
                "--idempotency-window",
                min=0.001,
                help="seconds an Idempotency-Key is kept: a request sent again with its "
                "key within it gets the first answer (default 86400: 24 h)",
                show_default=False,
            ),
        ] = None,
        recover_every: Annotated[
            float | None,
            typer.Option(
                "--recover-every",
                min=0.001,
                help="seconds between passes that take over the runs a dead process left "
                "running (default 30; the first pass is at start-up)",
                show_default=False,
            ),
        ] = None,
        recover: Annotated[
            bool,
            typer.Option(
                "--recover/--no-recover",
                help="take over the app's runs a dead process left running",
            ),
        ] = True,
        keepalive: Annotated[
            float | None,
            typer.Option(
                "--keepalive",
                min=0.001,
                help="seconds of silence before an event stream sends a comment line (default 15)",
                show_default=False,
            ),
        ] = None,
        compensate_role: Annotated[
            str | None,
            typer.Option(
                "--compensate-role",
                help="who may compensate an effect: admin (the default) or operator",
                show_default=False,
            ),
        ] = None,
        workers: Annotated[
            int,
            typer.Option(
                "--workers",
                min=1,
                help="server processes on the one database (SQLite file or PostgreSQL); "
                "request-rate limits hold per process",
            ),
        ] = 1,
        log_format: LogFormatOpt = "text",
        log_level: LogLevelOpt = "INFO",
    ) -> None:
        """Serve the HTTP API (REST + SSE) and the operator web UI for an app, or for a
        database alone (--db PATH or --database URL, no MODULE:APP)."""
        from oncegraph.cli.database import choose
        from oncegraph.observe import configure_logging

        chosen = choose(database, database_file, required=False)
        if target is None:
            chosen = _database_alone(chosen)
        configure_logging(log_format, log_level)
        server = _server_module()
        # only what was given: the server's own defaults stay in one place
        given = _given(
            ("rate", rate),
            ("burst", burst),
            ("auth_rate", auth_rate),
            ("auth_burst", auth_burst),
            ("idempotency_window", idempotency_window),
            ("recover_every", recover_every),
            ("keepalive", keepalive),
            ("compensate_role", compensate_role),
        )
        if not recover:
            given["recover"] = False
        code = server.serve(  # a bad --origin is a ConfigError naming it, before serving
            target,
            host=host,
            port=port,
            database=chosen.where if chosen is not None else None,
            origins=origin or None,
            workers=workers,
            log_level=log_level,
            **given,
        )
        raise typer.Exit(code if isinstance(code, int) else 0)


def _given(*options: tuple[str, Any]) -> dict[str, Any]:
    """The options given on the command line (those not None), by name."""
    return {name: value for name, value in options if value is not None}


def _database_alone(chosen: Any) -> Any:
    """The database ``serve`` opens without an app: it must exist, with the schema."""
    from oncegraph.cli.database import check_postgres, check_sqlite

    if chosen is None:
        raise CliError(
            "nothing to serve: name the app, oncegraph serve MODULE:APP (module:attr or "
            "file.py:attr), or open a database without the app's code: oncegraph serve "
            "--db runs.db (or --database postgresql://...)",
            code=2,
        )
    if chosen.kind == "sqlite":
        check_sqlite(chosen.where)
    else:
        check_postgres(chosen.where)
    return chosen


def _server_module() -> Any:
    import importlib

    try:
        server = importlib.import_module("oncegraph.server")  # optional: may be absent
    except ImportError as exc:
        if exc.name in ("oncegraph.server",):
            raise CliError(
                "the HTTP server is not part of this oncegraph install (oncegraph.server is "
                "missing); install a release that has it"
            ) from None
        raise CliError(
            f"the server needs the 'server' extra ({exc.name or exc} is missing): "
            'pip install "oncegraph[server]"'
        ) from None
    return server


__all__ = ["register"]
