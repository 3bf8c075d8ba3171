"""The SQLite files hold every conversation: created 0600 (the -wal and -shm files
included), and a symlinked path is refused with an error naming the opt-in, never
followed silently."""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from oncegraph.errors import StorageError
from oncegraph.storage.checkpointer import SqliteCheckpointer
from oncegraph.storage.records import StepCommit
from oncegraph.storage.sql import sqlite as sqlite_backend
from oncegraph.testing.conformance import make_checkpoint, start_thread

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")


@contextlib.contextmanager
def umask(value: int) -> Iterator[None]:
    """The most permissive umask: what SQLite alone would create world-readable."""
    old = os.umask(value)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def open_and_close(store: SqliteCheckpointer) -> None:
    async def go() -> None:
        try:
            await store.setup()
        finally:
            await store.aclose()

    asyncio.run(go())


def test_a_new_database_and_its_wal_files_are_0600(tmp_path: Path) -> None:
    store = SqliteCheckpointer(tmp_path / "runs.db")

    async def two_commits() -> None:
        tid, rid, cp1 = await start_thread(store)
        cp2 = make_checkpoint(tid, rid, 2, parent=cp1.checkpoint_id)
        await store.commit(StepCommit(thread_id=tid, expected_version=1, checkpoint=cp2))

    try:
        with umask(0):
            asyncio.run(two_commits())
        files = {p.name: mode(p) for p in tmp_path.iterdir()}
        assert {"runs.db", "runs.db-wal", "runs.db-shm"} <= set(files), files
        assert set(files.values()) == {0o600}, {k: oct(v) for k, v in files.items()}
    finally:
        asyncio.run(store.aclose())


def test_migrate_creates_the_file_0600(tmp_path: Path) -> None:
    with umask(0):
        sqlite_backend.migrate(tmp_path / "m.db")
    assert mode(tmp_path / "m.db") == 0o600


def test_an_existing_file_keeps_its_mode(tmp_path: Path) -> None:
    """The user's own file and mode are left alone (the rule is for files we create)."""
    path = tmp_path / "mine.db"
    path.touch(mode=0o640)
    path.chmod(0o640)
    open_and_close(SqliteCheckpointer(path))
    assert mode(path) == 0o640


@pytest.mark.parametrize("target_exists", [True, False])
def test_a_symlinked_path_is_refused_and_the_target_untouched(
    tmp_path: Path, target_exists: bool
) -> None:
    target = tmp_path / "elsewhere" / "target.db"
    target.parent.mkdir()
    if target_exists:
        target.write_bytes(b"")
    link = tmp_path / "runs.db"
    link.symlink_to(target)
    with pytest.raises(StorageError, match="symbolic link") as info:
        open_and_close(SqliteCheckpointer(link))
    assert "os.path.realpath" in str(info.value)
    assert target.exists() == target_exists
    if target_exists:
        assert target.read_bytes() == b""
    assert sorted(p.name for p in target.parent.iterdir()) == (["target.db"] * target_exists)
    with pytest.raises(StorageError, match="symbolic link"):
        sqlite_backend.migrate(link)


def test_the_resolved_target_is_the_opt_in(tmp_path: Path) -> None:
    target = tmp_path / "target.db"
    link = tmp_path / "runs.db"
    link.symlink_to(target)
    open_and_close(SqliteCheckpointer(os.path.realpath(link)))
    assert mode(target) == 0o600


@pytest.mark.parametrize("suffix", ["-wal", "-shm"])
def test_a_symlinked_side_file_is_refused(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / "runs.db"
    elsewhere = tmp_path / "elsewhere"
    Path(str(path) + suffix).symlink_to(elsewhere)
    with pytest.raises(StorageError, match="side file"):
        open_and_close(SqliteCheckpointer(path))
    assert not elsewhere.exists()
