"""The options every operator command shares, and how a command gets its run service.

Read commands (``runs``, ``show``, ``threads``, ``state``, ``history``, ``effects``,
``effect``, ``audit``) and the commands that run no code (``resolve``, ``abandon``) work
from the database alone: a read-only :class:`~oncegraph.runs.service.RunService` over
the store. Commands that run the graph (``start``, ``continue``, ``check``, ``replay``,
``branch``, ``redeliver``) need the app: ``--app module:attr`` (or ``file.py:attr``)
names the compiled graph, whose own checkpointer is the database. With ``--app`` the
payloads of effects are shown with each tool's ``mask`` fields masked; without it the
masks are unknown, so payloads are not shown at all.
"""

from __future__ import annotations

import asyncio
import functools
import getpass
import inspect
import json
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from oncegraph.cli.database import ENV, Database, check_store, choose, open_store
from oncegraph.cli.output import CliError
from oncegraph.errors import ConfigError
from oncegraph.runtime.config import caller_id

if TYPE_CHECKING:
    from oncegraph.runs.service import RunService

T = TypeVar("T")


def _unset(*flags: str, help: str) -> Any:
    """An option that is None unless given, so its help shows no default."""
    return typer.Option(*flags, help=help, show_default=False)


DatabaseOpt = Annotated[
    str | None, _unset("--database", "-d", help=f"SQLite path or PostgreSQL DSN (default: ${ENV})")
]
DatabaseFileOpt = Annotated[
    Path | None,
    _unset(
        "--database-file", help="a file holding the DSN (keeps a password off the command line)"
    ),
]
SqliteOpt = Annotated[
    Path | None, typer.Option("--sqlite", help="SQLite database file (= --database PATH)")
]
PgOpt = Annotated[str | None, typer.Option("--postgres", help="PostgreSQL DSN (= --database DSN)")]
AppOpt = Annotated[
    str | None,
    _unset(
        "--app",
        help="the compiled app, module:attr or path/to/file.py:attr (its checkpointer is "
        "the database); needed to run the graph and to show masked payloads",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="JSON on stdout, for scripts")]
ActorOpt = Annotated[
    str | None,
    _unset(
        "--actor",
        help="who acts, for the audit log, recorded as cli:<name> (default: "
        "$ONCEGRAPH_ACTOR, else your login name)",
    ),
]
ReasonOpt = Annotated[str, typer.Option("--reason", help="why (kept in the audit log)")]
MaybeReasonOpt = Annotated[str | None, typer.Option("--reason", help="why (kept in the audit log)")]
ThreadArg = Annotated[str, typer.Argument(metavar="THREAD", help="the thread id")]
EffectArg = Annotated[str, typer.Argument(metavar="EFFECT", help="the effect id")]


@dataclass(frozen=True, slots=True)
class Where:
    """Where a command's runs live: a database, or an app (and its checkpointer)."""

    database: str | None = None
    database_file: Path | None = None
    sqlite: Path | None = None
    postgres: str | None = None
    app: str | None = None

    def db(self) -> Database:
        """The database named (one of --database, --database-file, --sqlite, --postgres,
        or ``$ONCEGRAPH_DATABASE``)."""
        found = choose(self.database, self.database_file, self.sqlite, self.postgres)
        assert found is not None
        return found


ANYWHERE = Where()
"""A command's ``where`` default (:func:`where_options` always passes the one named)."""

# The option block that says where a command's runs live, defined once: a command taking
# ``where: Where`` gets these options (``with_app``: --app too) from :func:`where_options`.
_DB_OPTIONS: tuple[tuple[str, Any], ...] = (
    ("database", DatabaseOpt),
    ("database_file", DatabaseFileOpt),
    ("sqlite", SqliteOpt),
    ("postgres", PgOpt),
)
_APP_OPTION: tuple[str, Any] = ("app", AppOpt)
F = TypeVar("F", bound=Callable[..., Any])


def where_options(*, with_app: bool = True) -> Callable[[F], F]:
    """Give a command the shared ``--database/--database-file/--sqlite/--postgres`` (and
    ``--app``) options in place of its ``where: Where`` parameter, and call it with the
    :class:`Where` they name."""
    block = (*_DB_OPTIONS, _APP_OPTION) if with_app else _DB_OPTIONS

    def wrap(command: F) -> F:
        own = inspect.signature(command, eval_str=True)
        kept = [p for p in own.parameters.values() if p.name != "where"]
        at = list(own.parameters).index("where")  # the options stand where it stood
        added = [
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=hint)
            for name, hint in block
        ]
        kept = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in kept]  # typer names all

        @functools.wraps(command)
        def call(*args: Any, **kwargs: Any) -> Any:
            where = Where(**{name: kwargs.pop(name) for name, _ in block})
            return command(*args, where=where, **kwargs)

        shown = [*kept[:at], *added, *kept[at:]]
        call.__signature__ = own.replace(parameters=shown)  # type: ignore[attr-defined]
        call.__annotations__ = {
            **{p.name: p.annotation for p in kept},
            **dict(block),
            "return": own.return_annotation,
        }
        return call  # type: ignore[return-value]

    return wrap


