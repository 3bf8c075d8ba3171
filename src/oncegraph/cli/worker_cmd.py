"""The ``oncegraph worker`` typer command; ``register(app)`` adds it to the CLI."""

from __future__ import annotations

from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    """Add ``worker`` to ``app``."""

    @app.command()
    def worker(
        target: Annotated[str, typer.Argument(metavar="MODULE:APP", help="the compiled app")],
        concurrency: Annotated[int, typer.Option(help="runs executed at once")] = 1,
        lease: Annotated[float, typer.Option(help="lease seconds")] = 30.0,
        heartbeat: Annotated[
            float | None, typer.Option(help="heartbeat seconds (default: lease / 3)")
        ] = None,
        poll: Annotated[float, typer.Option(help="idle poll seconds")] = 0.5,
        grace: Annotated[float, typer.Option(help="shutdown grace seconds")] = 0.0,
        owner: Annotated[str | None, typer.Option(help="lease owner name")] = None,
    ) -> None:
        """Execute queued runs from PostgreSQL (claim, lease, heartbeat); SIGTERM stops cleanly."""
        import logging

        from oncegraph.worker.cli import run_worker

        logging.basicConfig(
            level=logging.INFO,
            format="%(asctime)s %(levelname)s %(name)s [%(process)d] %(message)s",
        )
        raise typer.Exit(
            run_worker(
                target,
                concurrency=concurrency,
                lease_seconds=lease,
                heartbeat_seconds=heartbeat,
                poll_seconds=poll,
                shutdown_grace_seconds=grace,
                owner=owner,
            )
        )


__all__ = ["register"]
