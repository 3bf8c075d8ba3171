"""Finding the app to serve: ``"module:attr"`` or ``"path/to/file.py:attr"``.

``attr`` names a compiled graph, a ``StateGraph`` (compiled here) or a function of no
arguments returning either. ``database`` (a SQLite path or a ``postgresql://`` DSN)
replaces the app's checkpointer; without it the app's own is used, and an app compiled
without one gets SQLite (``oncegraph.db`` in the working directory), so serving an
example works with nothing else running.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

from oncegraph.app import CompiledGraph
from oncegraph.errors import ConfigError

DEFAULT_DATABASE = "oncegraph.db"


def load_target(target: str) -> Any:
    if not isinstance(target, str) or ":" not in target:
        raise ConfigError(
            f"target must be 'module:attr' or 'path/to/file.py:attr' naming a compiled graph; "
            f"got {target!r}"
        )
    where, _, attr = target.rpartition(":")
    if not where or not attr:
        raise ConfigError(f"target {target!r} needs both a module (or file) and an attribute")
    if where.endswith(".py") or "/" in where or "\\" in where:
        path = Path(where)
        if not path.is_file():
            raise ConfigError(f"no file {where!r}; give the path of a .py file (or a module name)")
        name = f"_oncegraph_served_{path.stem}"
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ConfigError(f"cannot import {where!r} as Python")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        sys.path.insert(0, str(path.resolve().parent))
        spec.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(where)
        except ModuleNotFoundError as exc:
            raise ConfigError(
                f"cannot import module {where!r} ({exc}); run from the directory that "
                "holds it, or give a file path: path/to/file.py:attr"
            ) from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ConfigError(f"{where!r} has no attribute {attr!r}") from None


def checkpointer_for(database: str) -> Any:
    from oncegraph.storage.checkpointer import PgCheckpointer, SqliteCheckpointer

    if database.startswith(("postgresql://", "postgres://")):
        return PgCheckpointer(postgres_dsn=database)
    return SqliteCheckpointer(database)


def compiled(found: Any, database: str | None) -> CompiledGraph:
    """The compiled graph to serve, on ``database`` if given."""
    if callable(found) and not isinstance(found, CompiledGraph) and not hasattr(found, "compile"):
        found = found()
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


__all__ = ["DEFAULT_DATABASE", "checkpointer_for", "compiled", "load_target"]
