"""Wake an idle worker when a run is queued: ``LISTEN oncegraph_runs`` on a connection of
its own.

Invariants:

* **A hint, never the source of truth.** A notice only wakes the claim loop; what is
  claimed is decided by the claim statement. A notice lost (the listening connection
  broke, the worker was busy) costs at most one ``poll_seconds``: polling stays on.
* **Wake-ups are rate-limited while they find nothing** (:class:`Wakeups`). Any role that
  may CONNECT to the database can ``NOTIFY oncegraph_runs`` (no table privilege is
  needed), and each notice used to cost every idle worker one claim statement: a flood
  kept them claiming about 180 times a second each. Now, once a claim a notice caused
  found nothing, notices wake the loop at most once per :data:`WAKE_INTERVAL`; the
  notices of an interval are coalesced into one wake at its end, so a real submit among
  them is still claimed within the interval. After a claim that found work, and for an
  idle worker's first notice, a notice wakes at once.
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
WAKE_INTERVAL = 0.05
"""Seconds: while claims find nothing, notices wake the claim loop at most this often."""


class Wakeups:
    """Notices turned into wake-ups of one claim loop, at most one per ``interval`` while
    the claims they cause find nothing.

    The listener calls :meth:`notice` for each notice; the claim loop calls
    :meth:`claimed` after each claim it makes, saying whether it found work. Both run on
    the worker's event loop. A notice wakes the loop at once unless the last claim a
    notice caused found nothing; then it wakes it at most once per ``interval``: the
    notices meanwhile are coalesced into ONE wake at the interval's end (none is lost:
    that wake's claim sees every run queued before it). Claims made for other reasons (a
    poll, a freed slot) that find nothing do not slow the next notice down, so a submit
    to an idle worker is claimed at once.
    """

    def __init__(self, wake: Callable[[], None], interval: float = WAKE_INTERVAL) -> None:
        self._wake = wake
        self.interval = interval
        self._quiet = False  # a claim a notice caused found nothing: notices are limited
        self._woke = False  # the loop's next claim is one a notice caused
        self._next = 0.0  # loop time from which a limited notice may wake at once
        self._timer: asyncio.TimerHandle | None = None
        self.woken = 0  # wakes given
        self.coalesced = 0  # notices that did not wake the loop by themselves

    def notice(self) -> None:
        if self._timer is not None:  # a wake is already due at the interval's end
            self.coalesced += 1
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        if not self._quiet or now >= self._next:
            self._fire(now)
            return
        self.coalesced += 1
        self._timer = loop.call_at(self._next, self._due)

    def claimed(self, found: bool) -> None:
        """The claim loop's report: its last claim found work (``found``) or none."""
        if found:
            self._quiet = False
        elif self._woke:  # a notice woke us for nothing: limit the next ones
            self._quiet = True
            self._next = max(self._next, asyncio.get_running_loop().time() + self.interval)
        self._woke = False

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _due(self) -> None:
        self._timer = None
        self._fire(asyncio.get_running_loop().time())

    def _fire(self, now: float) -> None:
        self._next = now + self.interval  # a notice during the claim it causes waits
        self._woke = True
        self.woken += 1
        self._wake()


async def listen_for_runs(
    store: PgCheckpointer,
    wake: Callable[[], None],
    *,
    on_listening: Callable[[], None] | None = None,
) -> None:
    """Call ``wake()`` on every queued-run notice until cancelled (see the module docstring;
    a worker passes :meth:`Wakeups.notice`, which rate-limits the wakes).

    ``on_listening`` is called each time the LISTEN is in place (tests wait for it)."""
    delay = _FIRST_DELAY
    while True:
        try:
            conn = await psycopg.AsyncConnection.connect(
                store.session_conninfo(),  # LISTEN needs a session: never a proxy's
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


__all__ = ["WAKE_INTERVAL", "Wakeups", "listen_for_runs"]
