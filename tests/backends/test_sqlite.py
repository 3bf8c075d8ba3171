"""SqliteCheckpointer: the conformance suite plus SQLite-specific guarantees
(pragmas, several OS processes on one file, exit without aclose, migrations)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from oncegraph.errors import ConfigError, StorageError
from oncegraph.storage.checkpointer import SqliteCheckpointer
from oncegraph.storage.records import LogEntry, StepCommit
from oncegraph.storage.sql import sqlite as sqlite_backend
from oncegraph.storage.sql.schema import LATEST_VERSION, SCHEMA_TABLE
from oncegraph.testing.conformance import (
    CheckpointerConformance,
    make_checkpoint,
    make_run,
    new_id,
    start_thread,
)


class TestSqlite(CheckpointerConformance):
    @pytest.fixture
    async def checkpointer(self, tmp_path: Path) -> AsyncIterator[SqliteCheckpointer]:
        store = SqliteCheckpointer(tmp_path / "conformance.db")
        await store.setup()
        yield store
        await store.aclose()

    @pytest.fixture
    async def reopen(
        self, tmp_path: Path
    ) -> AsyncIterator[Callable[[], Awaitable[SqliteCheckpointer]]]:
        opened: list[SqliteCheckpointer] = []

        async def _reopen() -> SqliteCheckpointer:
            store = SqliteCheckpointer(str(tmp_path / "conformance.db"))
            await store.setup()
            opened.append(store)
            return store

        yield _reopen
        for store in opened:
            await store.aclose()


def _pragma(store: SqliteCheckpointer, name: str) -> object:
    conn = store._conn  # white-box: the pragma is per connection
    assert conn is not None
    return conn.execute(f"PRAGMA {name}").fetchone()[0]


async def test_wal_and_synchronous_full_by_default(tmp_path: Path) -> None:
    store = SqliteCheckpointer(tmp_path / "p.db")
    await store.setup()
    try:
        assert _pragma(store, "journal_mode") == "wal"
        assert _pragma(store, "synchronous") == 2  # FULL
        assert _pragma(store, "busy_timeout") == 30000
    finally:
        await store.aclose()
    # WAL is a property of the file: a plain connection sees it too
    with sqlite3.connect(tmp_path / "p.db") as plain:
        assert plain.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    plain.close()


async def test_synchronous_is_configurable(tmp_path: Path) -> None:
    store = SqliteCheckpointer(tmp_path / "p.db", synchronous="normal", busy_timeout_ms=1234)
    await store.setup()
    try:
        assert _pragma(store, "synchronous") == 1  # NORMAL
        assert _pragma(store, "busy_timeout") == 1234
    finally:
        await store.aclose()
    with pytest.raises(ConfigError, match="FULL"):
        SqliteCheckpointer(tmp_path / "p.db", synchronous="fast")


async def test_memory_path_works(tmp_path: Path) -> None:
    store = SqliteCheckpointer(":memory:")
    await store.setup()
    try:
        tid, _, cp = await start_thread(store)
        assert await store.get_checkpoint(tid) == cp
    finally:
        await store.aclose()


async def test_lazy_open_without_setup(tmp_path: Path) -> None:
    store = SqliteCheckpointer(tmp_path / "lazy.db")
    try:
        tid, _, cp = await start_thread(store)  # first use opens and migrates
        assert await store.get_checkpoint(tid) == cp
        assert sqlite_backend.verify(tmp_path / "lazy.db").current == LATEST_VERSION
    finally:
        await store.aclose()


async def test_unopenable_path_is_a_storage_error(tmp_path: Path) -> None:
    store = SqliteCheckpointer(tmp_path / "missing-dir" / "x.db")
    with pytest.raises(StorageError, match="cannot open"):
        await store.setup()


async def test_locked_database_maps_to_storage_error_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "locked.db"
    store = SqliteCheckpointer(path, busy_timeout_ms=0)
    await store.setup()
    tid, rid, cp1 = await start_thread(store)
    blocker = sqlite3.connect(path, isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")
        cp2 = make_checkpoint(tid, rid, 2, parent=cp1.checkpoint_id)
        with pytest.raises(StorageError, match="busy_timeout_ms"):
            await store.commit(StepCommit(thread_id=tid, expected_version=1, checkpoint=cp2))
        blocker.execute("ROLLBACK")
        thread = await store.get_thread(tid)
        assert thread is not None and thread.version == 1
        # the store recovers once the lock is gone
        await store.commit(StepCommit(thread_id=tid, expected_version=1, checkpoint=cp2))
        assert await store.get_checkpoint(tid) == cp2
    finally:
        blocker.close()
        await store.aclose()


# -- several OS processes on one file -------------------------------------------------

_WORKER = textwrap.dedent(
    """
    import asyncio, json, os, sys, time
    from oncegraph.errors import StaleStateError
    from oncegraph.storage.records import LogEntry, StepCommit
    from oncegraph.storage.sql.sqlite import SqliteCheckpointer
    from oncegraph.testing.conformance import make_checkpoint, make_run

    async def main(path, tid, rid, target, name):
        store = SqliteCheckpointer(path)
        await store.setup()
        open(f"{path}.ready.{name}", "w").close()
        deadline = time.monotonic() + 300
        while not os.path.exists(f"{path}.go") and time.monotonic() < deadline:
            time.sleep(0.001)  # start together, so the commits really interleave
        wins = stale = 0
        while True:
            thread = await store.get_thread(tid)
            version = thread.version if thread else 0
            if version >= target:
                break
            commit = StepCommit(
                thread_id=tid,
                expected_version=version,
                checkpoint=make_checkpoint(tid, rid, version + 1, values={"writer": name}),
                log=[LogEntry("events", version, name)],
                new_run=make_run(tid, rid) if version == 0 else None,
            )
            try:
                await store.commit(commit)
                wins += 1
            except StaleStateError:
                stale += 1
            await asyncio.sleep(0.001)  # let the other process take the lock now and then
        await store.aclose()
        print(json.dumps({"wins": wins, "stale": stale}))

    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]))
    """
)


def _run_workers(path: str, tid: str, rid: str, target: int) -> list[dict[str, int]]:
    procs = [
        subprocess.Popen(
            [sys.executable, "-W", "error", "-c", _WORKER, path, tid, rid, str(target), name],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("a", "b")
    ]
    deadline = time.monotonic() + 300  # hang detectors, sized for a loaded VM
    while time.monotonic() < deadline and not all(
        Path(f"{path}.ready.{name}").exists() for name in ("a", "b")
    ):
        if any(p.poll() is not None for p in procs):
            break
        time.sleep(0.005)
    Path(f"{path}.go").touch()
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        assert "locked" not in err and err.strip() == "", err
        outputs.append(json.loads(out))
    return outputs


def _run_script(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-W", "error", "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
async def test_two_processes_commit_to_one_file(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.db")  # fresh: the processes also race on setup
    tid, rid, target = new_id("thread"), new_id("run"), 200
    outputs = _run_workers(path, tid, rid, target)
    assert sum(o["wins"] for o in outputs) == target
    store = SqliteCheckpointer(path)
    try:
        checkpoints = await store.list_checkpoints(tid)
        assert [c.version for c in checkpoints] == list(range(target, 0, -1))
        writers = await store.read_log(tid, "events", target + 10)
        assert len(writers) == target
        assert writers == [c.values["writer"] for c in reversed(checkpoints)]
        wins = {name: writers.count(name) for name in ("a", "b")}
        assert wins == {"a": outputs[0]["wins"], "b": outputs[1]["wins"]}
        thread = await store.get_thread(tid)
        assert thread is not None and thread.version == target
        assert len(await store.list_runs(thread_id=tid)) == 1
    finally:
        await store.aclose()


@pytest.mark.slow
async def test_process_exits_without_aclose(tmp_path: Path) -> None:
    path = str(tmp_path / "exit.db")
    tid, rid = new_id("thread"), new_id("run")
    script = textwrap.dedent(
        """
        import asyncio, sys
        from oncegraph.storage.records import StepCommit
        from oncegraph.storage.sql.sqlite import SqliteCheckpointer
        from oncegraph.testing.conformance import make_checkpoint, make_run

        STORE = SqliteCheckpointer(sys.argv[1])  # module global: alive at exit

        async def main(tid, rid):
            await STORE.commit(StepCommit(
                thread_id=tid, expected_version=0,
                checkpoint=make_checkpoint(tid, rid, 1), new_run=make_run(tid, rid)))
            # no aclose

        asyncio.run(main(sys.argv[2], sys.argv[3]))
        """
    )
    done = _run_script(script, path, tid, rid)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    store = SqliteCheckpointer(path)
    try:
        thread = await store.get_thread(tid)
        assert thread is not None and thread.version == 1
        assert await store.get_run(rid) is not None
    finally:
        await store.aclose()


# -- migrations ------------------------------------------------------------------------


async def test_fresh_database_gets_latest_version(tmp_path: Path) -> None:
    path = tmp_path / "fresh.db"
    store = SqliteCheckpointer(path)
    await store.setup()
    await store.aclose()
    state = sqlite_backend.verify(path)
    assert (state.current, state.up_to_date) == (LATEST_VERSION, True)
    with sqlite3.connect(path) as conn:
        applied = [r[0] for r in conn.execute(f"SELECT version FROM {SCHEMA_TABLE}")]
    conn.close()
    assert applied == list(range(1, LATEST_VERSION + 1))


def test_sync_migrate_and_verify_helpers(tmp_path: Path) -> None:
    path = tmp_path / "cli.db"
    with pytest.raises(StorageError, match="oncegraph db migrate"):
        sqlite_backend.verify(path)
    assert not path.exists()  # verify never creates a database
    state = sqlite_backend.migrate(path)
    assert state.current == LATEST_VERSION and state.up_to_date
    assert sqlite_backend.migrate(path).current == LATEST_VERSION  # idempotent
    assert sqlite_backend.verify(path).up_to_date


async def test_out_of_date_schema_without_auto_migrate(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    sqlite3.connect(path).close()  # an empty database: schema version 0
    store = SqliteCheckpointer(path, auto_migrate=False)
    with pytest.raises(StorageError, match="oncegraph db migrate"):
        await store.setup()
    assert sqlite_backend.verify(path).needs_migrate
    sqlite_backend.migrate(path)
    await store.setup()
    try:
        tid, _, cp = await start_thread(store)
        assert await store.get_checkpoint(tid) == cp
    finally:
        await store.aclose()


async def test_newer_database_is_refused_naming_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "newer.db"
    store = SqliteCheckpointer(path)
    tid, _, cp = await start_thread(store)
    await store.aclose()
    with sqlite3.connect(path) as conn:
        conn.execute(f"INSERT INTO {SCHEMA_TABLE} VALUES (?, 0)", (LATEST_VERSION + 1,))
    conn.close()
    for auto_migrate in (True, False):
        newer = SqliteCheckpointer(path, auto_migrate=auto_migrate)
        with pytest.raises(StorageError, match="Upgrade oncegraph") as info:
            await newer.setup()
        assert str(LATEST_VERSION + 1) in str(info.value)
    with pytest.raises(StorageError, match="Upgrade oncegraph"):
        sqlite_backend.verify(path)
    with pytest.raises(StorageError, match="Upgrade oncegraph"):
        sqlite_backend.migrate(path)
    # nothing was changed: the data and the newer stamp are still there
    with sqlite3.connect(path) as conn:
        assert conn.execute(f"SELECT MAX(version) FROM {SCHEMA_TABLE}").fetchone()[0] == (
            LATEST_VERSION + 1
        )
        assert conn.execute(
            "SELECT head_checkpoint_id FROM oncegraph_threads WHERE thread_id = ?", (tid,)
        ).fetchone() == (cp.checkpoint_id,)
    conn.close()


async def test_existing_data_survives_re_setup_and_migrate(tmp_path: Path) -> None:
    path = tmp_path / "keep.db"
    store = SqliteCheckpointer(path)
    tid, rid, cp1 = await start_thread(store, log=[LogEntry("messages", 0, "kept")])
    await store.aclose()
    sqlite_backend.migrate(path)
    again = SqliteCheckpointer(path)
    await again.setup()
    await again.setup()
    try:
        assert await again.get_checkpoint(tid) == cp1
        assert await again.read_log(tid, "messages", 1) == ["kept"]
        assert await again.get_run(rid) == make_run(tid, rid)
    finally:
        await again.aclose()
