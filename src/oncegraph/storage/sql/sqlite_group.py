"""Group commit for SQLite: writes that are ready together share one transaction.

Runs on one event loop that write at the same moment (step commits and intents
requested in the same turn of the loop) are written in ONE ``BEGIN IMMEDIATE ...
COMMIT``, so they share one fsync. A request yields to the loop once: every run that is
ready in that turn adds its own request, then the group is written.

Invariants:

* **Durability per run is unchanged.** A run's ``commit`` returns only after the
  ``COMMIT`` of the transaction holding its rows has returned (``synchronous=FULL``: on
  disk); a run never proceeds on a commit that is not durable.
* **Each run's compare-and-swap is checked inside the group, in request order.** A
  request checks before it writes: one of the ``refusals`` (a lost CAS, a lost fence, a
  missing run) is raised only before its first write, so it gets its own error and the
  others go on, with no savepoint per request (a savepoint and its release cost about as
  much as the rest of a step's statements). A request that fails AFTER writing (a
  duplicate row) rolls the whole transaction back; it gets its error and the group is
  written again without it, so only its own rows are gone. Two requests on one thread in
  one group behave as two sequential commits (the second sees the first).
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
from typing import Any, TypeVar

from oncegraph.storage.sql.sqlite_open import rollback

T = TypeVar("T")

Write = Callable[[sqlite3.Connection], Any]
"""One request: write its rows in the open transaction and return its answer; raise to
refuse it (its rows are rolled back)."""


@dataclass(slots=True)
class GroupStats:
    """Requests written and transactions used (requests / transactions = group size)."""

    requests: int = 0
    transactions: int = 0
    largest: int = 0


@dataclass(slots=True)
class _Pending:
    write: Write
    future: asyncio.Future[Any]


@dataclass(slots=True)
class _Group:
    items: list[_Pending] = field(default_factory=list)


class CommitGroups:
    """Collect write requests per event loop and write each turn's in one transaction.

    ``connect()`` returns the open connection (called with ``lock`` held); ``map_error``
    turns a driver error into the store's error. See the module docstring.
    """

    def __init__(
        self,
        lock: threading.Lock,
        connect: Callable[[], sqlite3.Connection],
        map_error: Callable[[sqlite3.Error], Exception],
        *,
        refusals: tuple[type[Exception], ...] = (),
    ) -> None:
        self._lock = lock
        self._connect = connect
        self._map_error = map_error
        self._refusals = refusals
        self._open: dict[asyncio.AbstractEventLoop, _Group] = {}
        self.stats = GroupStats()

    async def write(self, write: Callable[[sqlite3.Connection], T]) -> T:
        """``write(conn)`` in the next group of this loop; its answer once it is durable."""
        loop = asyncio.get_running_loop()
        group = self._open.get(loop)
        if group is None:
            group = self._open[loop] = _Group()
            loop.call_soon(self._flush, loop, group)
        future: asyncio.Future[T] = loop.create_future()
        group.items.append(_Pending(write, future))
        return await future

    def _flush(self, loop: asyncio.AbstractEventLoop, group: _Group) -> None:
        if self._open.get(loop) is group:
            del self._open[loop]
        items = [p for p in group.items if not p.future.cancelled()]
        if not items:
            return
        errors: list[BaseException | None] = [None] * len(items)
        answers: list[Any] = [None] * len(items)
        todo = list(range(len(items)))
        try:
            with self._lock:
                conn = self._connect()
                while todo:
                    failed = self._write(conn, items, todo, answers, errors)
                    if failed is None:
                        break
                    todo.remove(failed)  # rolled back: the others again, without it
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
        for pending, answer, error in zip(items, answers, errors, strict=True):
            if pending.future.done():
                continue
            if error is None:
                pending.future.set_result(answer)
            else:
                pending.future.set_exception(error)

    def _write(
        self,
        conn: sqlite3.Connection,
        items: list[_Pending],
        todo: list[int],
        answers: list[Any],
        errors: list[BaseException | None],
    ) -> int | None:
        """Write requests ``todo`` in one transaction and commit it; None, or the index of
        a request that failed after writing (the transaction is rolled back, its error
        recorded). A failure of the transaction itself is raised (mapped)."""
        try:
            conn.execute("BEGIN IMMEDIATE")
            for i in todo:
                try:
                    answers[i], errors[i] = items[i].write(conn), None
                except self._refusals as exc:  # refused before writing anything
                    answers[i], errors[i] = None, exc
                except sqlite3.IntegrityError as exc:  # its own rows clash (a duplicate)
                    rollback(conn)
                    answers[i], errors[i] = None, self._map_error(exc)
                    return i
                except sqlite3.Error:
                    raise  # the connection or the file: the whole group fails
                except Exception as exc:  # anything else after its writes: undo them
                    rollback(conn)
                    answers[i], errors[i] = None, exc
                    return i
            if all(errors[i] is not None for i in todo):
                rollback(conn)  # nothing was written
            elif conn.in_transaction:
                conn.execute("COMMIT")
        except sqlite3.Error as exc:
            rollback(conn)
            raise self._map_error(exc) from exc
        except BaseException:
            rollback(conn)
            raise
        return None


__all__ = ["CommitGroups", "GroupStats"]
