"""Find the compiled app a command line names: ``module:attr`` or ``path/to/file.py:attr``.

Used by the CLI (``oncegraph worker``, the operator commands' ``--app``) and the HTTP
server. The attribute is a :class:`~oncegraph.app.CompiledGraph` or a zero-argument
factory returning one; as with uvicorn, the current directory is importable. Every
failure is a :class:`~oncegraph.errors.ConfigError` naming the fix, never a traceback of
the import machinery (an error raised by the user's module itself is reported with its
type and message).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from oncegraph.app import CompiledGraph
from oncegraph.errors import ConfigError


def load_object(target: str) -> Any:
    """Import ``module:attr`` (or ``file.py:attr``) and return what ``attr`` names."""
    module_ref, sep, attr = (target.rpartition(":") if isinstance(target, str) else ("", "", ""))
    if not sep or not module_ref or not attr:
        raise ConfigError(
            f"expected module:attribute or path/to/file.py:attribute (e.g. myapp.agent:app), "
            f"got {target!r}"
        )
    module = _import(module_ref)
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigError(f"{module_ref!r} has no attribute {attr!r}; check the name") from None
    return obj


def load_app(target: str) -> CompiledGraph:
    """Import ``module:attr`` (or ``file.py:attr``) and return the compiled app it names."""
    obj = load_object(target)
    if not isinstance(obj, CompiledGraph) and callable(obj):
        try:
            obj = obj()
        except Exception as exc:
            raise ConfigError(
                f"calling {target} to build the app raised {type(exc).__name__}: {exc}"
            ) from exc
    if not isinstance(obj, CompiledGraph):
        raise ConfigError(
            f"{target} is a {type(obj).__name__}, not a compiled app; point at the result of "
            "graph.compile(checkpointer=...) or a function returning it"
        )
    return obj


def _import(ref: str) -> ModuleType:
    if ref.endswith(".py") or os.sep in ref:
        return _import_file(Path(ref))
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(ref)
    except ModuleNotFoundError as exc:
        if exc.name and ref.startswith(exc.name):
            raise ConfigError(
                f"cannot import module {ref!r} ({exc}); run from the directory that contains "
                "it, put it on PYTHONPATH, or name the file: path/to/file.py:app"
            ) from None
        raise ConfigError(f"importing {ref!r} failed: {exc}") from None
    except Exception as exc:
        raise ConfigError(f"importing {ref!r} raised {type(exc).__name__}: {exc}") from exc


def _import_file(path: Path) -> ModuleType:
    if not path.is_file():
        raise ConfigError(f"no Python file at {str(path)!r}; check the path")
    name = f"_oncegraph_app_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"{str(path)!r} cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)  # its sibling modules import as they do when run
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(name, None)
        raise ConfigError(f"importing {str(path)!r} raised {type(exc).__name__}: {exc}") from exc
    return module


__all__ = ["load_app", "load_object"]
