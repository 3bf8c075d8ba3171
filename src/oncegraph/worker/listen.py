"""Wake an idle worker when a run is queued: ``LISTEN oncegraph_runs`` on a connection of
its own.

Invariants:

* **A hint, never the source of truth.** A notice only wakes the claim loop; what is
  claimed is decided by the claim statement. A notice lost (the listening connection
  broke, the worker was busy) costs at most one ``poll_seconds``: polling stays on.
* **Reconnect on loss.** A broken connection is logged and opened again with backoff
  (0.1 s doubling to 5 s); on every (re)connect the loop is woken once, since runs may
  have been queued while nobody listened.
* The connection is the listener's alone (autocommit, no prepared statements): it never
  holds a pool connection, and a LISTEN never rides a connection a run's writes share.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import psycopg

from oncegraph.storage.sql.postgres import RUNS_CHANNEL, PgCheckpointer

log = logging.getLogger("oncegraph.worker")

_FIRST_DELAY = 0.1
_MAX_DELAY = 5.0


async def listen_for_runs(
    store: PgCheckpointer,
    wake: Callable[[], None],
    *,
    on_listening: Callable[[], None] | None = None,
) -> None:
    """Call ``wake()`` on every queued-run notice until cancelled (see the module docstring).

    ``on_listening`` is called each time the LISTEN is in place (tests wait for it)."""
    delay = _FIRST_DELAY
    while True:
        try:
            conn = await psycopg.AsyncConnection.connect(
                store._dsn,
                autocommit=True,
                connect_timeout=max(1, round(store.connect_timeout)),
                prepare_threshold=None,
            )
        except (psycopg.Error, OSError) as exc:
            log.warning("cannot LISTEN for queued runs (polling meanwhile): %s", exc)
        else:
            try:
                await conn.execute(f"LISTEN {RUNS_CHANNEL}")
                delay = _FIRST_DELAY
                if on_listening is not None:
                    on_listening()
                wake()  # runs queued while nobody listened
                async for _ in conn.notifies():
                    wake()
            except (psycopg.Error, OSError) as exc:
                log.warning("LISTEN connection lost (polling until it is back): %s", exc)
            finally:
                await asyncio.shield(_close(conn))
        await asyncio.sleep(delay)
        delay = min(delay * 2, _MAX_DELAY)


async def _close(conn: psycopg.AsyncConnection[Any]) -> None:
    # a broken connection may fail to say goodbye; it is gone anyway
    with contextlib.suppress(Exception):
        await conn.close()


__all__ = ["listen_for_runs"]
