"""Brand-new PostgreSQL databases for tests, made ahead of need and dropped in the background.

Every PostgreSQL test gets a database nobody has touched (``CREATE DATABASE`` from the
server's template, exactly as ``oncegraph.testing.postgres.fresh_database`` makes one), and
it is dropped ``WITH (FORCE)`` after the test. What changes is WHEN the server does that
work: on PostgreSQL 15 a ``CREATE DATABASE`` writes the template through the WAL and a
``DROP DATABASE`` waits for a checkpoint, about a second or more each on a loaded machine,
and a test waiting on both spent most of its time there. Here one thread keeps a few
databases created before any test asks, and another drops the used ones several at a time
(concurrent drops share their checkpoints), both while the tests run. At the end of the
session every database made here is dropped, used or not.
"""

from __future__ import annotations

import queue
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import psycopg
from psycopg.conninfo import make_conninfo

PREFIX = "og_test_"


class FreshDatabases:
    """Hands out brand-new databases (``take``) and takes back used ones (``give_back``)."""

    def __init__(self, admin: str, spare: int = 2, drops_at_once: int = 3) -> None:
        self._admin = admin
        self._ready: queue.Queue[str] = queue.Queue(maxsize=spare)
        self._used: queue.Queue[str | None] = queue.Queue()
        self._stop = threading.Event()
        self._failure: BaseException | None = None
        self._drop_failures: list[str] = []
        self._drops = ThreadPoolExecutor(drops_at_once, thread_name_prefix="og-test-drop")
        self._maker = threading.Thread(target=self._make, name="og-test-create", daemon=True)
        self._dropper = threading.Thread(target=self._drop, name="og-test-drop", daemon=True)
        self._maker.start()
        self._dropper.start()

    def take(self) -> str:
        """The DSN of a database no one has used yet (waits for one if none is ready)."""
        while True:
            if self._failure is not None:
                raise RuntimeError(
                    f"could not create a test database: {self._failure}"
                ) from self._failure
            try:
                name = self._ready.get(timeout=0.5)
            except queue.Empty:
                continue
            return make_conninfo(self._admin, dbname=name)

    def give_back(self, dsn: str) -> None:
        """Drop the database of ``dsn`` soon, in the background."""
        name = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
        assert isinstance(name, str) and name.startswith(PREFIX), dsn
        self._used.put(name)

    def close(self) -> None:
        """Stop making databases and drop every one made here; returns when all are gone."""
        self._stop.set()
        self._maker.join()
        while True:
            try:
                self._used.put(self._ready.get_nowait())
            except queue.Empty:
                break
        self._used.put(None)
        self._dropper.join()
        self._drops.shutdown(wait=True)
        if self._drop_failures:
            raise RuntimeError("could not drop test databases: " + "; ".join(self._drop_failures))

    def _make(self) -> None:
        try:
            with psycopg.connect(self._admin, autocommit=True) as conn:
                while not self._stop.is_set():
                    name = f"{PREFIX}{uuid.uuid4().hex[:16]}"
                    conn.execute(f"CREATE DATABASE {name}")
                    while True:
                        try:
                            self._ready.put(name, timeout=0.2)
                            break
                        except queue.Full:
                            if self._stop.is_set():
                                self._used.put(name)
                                return
        except BaseException as exc:  # handed to the next take(), which raises it
            self._failure = exc

    def _drop(self) -> None:
        done = False
        while not done:
            batch = [self._used.get()]
            while True:
                try:
                    batch.append(self._used.get_nowait())
                except queue.Empty:
                    break
            done = None in batch
            names = [name for name in batch if name is not None]
            for name, future in [(n, self._drops.submit(self._drop_one, n)) for n in names]:
                try:
                    future.result()
                except Exception as exc:  # reported by close(), at the end of the session
                    self._drop_failures.append(f"{name}: {exc}")

    def _drop_one(self, name: str) -> None:
        with psycopg.connect(self._admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