def where_command(
    typer_app: typer.Typer, name: str | None = None, *, with_app: bool = True
) -> Callable[[F], F]:
    """Register a command of ``typer_app`` (named ``name``, else after the function) that
    takes the :func:`where_options`."""

    def wrap(command: F) -> F:
        shown = where_options(with_app=with_app)(command)
        typer_app.command(name)(shown)
        return shown

    return wrap


def json_arg(
    flag: str, text: str, *, example: str = '{"field": "value"}', object_of: str | None = None
) -> Any:
    """The JSON an option was given; text that is not JSON is refused (exit 2) with an
    ``example`` of the option. ``object_of``: it must be a JSON object (of what, said in
    the refusal)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliError(
            f"{flag} is not valid JSON ({exc.msg} at character {exc.pos}); e.g. {flag} '{example}'",
            code=2,
        ) from None
    if object_of is not None and not isinstance(value, dict):
        raise CliError(f"{flag} must be a JSON object of {object_of}", code=2)
    return value


async def confirmed(question: str) -> bool:
    """Ask ``question`` on stderr (default: no), off the event loop; an abort is a no."""
    return await asyncio.to_thread(_ask, question)


def _ask(question: str) -> bool:
    try:
        return bool(typer.confirm(question, default=False, err=True))
    except typer.Abort:
        return False


CLI_PREFIX = "cli:"


def actor(given: str | None) -> str:
    """Who acts, as the audit log records it: ``--actor``, else ``$ONCEGRAPH_ACTOR``, else
    the login name; always in the CLI's own namespace, ``cli:<name>``.

    A name typed at the command line is not authenticated, so it never reads as another
    surface's actor: ``--actor api:ada`` is recorded as ``cli:api:ada``, not as the
    server key ``ada``. A name already written ``cli:<name>`` is kept as it is. A name
    with a control, format or line-separator character is refused (exit 2)."""
    env = os.environ.get("ONCEGRAPH_ACTOR")
    for name, source in ((given, "--actor"), (env, "$ONCEGRAPH_ACTOR")):
        text = (name or "").strip()
        if not text:
            continue
        try:
            caller_id("actor name", text)
        except ConfigError as exc:
            raise CliError(f"{source}: {exc}", code=2) from None
        return text if text.startswith(CLI_PREFIX) else CLI_PREFIX + text
    try:
        return CLI_PREFIX + getpass.getuser()
    except (KeyError, OSError):
        return "cli"


def service_for(where: Where, *, needs_app: str | None = None) -> RunService:
    """The run service: the app's (``--app``), else a read-only one over the database.

    ``needs_app``: the command runs the graph; without ``--app`` it is refused (exit 2)."""
    if where.app is not None:
        if any(
            x is not None
            for x in (where.database, where.database_file, where.sqlite, where.postgres)
        ):
            raise CliError(
                "pass --app or --database, not both: the app's checkpointer is its database",
                code=2,
            )
        from oncegraph.loading import load_app

        try:
            app = load_app(where.app)
        except ConfigError as exc:
            raise CliError(f"--app {where.app}: {exc}", code=2) from None
        if app.checkpointer is None:
            raise CliError(f"--app {where.app}: the app was compiled without a checkpointer")
        check_store(app.checkpointer)
        return app.service
    if needs_app is not None:
        raise CliError(
            f"{needs_app} runs the graph, so it needs the app: pass --app module:attr (or "
            "path/to/file.py:attr) naming the compiled graph",
            code=2,
        )
    from oncegraph.runs.service import RunService

    return RunService(None, open_store(where.db()))


def run(
    where: Where, act: Callable[[RunService], Awaitable[T]], *, needs_app: str | None = None
) -> T:
    """``await act(service)`` in a fresh event loop; the store is closed afterwards."""
    service = service_for(where, needs_app=needs_app)

    async def go() -> T:
        try:
            return await act(service)
        finally:
            await service.store.aclose()

    return asyncio.run(go())


__all__ = [
    "ANYWHERE",
    "ActorOpt",
    "AppOpt",
    "DatabaseFileOpt",
    "DatabaseOpt",
    "EffectArg",
    "JsonOpt",
    "MaybeReasonOpt",
    "PgOpt",
    "ReasonOpt",
    "SqliteOpt",
    "ThreadArg",
    "Where",
    "actor",
    "confirmed",
    "json_arg",
    "run",
    "service_for",
    "where_command",
    "where_options",
]
