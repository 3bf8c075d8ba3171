"""The ``oncegraph`` command. Typer and Rich are the ``cli`` extra."""

from __future__ import annotations

import sys


def main() -> None:
    try:
        from oncegraph.cli.commands import app
    except ImportError as exc:  # pragma: no cover - depends on the environment
        missing = getattr(exc, "name", None) or str(exc)
        sys.stderr.write(
            f"The oncegraph command needs the 'cli' extra ({missing} is missing):\n"
            '    pip install "oncegraph[cli]"\n'
        )
        raise SystemExit(1) from exc
    app()
