"""Finding the app to serve: ``"module:attr"`` or ``"path/to/file.py:attr"``.

``attr`` names a compiled graph, a ``StateGraph`` (compiled here) or a function of no
arguments returning either. ``database`` (a SQLite path or a ``postgresql://`` DSN)
replaces the app's checkpointer; without it the app's own is used, and an app compiled
without one gets SQLite (``oncegraph.db`` in the working directory), so serving an
example works with nothing else running. :func:`database_only` serves a database with
no app at all (:class:`~oncegraph.server.database_app.DatabaseApp`).
"""

from __future__ import annotations

import re
from typing import Any

from oncegraph.app import CompiledGraph
from oncegraph.errors import ConfigError
from oncegraph.loading import load_object

DEFAULT_DATABASE = "oncegraph.db"
_KEY_VALUE = re.compile(r"^\s*[a-z_]+\s*=", re.IGNORECASE)


def load_target(target: str) -> Any:
    """What ``target`` names (:func:`oncegraph.loading.load_object`: the CLI's loader)."""
    return load_object(target)


def is_postgres(database: str) -> bool:
    """A PostgreSQL DSN: a ``postgresql://`` URL or libpq's ``key=value`` form (as the
    CLI tells them apart); anything else is a SQLite path."""
    text = database.strip()
    return text.startswith(("postgresql://", "postgres://")) or bool(_KEY_VALUE.match(text))


def checkpointer_for(database: str) -> Any:
    """The store at ``database``: a PostgreSQL DSN or a SQLite path. PostgreSQL's driver
    is imported only for a PostgreSQL DSN: a SQLite server needs no ``postgres`` extra."""
    if is_postgres(database):
        from oncegraph.storage.checkpointer import PgCheckpointer

        return PgCheckpointer(postgres_dsn=database.strip())
    from oncegraph.storage.checkpointer import SqliteCheckpointer

    return SqliteCheckpointer(database)


def database_only(database: str) -> CompiledGraph:
    """The database at ``database`` served without the app's code (reading, Resolve
    effect and Abandon; what runs the graph is refused, naming the fix)."""
    from oncegraph.server.database_app import DatabaseApp

    return DatabaseApp(checkpointer_for(database))


def compiled(found: Any, database: str | None) -> CompiledGraph:
    """The compiled graph to serve, on ``database`` if given."""
    if callable(found) and not isinstance(found, CompiledGraph) and not hasattr(found, "compile"):
        try:
            found = found()
        except Exception as exc:
            raise ConfigError(
                f"calling the target to build the app raised {type(exc).__name__}: {exc}"
            ) from exc
    if isinstance(found, CompiledGraph):
        if database is None and found.checkpointer is not None:
            return found
        return CompiledGraph(
            found.spec, checkpointer=checkpointer_for(database or DEFAULT_DATABASE)
        )
    compile_ = getattr(found, "compile", None)
    if callable(compile_):
        app = compile_(checkpointer=checkpointer_for(database or DEFAULT_DATABASE))
        if isinstance(app, CompiledGraph):
            return app
    raise ConfigError(
        f"the target is a {type(found).__name__}, not a compiled graph: point it at "
        "graph.compile(checkpointer=...) (or a StateGraph, or a function returning one)"
    )


__all__ = ["DEFAULT_DATABASE", "checkpointer_for", "compiled", "database_only", "load_target"]
