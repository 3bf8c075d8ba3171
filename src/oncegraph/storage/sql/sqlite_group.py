"""Group commit for SQLite: step commits that are ready together share one transaction.

Runs on one event loop that commit at the same moment (their commits are requested in
the same turn of the loop) are written in ONE ``BEGIN IMMEDIATE ... COMMIT``, so they
share one fsync. A commit request yields to the loop once: every run that is ready in
that turn adds its own request, then the group is written.

Invariants:

* **Durability per run is unchanged.** A run's ``commit`` returns only after the
  ``COMMIT`` of the transaction holding its rows has returned (``synchronous=FULL``: on
  disk); a run never proceeds on a commit that is not durable.
* **Each run's compare-and-swap is checked inside the group, in request order.** Each
  request runs under its own ``SAVEPOINT``; a request that fails its own checks (a lost
  CAS, a lost fence, a duplicate row) is rolled back to its savepoint and gets its own
  error, and only its own rows are gone: the others in the group commit. Two requests on
  one thread in one group behave as two sequential commits (the second sees the first).
* **A failure of the transaction itself fails every request in it** (a ``COMMIT`` or
  ``BEGIN`` that fails: disk full, I/O error, busy): everything is rolled back and each
  request gets the mapped error; nothing of the group was written.
* A request whose waiter was cancelled before the group was written is left out.
* A group of one is written exactly as a single commit (no savepoint).
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

W = TypeVar("W")

Apply = Callable[[sqlite3.Connection, W], None]
"""Write one request's rows in the open transaction; raise to refuse it."""


@dataclass(slots=True)
class GroupStats:
    """Requests written and transactions used (requests / transactions = group size)."""

    requests: int = 0
    transactions: int = 0
    largest: int = 0


@dataclass(slots=True)
class _Pending(Generic[W]):
    work: W
    future: asyncio.Future[None]


@dataclass(slots=True)
class _Group(Generic[W]):
    items: list[_Pending[W]] = field(default_factory=list)


class CommitGroups(Generic[W]):
    """Collect commit requests per event loop and write each turn's in one transaction.

    ``connect()`` returns the open connection (called with ``lock`` held); ``apply``
    writes one request inside the transaction; ``map_error`` turns a driver error into
    the store's error. See the module docstring for the invariants.
    """

    def __init__(
        self,
        lock: threading.Lock,
        connect: Callable[[], sqlite3.Connection],
        apply: Apply[W],
        map_error: Callable[[sqlite3.Error], Exception],
    ) -> None:
        self._lock = lock
        self._connect = connect
        self._apply = apply
        self._map_error = map_error
        self._open: dict[asyncio.AbstractEventLoop, _Group[W]] = {}
        self.stats = GroupStats()

    async def commit(self, work: W) -> None:
        loop = asyncio.get_running_loop()
        group = self._open.get(loop)
        if group is None:
            group = self._open[loop] = _Group()
            loop.call_soon(self._write, loop, group)
        future: asyncio.Future[None] = loop.create_future()
        group.items.append(_Pending(work, future))
        await future

    def _write(self, loop: asyncio.AbstractEventLoop, group: _Group[W]) -> None:
        if self._open.get(loop) is group:
            del self._open[loop]
        items = [p for p in group.items if not p.future.cancelled()]
        if not items:
            return
        errors: list[BaseException | None] = [None] * len(items)
        try:
            with self._lock:
                conn = self._connect()
                try:
                    conn.execute("BEGIN IMMEDIATE")
                    if len(items) == 1:
                        try:
                            self._apply(conn, items[0].work)
                        except sqlite3.Error as exc:
                            errors[0] = self._map_error(exc)
                            _rollback(conn)
                        except Exception as exc:
                            errors[0] = exc
                            _rollback(conn)
                    else:
                        for i, pending in enumerate(items):
                            errors[i] = self._one(conn, pending.work)
                    if conn.in_transaction:
                        conn.execute("COMMIT")
                except sqlite3.Error as exc:
                    _rollback(conn)
                    raise self._map_error(exc) from exc
                except BaseException:
                    _rollback(conn)
                    raise
        except BaseException as failed:  # the transaction failed: so did every request
            for pending in items:
                if not pending.future.done():
                    pending.future.set_exception(failed)
            if not isinstance(failed, Exception):
                raise
            return
        self.stats.requests += len(items)
        self.stats.transactions += 1
        self.stats.largest = max(self.stats.largest, len(items))
        for pending, error in zip(items, errors, strict=True):
            if pending.future.done():
                continue
            if error is None:
                pending.future.set_result(None)
            else:
                pending.future.set_exception(error)

    def _one(self, conn: sqlite3.Connection, work: W) -> Exception | None:
        """One request under its own savepoint: its error, with its rows rolled back."""
        conn.execute("SAVEPOINT og_request")
        try:
            self._apply(conn, work)
        except sqlite3.IntegrityError as exc:  # its own rows clash (a duplicate id)
            conn.execute("ROLLBACK TO og_request")
            conn.execute("RELEASE og_request")
            return self._map_error(exc)
        except sqlite3.Error:
            raise  # the connection or the file: the whole group fails
        except Exception as exc:  # its own check refused it (CAS, fence)
            conn.execute("ROLLBACK TO og_request")
            conn.execute("RELEASE og_request")
            return exc
        conn.execute("RELEASE og_request")
        return None


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:  # the connection is broken; the transaction is gone anyway
            pass


__all__ = ["CommitGroups", "GroupStats"]
