"""How the CLI answers: Rich tables for people, ``--json`` for scripts, and errors as one
or two lines on stderr (never a traceback).

Stored strings always go through :func:`oncegraph.cli.literal.literal`. Ids are never
truncated: an id column is as wide as its longest id, so it can be copied and pasted.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from enum import Enum
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from oncegraph.cli.literal import literal, visible

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)


try:  # typer vendors click since 0.2x; older versions use click itself
    from typer._click.exceptions import ClickException
except ImportError:  # pragma: no cover - depends on the typer version
    from click.exceptions import ClickException  # type: ignore[assignment]


class CliError(ClickException):
    """A user error: ``message`` (cause and fix) goes to stderr; exit ``code`` (1 or 2).

    A ``ClickException``, so that calling the Typer app directly (a test's ``CliRunner``)
    also ends with the message and the exit code rather than a traceback."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code
        self.exit_code = code


def plain(value: Any) -> Any:
    """``value`` as JSON-able data: dataclasses and named tuples as dicts, enums as values,
    tuples as lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Enum):
        return plain(value.value)
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, tuple) and hasattr(value, "_asdict"):  # a named tuple: by field
        fields = {str(k): plain(v) for k, v in value._asdict().items()}
        run_id = getattr(value, "run_id", None)  # a snapshot's run, outside the tuple
        if run_id is not None:
            fields["run_id"] = run_id
        return fields
    if isinstance(value, list | tuple | set | frozenset):
        return [plain(v) for v in value]
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if value is None or isinstance(value, str | int | float | bool):
        return value
    model_dump = getattr(value, "model_dump", None)  # a pydantic model in the state
    if callable(model_dump):
        return plain(model_dump(mode="json"))
    return str(value)


def emit_json(value: Any) -> None:
    """Print ``value`` as JSON on stdout (plain ``print``: no Rich, no wrapping)."""
    sys.stdout.write(json.dumps(plain(value), ensure_ascii=False, indent=2) + "\n")


def table(
    columns: Sequence[str], rows: Iterable[Sequence[Any]], *, ids: Iterable[str] = ()
) -> None:
    """Print a table; the ``ids`` columns are never wrapped or truncated."""
    cells = [list(r) for r in rows]
    id_cols = set(ids)
    out = Table()
    for i, name in enumerate(columns):
        if name in id_cols:
            widest = max([len(visible(r[i])) for r in cells] + [len(name)])
            out.add_column(name, no_wrap=True, min_width=widest, overflow="ignore")
        else:
            out.add_column(name, overflow="fold")
    for row in cells:
        out.add_row(*(v if isinstance(v, Text) else literal(v) for v in row))
    wide = Console(highlight=False, width=max(console.width, _needed(columns, cells, id_cols)))
    wide.print(out)


def _needed(columns: Sequence[str], rows: list[list[Any]], id_cols: set[str]) -> int:
    """Room for every id column at full width, and a little for the others."""
    width = 1
    for i, name in enumerate(columns):
        if name in id_cols:
            width += max([len(visible(r[i])) for r in rows] + [len(name)]) + 3
        else:
            width += min(12, max([len(visible(r[i])) for r in rows] + [len(name)])) + 3
    return width


def fields(pairs: Iterable[tuple[str, Any]]) -> None:
    """Print ``name: value`` lines, values literally."""
    for name, value in pairs:
        line = Text(f"{name}: ", style="bold")
        line.append_text(value if isinstance(value, Text) else literal(value))
        console.print(line, soft_wrap=True)


def payload(value: Any) -> Text:
    """A JSON payload (masked already) shown literally on one line."""
    return literal(json.dumps(plain(value), ensure_ascii=False))


def when(at: float | None) -> str:
    if at is None:
        return ""
    import datetime

    return datetime.datetime.fromtimestamp(at, tz=datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")


def report_run(result: Any, as_json: bool, what: str) -> None:
    """Report how a run call ended (it may have completed, paused or parked again)."""
    record = result.run
    if as_json:
        emit_json({"run": record, "values": result.values, "interrupts": list(result.interrupts)})
        return
    fields([(what, record.run_id), ("thread", record.thread_id)])
    if result.interrupts:
        fields([("waiting for an answer", payload(list(result.interrupts)))])
        console.print(f"answer it with: oncegraph continue {record.run_id} --answer JSON")
    else:
        console.print("finished")


def fail(message: str) -> None:
    """An error line on stderr (literally: it may quote stored strings or paths)."""
    err_console.print(literal(f"error: {message}", style="red"), soft_wrap=True)


__all__ = [
    "CliError",
    "console",
    "emit_json",
    "fail",
    "fields",
    "payload",
    "plain",
    "report_run",
    "table",
]
