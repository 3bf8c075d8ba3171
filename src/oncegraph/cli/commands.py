"""Typer commands: ``demo``, ``db migrate|verify|prune``, ``runs``, ``effects``,
``probe-recipient``.

Every stored string (ids, statuses, errors, recipients) and every error message goes
to the terminal through :func:`oncegraph.cli.literal.literal`: never as Rich markup,
never with its control characters."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from oncegraph.cli.literal import literal

app = typer.Typer(
    help="oncegraph: agent graphs that survive crashes without doing anything twice.",
    no_args_is_help=True,
)
db_app = typer.Typer(help="Schema migrations and retention.", no_args_is_help=True)
app.add_typer(db_app, name="db")
console = Console()

SqliteOpt = Annotated[Path | None, typer.Option("--sqlite", help="SQLite database file")]
PgOpt = Annotated[str | None, typer.Option("--postgres", help="PostgreSQL DSN")]


def _store(sqlite: Path | None, postgres: str | None) -> Any:
    if (sqlite is None) == (postgres is None):
        raise typer.BadParameter("pass exactly one of --sqlite PATH or --postgres DSN")
    from oncegraph.storage.checkpointer import PgCheckpointer, SqliteCheckpointer

    if sqlite is not None:
        return SqliteCheckpointer(sqlite)
    assert postgres is not None
    return PgCheckpointer(postgres_dsn=postgres)


@app.command()
def demo(
    db: Annotated[
        Path | None, typer.Option(help="SQLite file to use (default: a temp dir)")
    ] = None,
    crash_at: Annotated[str, typer.Option(help="crash point to kill the worker at")] = "in_tool",
) -> None:
    """Kill a support agent mid-refund, resume it in a fresh process, count the refunds."""
    from oncegraph.cli.demo import run_demo

    raise typer.Exit(run_demo(db, crash_at))


@db_app.command("migrate")
def db_migrate(sqlite: SqliteOpt = None, postgres: PgOpt = None) -> None:
    """Apply pending migrations (safe while other processes start)."""
    state = _migrate_or_verify(sqlite, postgres, migrate=True)
    console.print(state.describe())


@db_app.command("verify")
def db_verify(sqlite: SqliteOpt = None, postgres: PgOpt = None) -> None:
    """Check the schema version against this oncegraph; exit 1 if it needs attention."""
    state = _migrate_or_verify(sqlite, postgres, migrate=False)
    console.print(state.describe())
    if not state.up_to_date:
        raise typer.Exit(1)


def _migrate_or_verify(sqlite: Path | None, postgres: str | None, *, migrate: bool) -> Any:
    from oncegraph.errors import StorageError

    if (sqlite is None) == (postgres is None):
        raise typer.BadParameter("pass exactly one of --sqlite PATH or --postgres DSN")
    try:
        if sqlite is not None:
            from oncegraph.storage.sql import sqlite as mod

            return mod.migrate(sqlite) if migrate else mod.verify(sqlite)
        from oncegraph.storage.sql import postgres as pg

        assert postgres is not None
        return pg.migrate(postgres) if migrate else pg.verify(postgres)
    except StorageError as exc:
        console.print(literal(exc, style="red"))
        raise typer.Exit(1) from exc


@app.command()
def runs(
    sqlite: SqliteOpt = None,
    postgres: PgOpt = None,
    thread: Annotated[str | None, typer.Option(help="only this thread")] = None,
    limit: int = 50,
) -> None:
    """List runs, newest first."""
    store = _store(sqlite, postgres)

    async def go() -> list[Any]:
        from oncegraph.runs.service import RunService

        try:  # a read-only service: the views mask what they know to be masked
            return list(await RunService(None, store).runs(thread_id=thread, limit=limit))
        finally:
            await store.aclose()

    table = Table()
    for col in ("run_id", "thread_id", "status", "reason", "error"):
        table.add_column(col)
    for r in asyncio.run(go()):
        table.add_row(
            *(literal(v) for v in (r.run_id, r.thread_id, r.status, r.launch_reason)),
            literal((r.error or "")[:60]),
        )
    console.print(table)


@app.command()
def effects(
    sqlite: SqliteOpt = None,
    postgres: PgOpt = None,
    run: Annotated[str | None, typer.Option(help="run id")] = None,
    thread: Annotated[str | None, typer.Option(help="thread id")] = None,
) -> None:
    """The effect log of a run or thread."""
    if run is None and thread is None:
        raise typer.BadParameter("pass --run RUN_ID or --thread THREAD_ID")
    store = _store(sqlite, postgres)

    async def go() -> list[Any]:
        from oncegraph.runs.service import RunService

        try:  # a read-only service: the views mask what they know to be masked
            return list(await RunService(None, store).effects(run_id=run, thread_id=thread))
        finally:
            await store.aclose()

    table = Table()
    for col in ("effect_id", "type", "class", "status", "attempts", "recipient"):
        table.add_column(col)
    for e in asyncio.run(go()):
        table.add_row(
            *(
                literal(v)
                for v in (
                    e.effect_id[:16],
                    e.effect_type,
                    e.effect_class,
                    e.status,
                    len(e.attempts),
                    e.recipient or "",
                )
            )
        )
    console.print(table)


@db_app.command("prune")
def db_prune(
    sqlite: SqliteOpt = None,
    postgres: PgOpt = None,
    keep: Annotated[
        int, typer.Option("--keep", min=1, help="checkpoints to keep per thread (>= 1)")
    ] = 1,
    effects_older_than_days: Annotated[
        float | None,
        typer.Option(
            "--effects-older-than-days",
            min=0,
            help="also delete finished effect records of finished runs older than this",
        ),
    ] = None,
    thread: Annotated[str | None, typer.Option(help="only this thread")] = None,
) -> None:
    """Retention: delete old checkpoints (and old finished effects); open runs keep theirs."""
    from oncegraph.errors import OnceGraphError

    store = _store(sqlite, postgres)
    older = None if effects_older_than_days is None else effects_older_than_days * 86400

    async def go() -> Any:
        try:
            await store.setup()
            return await store.prune(
                keep_checkpoints=keep, effects_older_than=older, thread_id=thread
            )
        finally:
            await store.aclose()

    try:
        report = asyncio.run(go())
    except OnceGraphError as exc:
        console.print(literal(exc, style="red"))
        raise typer.Exit(1) from exc
    console.print(
        f"pruned {report.threads} threads: deleted {report.checkpoints} checkpoints, "
        f"{report.task_writes} task writes, {report.effects} effect records "
        "(log entries are kept)"
    )


@app.command("probe-recipient")
def probe_recipient_cmd(
    url: Annotated[str, typer.Argument(help="the sandbox endpoint that performs the effect")],
    payload: Annotated[str, typer.Option(help="JSON body of the probe's requests")],
    changed_payload: Annotated[
        str, typer.Option(help="another JSON body, sent with an already used key")
    ],
    header: Annotated[str, typer.Option(help="the idempotency key header")] = "Idempotency-Key",
    h: Annotated[
        list[str] | None, typer.Option("-H", help="extra header 'Name: value' (repeatable)")
    ] = None,
    id_field: Annotated[str, typer.Option(help="(dotted) field naming the result")] = "id",
    retention: Annotated[
        str, typer.Option(help="comma-separated seconds to re-check the key after, e.g. 60,600")
    ] = "",
) -> None:
    """Check a recipient's idempotency contract (dedup, changed payload, key retention).

    It performs real effects: point it at a sandbox. Exit code 1 when the recipient is
    not safe for the write class.
    """
    import json

    from oncegraph.testing.recipient import field_id, http_sender, probe_recipient

    try:
        headers = dict(_header(line) for line in h or [])
        delays = [float(x) for x in retention.split(",") if x.strip()]
        report = probe_recipient(
            http_sender(url, header=header, headers=headers),
            payload=json.loads(payload),
            changed_payload=json.loads(changed_payload),
            result_id=field_id(id_field),
            retention=delays,
        )
    except (ValueError, OSError) as exc:  # bad JSON or numbers, refused, unreachable
        console.print(f"[red]{exc}[/]")
        raise typer.Exit(2) from exc
    console.print(report.describe(), highlight=False, markup=False)
    if not report.safe_for_write:
        raise typer.Exit(1)


def _header(line: str) -> tuple[str, str]:
    name, sep, value = line.partition(":")
    if not sep or not name.strip():
        raise ValueError(f"-H {line!r}: expected 'Name: value'")
    return name.strip(), value.strip()


def _register_subcommands() -> None:
    from oncegraph.cli.worker_cmd import register

    register(app)


_register_subcommands()
