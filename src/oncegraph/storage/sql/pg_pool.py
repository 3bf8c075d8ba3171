"""PostgreSQL's connection plumbing: the pool class, the DSN checks and the error map.

Driver errors become :class:`~oncegraph.errors.StorageError` subclasses here, at the
storage boundary (:func:`mapped`); a message never shows the DSN's password.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool, PoolTimeout
from psycopg_pool.pool_async import StopWorker

from oncegraph.errors import ConfigError, OnceGraphError, StorageError, StorageFullError
from oncegraph.storage.records import StepCommit

log = logging.getLogger("oncegraph.storage.postgres")


@contextlib.contextmanager
def mapped(op: str, where: str, cls: type[StorageError] = StorageError) -> Iterator[None]:
    """Turn driver errors into ``cls`` (a StorageError); our own errors pass through."""
    try:
        yield
    except OnceGraphError:
        raise
    except PoolTimeout as exc:
        raise cls(
            f"{op}: no PostgreSQL connection to {where} became available ({exc}). Check that "
            "the server is up and reachable, or raise max_size if the pool is exhausted."
        ) from exc
    except pg_errors.DiskFull as exc:
        raise StorageFullError(_full(op, where, exc)) from exc
    except psycopg.OperationalError as exc:
        raise cls(f"{op}: PostgreSQL at {where} failed: {exc}".rstrip()) from exc
    except psycopg.Error as exc:
        raise cls(f"{op} failed on {where}: {type(exc).__name__}: {exc}".rstrip()) from exc


def _full(op: str, where: str, exc: BaseException) -> str:
    detail = " ".join(str(exc).split())
    return (
        f"{op}: PostgreSQL at {where} is out of disk space ({detail}); the transaction was "
        "rolled back and nothing of it was stored. Free space on the database server's disk "
        "(or on the tablespace that holds the tables), then try again"
    )


def describe_dsn(dsn: str) -> str:
    """``dbname@host:port`` for messages; never the password."""
    try:
        info = conninfo_to_dict(dsn)
    except psycopg.Error:
        return "the configured PostgreSQL database"
    host = info.get("host") or "localhost"
    port = info.get("port") or "5432"
    return f"database {info.get('dbname', '?')!r} at {host}:{port}"


def check_dsn(dsn: str) -> None:
    """Refuse a DSN libpq cannot parse before a pool sees it.

    psycopg_pool logs each failed connection attempt at WARNING with libpq's message,
    and a parse error quotes the offending token, which can be the password. The error
    raised here shows neither the DSN nor libpq's message, and is raised outside the
    ``except`` so that it does not even carry the parse error as its context.
    """
    try:
        conninfo_to_dict(dsn)
    except psycopg.Error:
        pass
    else:
        return
    raise ConfigError(
        "the PostgreSQL DSN could not be parsed (its text is not shown: it may hold a "
        "password). Check its quoting: in key=value form quote a value with spaces or "
        "quotes as password='a b' (backslash-escape ' and \\); in a postgresql:// URL "
        "percent-encode reserved characters (@ as %40, / as %2F, space as %20)."
    )


def duplicate_message(exc: pg_errors.UniqueViolation, commit: StepCommit) -> str:
    table = getattr(exc.diag, "table_name", None) or ""
    if table == "oncegraph_runs" and commit.new_run is not None:
        return f"run {commit.new_run.run_id!r} already exists; nothing was written"
    if table == "oncegraph_checkpoints":
        return f"checkpoint {commit.checkpoint.checkpoint_id!r} already exists; nothing was written"
    if table == "oncegraph_log":
        return (
            f"a log entry of thread {commit.thread_id!r} already exists (log entries are never "
            f"rewritten): {exc.diag.message_detail or exc}; nothing was written"
        )
    return f"commit of thread {commit.thread_id!r} hit a duplicate key ({exc}); nothing was written"


class _QuietCancellation(logging.Filter):
    """Drop psycopg_pool's "error connecting" warning when the error is a cancellation:
    the program's loop is ending (``asyncio.run`` returned), nothing failed."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        return not any(isinstance(a, asyncio.CancelledError) for a in args)


logging.getLogger("psycopg.pool").addFilter(_QuietCancellation())


class Pool(AsyncConnectionPool):
    """psycopg_pool's pool, with maintenance workers that let cancellation through.

    psycopg_pool's maintenance tasks swallow a ``CancelledError`` (a failed connect is
    logged and retried later), and its workers then wait for the next task. When a
    program's loop ends with such a task in progress (``asyncio.run`` cancels every task
    and waits for them), that worker never ends and the program never exits. This worker
    is the same loop, except that a cancellation, even one a task swallowed, ends it.
    """

    @classmethod
    async def worker(cls, q: Any) -> None:
        while True:
            task = await q.get()
            if isinstance(task, StopWorker):
                return
            try:
                await task.run()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("pool task %s failed: %s: %s", task, type(exc).__name__, exc)
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise asyncio.CancelledError  # the task swallowed our cancellation


async def open_pool(
    dsn: str,
    where: str,
    *,
    min_size: int,
    max_size: int,
    pool_timeout: float,
    connect_timeout: float,
    prepared_statements: bool,
) -> Pool:
    """A pool of autocommit connections to ``dsn``, open (its first connection made)."""
    check_dsn(dsn)
    pool = Pool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        open=False,
        timeout=pool_timeout,
        kwargs={
            "autocommit": True,
            "connect_timeout": max(1, round(connect_timeout)),
            # psycopg prepares a statement after 5 runs; None: never (a pooling proxy)
            "prepare_threshold": 5 if prepared_statements else None,
        },
        name="oncegraph",
    )
    try:
        with mapped("connect", where):
            await pool.open(wait=True, timeout=connect_timeout)
    except BaseException:
        await pool.close()
        raise
    return pool


async def close_pool(pool: AsyncConnectionPool) -> None:
    await pool.close()


__all__ = [
    "Pool",
    "check_dsn",
    "close_pool",
    "describe_dsn",
    "duplicate_message",
    "mapped",
    "open_pool",
]
