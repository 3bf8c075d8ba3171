"""The ``oncegraph`` command: ``demo``, ``db migrate|verify|encrypt|prune``, ``probe-recipient``,
and (registered from their modules) the read commands (:mod:`oncegraph.cli.views`), the
operator commands (:mod:`oncegraph.cli.operate`), ``worker`` and ``serve``
(:mod:`oncegraph.cli.worker_cmd`).

Every stored string (ids, statuses, errors, recipients) and every error message goes
to the terminal through :func:`oncegraph.cli.literal.literal`: never as Rich markup,
never with its control characters."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from oncegraph.cli import output as o
from oncegraph.cli.database import Database, check_postgres, storage_errors
from oncegraph.cli.keys import CurrentOpt, KeysFileOpt, read_keys
from oncegraph.cli.literal import literal
from oncegraph.cli.output import CliError, console
from oncegraph.cli.session import ANYWHERE, ActorOpt, JsonOpt, Where, actor, where_command


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            shown = version("oncegraph")
        except PackageNotFoundError:  # pragma: no cover - a source checkout
            shown = "unknown"
        console.print(f"oncegraph {shown}")
        raise typer.Exit()


app = typer.Typer(
    help="oncegraph: agent graphs that survive crashes without doing anything twice.\n\n"
    "The database is --database PATH_OR_DSN, --database-file FILE or $ONCEGRAPH_DATABASE.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
db_app = typer.Typer(
    help="Schema migrations, checks, encryption at rest and retention.", no_args_is_help=True
)
app.add_typer(db_app, name="db")


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="print the version and exit"
        ),
    ] = False,
) -> None:
    """oncegraph: agent graphs that survive crashes without doing anything twice."""


def _progress() -> Progress:
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=o.err_console,
        transient=True,
    )


@app.command()
def demo(
    db: Annotated[
        Path | None, typer.Option(help="SQLite file to use (default: a temp dir)")
    ] = None,
    crash_at: Annotated[str, typer.Option(help="crash point to kill the worker at")] = "in_tool",
    log_format: Annotated[
        Literal["text", "json"], typer.Option("--log-format", help="log line format")
    ] = "text",
) -> None:
    """Kill a support agent mid-refund, resume it in a fresh process, count the refunds."""
    from oncegraph.cli.demo import run_demo
    from oncegraph.observe import configure_logging
    from oncegraph.runtime.faults import known_points

    configure_logging(log_format, "WARNING")
    import oncegraph.cli.demo_agent  # noqa: F401 - declares the demo's crash point

    points = known_points()
    if crash_at not in points:
        raise CliError(
            f"--crash-at {crash_at!r} is not a crash point; use one of {', '.join(points)}",
            code=2,
        )
    raise typer.Exit(run_demo(db, crash_at))


@where_command(db_app, "migrate", with_app=False)
def db_migrate(
    where: Where = ANYWHERE,
    as_json: JsonOpt = False,
) -> None:
    """Create or migrate the schema (creates a SQLite file on purpose; safe while others run)."""
    target = where.db()
    if target.kind == "postgres":
        check_postgres(target.where, schema=False)
    with _progress() as progress:
        progress.add_task(f"migrating {target.describe()}", total=None)
        state = _schema(target, migrate=True)
    if as_json:
        o.emit_json({"current": state.current, "latest": state.latest, "up_to_date": True})
        return
    console.print(literal(f"{target.describe()}: {state.describe()}"))


@where_command(db_app, "verify", with_app=False)
def db_verify(
    where: Where = ANYWHERE,
    keys_file: KeysFileOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Check the schema version, then the audit log's chain (an edited, deleted or
    reordered record is named); exit 1 if either needs attention. An encrypted database
    needs its keys (--keys-file) to check the records chained under them."""
    keys = read_keys(keys_file)
    target = where.db()
    if target.kind == "postgres":
        check_postgres(target.where, schema=False)
    state = _schema(target, migrate=False)
    report = _verify_audit(target, keys) if state.up_to_date else None
    if as_json:
        shown: dict[str, Any] = {
            "current": state.current,
            "latest": state.latest,
            "up_to_date": state.up_to_date,
        }
        if report is not None:
            shown["audit"] = {
                "ok": report.ok,
                "checked": report.checked,
                "records": report.records,
                "unchained": report.unchained,
                "first_chained": report.first_chained,
                "broken": report.broken,
                "problem": report.problem,
            }
        o.emit_json(shown)
    else:
        console.print(literal(state.describe()))
        if report is not None:
            console.print(literal(report.describe()))
    if not state.up_to_date or (report is not None and not report.ok):
        raise typer.Exit(1)


