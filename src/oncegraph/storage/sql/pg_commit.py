"""PostgreSQL's step commit: one message, one transaction (:mod:`.pg_step`), alone when
the loop has no commit in flight, else with the steps waiting beside it
(:mod:`.pg_group`); a refused commit is explained from what the database holds now."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, NoReturn

import psycopg
from psycopg import errors as pg_errors

from oncegraph.errors import (
    LeaseLostError,
    RunNotFoundError,
    StaleStateError,
    StorageError,
    StorageFullError,
)
from oncegraph.storage.records import StepCommit
from oncegraph.storage.sql import rows
from oncegraph.storage.sql import statements as S
from oncegraph.storage.sql.pg_group import CommitGroups, Pending
from oncegraph.storage.sql.pg_pool import duplicate_message, mapped
from oncegraph.storage.sql.pg_step import StepWriter
from oncegraph.storage.sql.pg_tx import pg

THREAD_VERSION = "SELECT version FROM oncegraph_threads WHERE thread_id = %s"
RUN_EXISTS = pg(S.RUN_EXISTS)

Conn = psycopg.AsyncConnection[Any]
Connect = Callable[[str], AbstractAsyncContextManager[Conn]]


class StepCommits:
    """The commit path of one store: ``connect(op)`` lends a connection of this loop's
    pool (driver errors mapped), ``where`` names the database in messages, ``steps``
    writes a step's message."""

    def __init__(self, connect: Connect, where: str, steps: StepWriter) -> None:
        self._connect = connect
        self._where = where
        self.steps = steps
        self.groups = CommitGroups(self._write_group, self._write_one)

    async def _write_group(self, items: list[Pending]) -> None:
        """Commit the steps of ``items`` together, or each on its own once that failed
        (nothing of it was committed); settle each one's answer (:mod:`.pg_group`)."""
        async with self._connect("commit") as conn:
            if len(items) > 1:
                try:
                    counts = await self.steps.send_many(conn, [(p.commit, p.ts) for p in items])
                except psycopg.Error:
                    if conn.broken:
                        raise  # its outcome is unknown: each request gets the error
                    self.groups.stats.retried += 1
                else:
                    for p, inserted in zip(items, counts, strict=True):
                        if not p.answer.done():
                            p.answer.set_result(inserted)
                    return
            for p in items:
                await self._commit_alone(conn, p)

    async def _write_one(self, commit: StepCommit, ts: float) -> int:
        """One step on its own, in the caller's task (nothing else of this loop is in
        flight)."""
        async with self._connect("commit") as conn:
            return await self._send_step(conn, commit, ts)

    async def _commit_alone(self, conn: Conn, p: Pending) -> None:
        try:
            inserted = await self._send_step(conn, p.commit, p.ts)
        except Exception as exc:
            if not p.answer.done():
                p.answer.set_exception(exc)
        else:
            if not p.answer.done():
                p.answer.set_result(inserted)

    async def _send_step(self, conn: Conn, commit: StepCommit, ts: float) -> int:
        """Send one step (one round trip); a refusal is explained from what the database
        holds now."""
        with mapped("commit", self._where):
            try:
                return await self.steps.send(conn, commit, ts)
            except psycopg.Error as exc:
                await self._explain_failed_commit(conn, commit, exc)

    async def _explain_failed_commit(
        self, conn: Conn, commit: StepCommit, exc: psycopg.Error
    ) -> NoReturn:
        """The commit was rolled back: say why, from what the database holds now."""
        if isinstance(exc, pg_errors.DiskFull):  # no check failed: the disk did
            cause = " ".join(str(exc).split())
            cause = f"PostgreSQL at {self._where} is out of disk space ({cause})"
            raise StorageFullError(rows.full_message(commit, cause)) from exc
        cur = await conn.execute(THREAD_VERSION, (commit.thread_id,), prepare=False)
        row = await cur.fetchone()
        current = 0 if row is None else int(row[0])
        if current != commit.expected_version:  # the CAS is what failed
            raise StaleStateError(rows.stale_message(commit)) from exc
        creates = commit.new_run is not None and commit.new_run.run_id == commit.checkpoint.run_id
        if not creates and (commit.fence is not None or commit.run_status is not None):
            # (a run this commit inserts is missing because the commit failed: not the why)
            try:
                await check_run(conn, commit.checkpoint.run_id, commit.fence)
            except (RunNotFoundError, LeaseLostError) as found:
                raise found from exc
        if isinstance(exc, pg_errors.UniqueViolation):
            raise StorageError(duplicate_message(exc, commit)) from exc
        raise exc


async def check_run(conn: Conn, run_id: str, fence: int | None) -> None:
    """Raise if ``run_id`` is unknown or (``fence``) no longer held with that token."""
    cur = await conn.execute(RUN_EXISTS, (run_id,), prepare=False)
    rows.check_run(run_id, await cur.fetchone(), fence)


__all__ = ["RUN_EXISTS", "THREAD_VERSION", "StepCommits", "check_run"]
