"""The ``oncegraph`` command. Typer and Rich are the ``cli`` extra.

Every user error ends as one or two lines on stderr naming the cause and the fix, with
exit code 2 (bad usage: an option value, a missing argument) or 1 (the database, an
unknown id, a command that does not apply), never a traceback. Under ``--json`` the
error is a JSON document on stdout instead, for scripts: ``{"error": {"code": ...,
"message": ..., "exit_code": ...}}`` (and ``hint``, ``run_id``, ``effect_id`` where known).
"""

from __future__ import annotations

import json
import sys
from typing import Any


def _reporter(as_json: bool) -> Any:
    """How ``main`` reports an error: a line on stderr, or under ``--json`` a document."""
    from oncegraph.cli.output import fail

    def report(message: str, exit_code: int, code: str, **more: Any) -> int:
        if as_json:
            error = {"code": code, "message": message, "exit_code": exit_code}
            error.update({k: v for k, v in more.items() if v is not None})
            sys.stdout.write(json.dumps({"error": error}, ensure_ascii=False) + "\n")
        else:
            fail(message)
            if more.get("hint"):
                fail(more["hint"])
        return exit_code

    return report


def main() -> None:
    try:
        from oncegraph.cli.commands import app
        from oncegraph.cli.output import CliError
    except ImportError as exc:  # pragma: no cover - depends on the environment
        missing = getattr(exc, "name", None) or str(exc)
        sys.stderr.write(
            f"The oncegraph command needs the 'cli' extra ({missing} is missing):\n"
            '    pip install "oncegraph[cli]"\n'
        )
        raise SystemExit(1) from exc
    import typer

    from oncegraph.errors import NeedsReviewError, OnceGraphError

    try:  # typer vendors click since 0.2x; older versions use click itself
        from typer._click import exceptions as cx
    except ImportError:  # pragma: no cover - depends on the typer version
        from click import exceptions as cx  # type: ignore[no-redef]

    report = _reporter("--json" in sys.argv[1:])
    try:
        code = app(standalone_mode=False, prog_name="oncegraph")
    except cx.NoArgsIsHelpError as exc:
        sys.stdout.write(exc.ctx.get_help() + "\n" if exc.ctx else "")
        code = 0
    except cx.UsageError as exc:  # a bad option value, a missing argument
        where = exc.ctx.command_path if exc.ctx else "oncegraph"
        code = report(f"{exc.format_message()} (see: {where} --help)", 2, "usage")
    except CliError as exc:
        code = report(str(exc.format_message()), exc.code, "usage" if exc.code == 2 else "error")
    except cx.ClickException as exc:
        code = report(exc.format_message(), exc.exit_code, "error")
    except typer.Abort:
        code = report("aborted", 1, "aborted")
    except NeedsReviewError as exc:
        code = report(
            str(exc),
            1,
            "needs_review",
            hint=f"on the command line: oncegraph resolve {exc.effect_id or 'EFFECT'} "
            f"--outcome done|not_done --reason ..., then oncegraph continue "
            f"{exc.run_id or 'RUN'} --app ...",
            run_id=exc.run_id,
            effect_id=exc.effect_id,
        )
    except OnceGraphError as exc:
        code = report(str(exc), 1, _kind(exc))
    except ImportError as exc:  # an extra the command needs
        code = report(str(exc), 1, "missing_extra")
    except Exception as exc:
        if getattr(exc, "oncegraph_run_id", None) is None:
            raise  # a bug: keep the traceback
        node = getattr(exc, "oncegraph_node", None)
        code = report(
            f"run {exc.oncegraph_run_id} failed: node {node!r} raised "  # type: ignore[attr-defined]
            f"{type(exc).__name__}: {exc}; it can be continued once fixed",
            1,
            "node_failed",
            run_id=exc.oncegraph_run_id,  # type: ignore[attr-defined]
        )
    raise SystemExit(code if isinstance(code, int) else 0)


def _kind(exc: BaseException) -> str:
    """An error class as a ``code``: ``RunNotFoundError`` -> ``run_not_found``."""
    name = type(exc).__name__.removesuffix("Error") or "error"
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name).lstrip("_")