def _verify_audit(target: Database, keys: Any) -> Any:
    from oncegraph.cli.database import open_store

    store = open_store(target, keys)

    async def go() -> Any:
        try:
            await store.setup()
            return await store.verify_audit()
        finally:
            await store.aclose()

    with storage_errors():
        return asyncio.run(go())


@where_command(db_app, "encrypt", with_app=False)
def db_encrypt(
    where: Where = ANYWHERE,
    keys_file: KeysFileOpt = None,
    current: CurrentOpt = None,
    batch: Annotated[int, typer.Option("--batch", min=1, help="rows per transaction")] = 500,
    as_json: JsonOpt = False,
) -> None:
    """Seal every clear value (and every value of the older format) of the encrypted
    columns in place, each bound to its row: run it once when turning encryption on for
    an existing database, and after upgrading. Idempotent; safe while others run."""
    keys = read_keys(keys_file, current)
    if keys is None:
        raise CliError(
            "db encrypt needs the store's keys: --keys-file FILE (one 'key_id=hex' a line, "
            "the same EncryptionKeys the app opens its store with)",
            code=2,
        )
    target = where.db()
    from oncegraph.cli.database import check_sqlite
    from oncegraph.storage.sql import reseal

    if target.kind == "postgres":
        check_postgres(target.where)
    else:
        check_sqlite(target.where)
    with _progress() as progress:
        task = progress.add_task(f"sealing {target.describe()}", total=None)

        def advance(table: str, done: int) -> None:
            progress.update(task, description=f"sealing {table}: {done} values")

        with storage_errors():
            if target.kind == "sqlite":
                report = reseal.reseal_sqlite(target.where, keys, batch=batch, on_batch=advance)
            else:
                report = reseal.reseal_postgres(target.where, keys, batch=batch, on_batch=advance)
    if as_json:
        o.emit_json(
            {
                "sealed": report.sealed,
                "resealed": report.resealed,
                "kept": report.kept,
                "skipped": report.skipped,
                "tables": report.tables,
            }
        )
        return
    console.print(literal(f"{target.describe()}: {report.describe()}"))


def _schema(target: Database, *, migrate: bool) -> Any:
    with storage_errors():
        if target.kind == "sqlite":
            from oncegraph.storage.sql import sqlite as mod

            return mod.migrate(target.where) if migrate else mod.verify(target.where)
        from oncegraph.storage.sql import postgres as pg

        return pg.migrate(target.where) if migrate else pg.verify(target.where)


