"""The ``oncegraph`` command. Typer and Rich are the ``cli`` extra.

Every user error ends as one or two lines on stderr naming the cause and the fix, with
exit code 2 (bad usage: an option value, a missing argument) or 1 (the database, an
unknown id, a command that does not apply), never a traceback.
"""

from __future__ import annotations

import sys


def main() -> None:
    try:
        from oncegraph.cli.commands import app
        from oncegraph.cli.output import CliError, fail
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

    try:
        code = app(standalone_mode=False, prog_name="oncegraph")
    except cx.NoArgsIsHelpError as exc:
        sys.stdout.write(exc.ctx.get_help() + "\n" if exc.ctx else "")
        code = 0
    except cx.UsageError as exc:  # a bad option value, a missing argument
        where = exc.ctx.command_path if exc.ctx else "oncegraph"
        fail(f"{exc.format_message()} (see: {where} --help)")
        code = 2
    except cx.ClickException as exc:
        fail(exc.format_message())
        code = exc.exit_code
    except typer.Abort:
        fail("aborted")
        code = 1
    except CliError as exc:
        fail(str(exc))
        code = exc.code
    except NeedsReviewError as exc:
        fail(str(exc))
        fail(
            f"on the command line: oncegraph resolve {exc.effect_id or 'EFFECT'} --outcome "
            f"done|not_done --reason ..., then oncegraph continue {exc.run_id or 'RUN'} "
            "--app ..."
        )
        code = 1
    except OnceGraphError as exc:
        fail(str(exc))
        code = 1
    except ImportError as exc:  # an extra the command needs
        fail(str(exc))
        code = 1
    except Exception as exc:
        if getattr(exc, "oncegraph_run_id", None) is None:
            raise  # a bug: keep the traceback
        node = getattr(exc, "oncegraph_node", None)
        fail(
            f"run {exc.oncegraph_run_id} failed: node {node!r} raised "  # type: ignore[attr-defined]
            f"{type(exc).__name__}: {exc}; it can be continued once fixed"
        )
        code = 1
    raise SystemExit(code if isinstance(code, int) else 0)