@where_command(db_app, "prune", with_app=False)
def db_prune(
    where: Where = ANYWHERE,
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
    yes: Annotated[
        bool,
        typer.Option("--yes", "-y", help="delete (without it: a dry run that deletes nothing)"),
    ] = False,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="count what would be deleted; delete nothing (the default)"),
    ] = False,
    allow_unreplayable: Annotated[
        bool,
        typer.Option(
            "--allow-unreplayable",
            help="delete even what a replay of a kept run needs (those runs can no longer "
            "be replayed)",
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Retention: delete old checkpoints (and old finished effects); open runs keep theirs.

    A dry run unless --yes. A prune that would delete what a replay of a kept run needs
    (its checkpoints, its recorded effects) is refused unless --allow-unreplayable."""
    from oncegraph.cli.database import open_store
    from oncegraph.runs.retention import replay_losses

    if yes and dry_run:
        raise CliError("--dry-run deletes nothing; drop --yes, or drop --dry-run to delete", 2)
    dry_run = not yes
    store = open_store(where.db())
    older = None if effects_older_than_days is None else effects_older_than_days * 86400

    with _progress() as progress:
        looking = progress.add_task("looking at what replays need", total=None)

        def looked(tid: str) -> None:
            progress.advance(looking)
            done = progress.tasks[looking].completed
            progress.update(looking, description=f"what replays need: {done:.0f} threads")

        task = progress.add_task(
            "pruning" + (" (dry run)" if dry_run else ""), total=None, visible=False
        )

        def advance(_: Any) -> None:
            progress.update(task, visible=True)
            progress.advance(task)
            done = progress.tasks[task].completed
            progress.update(task, description=f"pruning: {done:.0f} threads")

        async def go() -> Any:
            try:
                await store.setup()
                loss = await replay_losses(
                    store,
                    keep_checkpoints=keep,
                    effects_older_than=older,
                    thread_id=thread,
                    on_thread=looked,
                )
                progress.update(looking, visible=False)
                refused = bool(loss.runs) and not dry_run and not allow_unreplayable
                report = await store.prune(
                    keep_checkpoints=keep,
                    effects_older_than=older,
                    thread_id=thread,
                    dry_run=dry_run or refused,
                    on_thread=advance,
                )
                return loss, report, refused
            finally:
                await store.aclose()

        loss, report, refused = asyncio.run(go())
    lost = loss.runs
    if as_json and refused:
        pass  # the error below is the answer (one JSON document)
    elif as_json:
        o.emit_json(
            {
                **o.plain(report),
                "dry_run": dry_run or refused,
                "refused": refused,
                "unreplayable_runs": lost,
            }
        )
    else:
        verb = "would delete" if dry_run or refused else "deleted"
        console.print(
            f"{'dry run: ' if dry_run else ''}pruned {report.threads} threads: {verb} "
            f"{report.checkpoints} checkpoints, {report.task_writes} task writes, "
            f"{report.effects} effect records (log entries are kept)"
        )
        if lost:
            shown = ", ".join(lost[:10]) + (f" and {len(lost) - 10} more" if len(lost) > 10 else "")
            console.print(
                literal(
                    f"{len(lost)} run(s) could no longer be replayed after it (it deletes "
                    f"their checkpoints or recorded effects): {shown}"
                )
            )
        if dry_run:
            console.print("nothing was deleted (a dry run): pass --yes to delete")
    if refused:
        raise CliError(
            f"nothing was deleted: this prune would delete what a replay of {len(lost)} kept "
            "run(s) needs. Keep more checkpoints (--keep N), prune one thread (--thread), or "
            "pass --allow-unreplayable to delete it anyway"
        )


@where_command(app, "probe-recipient")
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
    record_for: Annotated[
        str | None,
        typer.Option(
            "--record-for",
            metavar="TOOL",
            help="keep the key retention measured for this tool in the database's audit "
            "log; a redelivery's preview uses it when the tool declares no dedup_window",
        ),
    ] = None,
    who: ActorOpt = None,
    where: Where = ANYWHERE,
) -> None:
    """Check a recipient's idempotency contract (dedup, changed payload, key retention).

    It performs real effects: point it at a sandbox. Exit code 1 when the recipient is
    not safe for the write class. With --record-for TOOL (and the database, or --app),
    the measured key retention is recorded for that tool.
    """
    import json
    import time

    from oncegraph.cli import measured
    from oncegraph.testing.recipient import field_id, http_sender, probe_recipient

    if record_for is not None:
        if not retention.strip():
            measured.seconds_measured(None)  # names --retention, before anything is sent
        if where.app is None:
            where.db()  # a database to record in, before anything is sent
    try:
        headers = dict(_header(line) for line in h or [])
        delays = [float(x) for x in retention.split(",") if x.strip()]
        sender = http_sender(url, header=header, headers=headers)
        with _progress() as progress:  # on stderr, gone when done: the report is stdout's
            task = progress.add_task("probing the recipient", total=None)
            sent = 0

            def send(body: Any, key: str) -> Any:
                nonlocal sent
                sent += 1
                progress.update(task, description=f"probing the recipient: request {sent}")
                return sender(body, key)

            def sleep(seconds: float) -> None:
                progress.update(
                    task,
                    description=f"waiting {seconds:.0f} s to see whether the recipient still "
                    "knows the key",
                )
                time.sleep(seconds)

            report = probe_recipient(
                send,
                payload=json.loads(payload),
                changed_payload=json.loads(changed_payload),
                result_id=field_id(id_field),
                retention=delays,
                sleep=sleep,
            )
    except (ValueError, OSError) as exc:  # bad JSON or numbers, refused, unreachable
        raise CliError(str(exc), code=2) from None
    console.print(report.describe(), highlight=False, markup=False)
    if record_for is not None:
        seconds = measured.record(where, record_for, report, actor(who))
        console.print(
            f"recorded for tool {record_for}: the recipient keeps a key for at least "
            f"{seconds:.0f} s",
            highlight=False,
            markup=False,
        )
    if not report.safe_for_write:
        raise typer.Exit(1)


def _header(line: str) -> tuple[str, str]:
    name, sep, value = line.partition(":")
    if not sep or not name.strip():
        raise ValueError(f"-H {line!r}: expected 'Name: value'")
    return name.strip(), value.strip()


def _register_subcommands() -> None:
    from oncegraph.cli import compensate, operate, threads, views, worker_cmd

    views.register(app)
    threads.register(app)
    operate.register(app)
    compensate.register(app)
    operate.register_runs(app)
    worker_cmd.register(app)


_register_subcommands()

__all__ = ["app"]
