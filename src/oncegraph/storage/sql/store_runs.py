"""The checkpoint and run port of the one SQL store, written once over :class:`SqlPort`.

Threads, checkpoints, channel logs, task writes, runs (and their fences) and retention.
The step commit is the dialect's own (its performance is the dialect's): see
:meth:`SqliteCheckpointer.commit` and :meth:`PgCheckpointer.commit`.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from oncegraph.errors import RunNotFoundError
from oncegraph.storage.queries import CheckpointQuery, PrunePolicy, PruneTerms, RunQuery, Takeover
from oncegraph.storage.records import (
    PRUNABLE_EFFECT_RUN_STATUSES,
    PRUNABLE_EFFECT_STATUSES,
    UNFINISHED_STATUSES,
    CheckpointRecord,
    PruneReport,
    RunRecord,
    RunStatus,
    TaskWrite,
    ThreadRecord,
    now,
)
from oncegraph.storage.saver_api import deletion_audit, refuse_deleting
from oncegraph.storage.sql import rows
from oncegraph.storage.sql import statements as S
from oncegraph.storage.sql.listing import Shape
from oncegraph.storage.sql.store_port import SqlPort

_KEEP_RUN_STATUSES = tuple(sorted(str(s) for s in UNFINISHED_STATUSES))
_PRUNE_EFFECT_STATUSES = tuple(str(s) for s in PRUNABLE_EFFECT_STATUSES)
_PRUNE_EFFECT_RUN_STATUSES = tuple(str(s) for s in PRUNABLE_EFFECT_RUN_STATUSES)
_CHECKPOINT_PRUNE = S.checkpoint_prune(len(_KEEP_RUN_STATUSES))
_EFFECT_PRUNE = S.effect_prune(len(_PRUNE_EFFECT_STATUSES), len(_PRUNE_EFFECT_RUN_STATUSES))
_THREAD_PAGE = 500
_THREAD_UNFINISHED = S.thread_unfinished(len(_KEEP_RUN_STATUSES))


@lru_cache(maxsize=64)
def _run_list(shape: Shape) -> str:
    return shape.sql()


def run_update(
    run_id: str, status: RunStatus | None, error: str | None, fence: int | None, ts: float
) -> tuple[str, tuple[Any, ...]]:
    """The statement (and its parameters) that sets a run's status, checks its fence, or
    both; zero rows: no such run, or (``fence``) it is no longer held with that token."""
    if fence is None:
        if status is None:
            raise ValueError("a run update needs a status or a fence")
        return S.RUN_SET_STATUS, (str(status), error, ts, run_id)
    if status is None:
        return S.RUN_TOUCH_FENCED, (ts, run_id, fence)
    return S.RUN_SET_STATUS_FENCED, (str(status), error, ts, run_id, fence)


class RunMethods(SqlPort):
    """:class:`~oncegraph.storage.protocols.CheckpointStore`'s reads and run writes."""

    # -- threads and checkpoints -------------------------------------------------------

    async def get_thread(self, thread_id: str) -> ThreadRecord | None:
        row = await self._fetchone("get_thread", S.THREAD_SELECT, (thread_id,))
        return None if row is None else rows.thread_from_row(row)

    async def open_thread(self, thread_id: str) -> tuple[ThreadRecord | None, RunRecord | None]:
        row = await self._fetchone("open_thread", S.THREAD_OPENING, (thread_id, thread_id))
        return self.rows.thread_opening_from_row(row)

    async def open_run(self, run_id: str) -> tuple[RunRecord | None, ThreadRecord | None]:
        row = await self._fetchone("open_run", S.RUN_OPENING, (run_id,))
        return self.rows.run_opening_from_row(row)

    async def get_checkpoint(
        self, thread_id: str, checkpoint_id: str | None = None
    ) -> CheckpointRecord | None:
        if checkpoint_id is None:
            row = await self._fetchone("get_checkpoint", S.CHECKPOINT_SELECT_HEAD, (thread_id,))
        else:
            row = await self._fetchone(
                "get_checkpoint", S.CHECKPOINT_SELECT, (thread_id, checkpoint_id)
            )
        return None if row is None else self.rows.checkpoint_from_row(row)

    async def _list_checkpoints(self, q: CheckpointQuery) -> list[CheckpointRecord]:
        n = S.NO_LIMIT if q.limit is None else max(q.limit, 0)
        below = S.NO_LIMIT if q.before_version is None else q.before_version
        params: tuple[Any, ...]
        if q.run_id is None:
            sql, params = S.CHECKPOINT_LIST, (q.thread_id, below, n)
        else:
            sql, params = S.CHECKPOINT_LIST_BY_RUN, (q.thread_id, q.run_id, below, n)
        found = await self._fetchall("list_checkpoints", sql, params)
        return [self.rows.checkpoint_from_row(r) for r in found]

    async def read_log(self, thread_id: str, channel: str, end: int) -> list[Any]:
        found = await self._fetchall("read_log", S.LOG_SELECT, (thread_id, channel, end))
        return self.rows.log_values(thread_id, channel, found)

    async def put_task_write(
        self, write: TaskWrite, *, run_id: str | None = None, fence: int | None = None
    ) -> None:
        params = self.rows.task_write_to_params(write)
        fenced = None if fence is None else (run_id or "", fence)
        await self._write("put_task_write", S.TASK_WRITE_UPSERT, params, fence=fenced)

    async def get_task_writes(self, thread_id: str, checkpoint_id: str) -> list[TaskWrite]:
        found = await self._fetchall(
            "get_task_writes", S.TASK_WRITES_SELECT, (thread_id, checkpoint_id)
        )
        return [self.rows.task_write_from_row(r) for r in found]

    # -- runs --------------------------------------------------------------------------

    def _run_insert(self, run: RunRecord) -> str:
        """The statement that inserts ``run`` (a dialect may announce a queued one)."""
        return S.RUN_INSERT

    async def create_run(self, run: RunRecord) -> None:
        await self._write(
            "create_run",
            self._run_insert(run),
            self.rows.run_to_params(run),
            duplicate=f"run {run.run_id!r} already exists; nothing was written",
        )

    async def get_run(self, run_id: str) -> RunRecord | None:
        row = await self._fetchone("get_run", S.RUN_SELECT, (run_id,))
        return None if row is None else self.rows.run_from_row(row)

    async def _update_run(
        self, run_id: str, status: RunStatus, error: str | None, fence: int | None
    ) -> None:
        error = self.rows.error_param(run_id, error)
        sql, params = run_update(run_id, status, error, fence, now())
        if await self._write("update_run", sql, params) != 1:
            await self._explain_run("update_run", run_id, fence)

    async def _list_runs(self, q: RunQuery) -> list[RunRecord]:
        if q.statuses is not None and not q.statuses:
            return []

        async def read(sql: str, params: Sequence[Any]) -> list[Any]:
            return await self._fetchall("list_runs", sql, params)

        shape, params = await self._listing.plan(
            read,
            thread_id=q.thread_id,
            statuses=[str(s) for s in q.statuses or ()],
            app_id=q.app_id,
            tenant=q.tenant,
            limit=q.limit,
            parent_run_id=q.parent_run_id,
            before=q.before,
        )
        found = await self._fetchall("list_runs", _run_list(shape), params)
        return [self.rows.run_from_row(r) for r in found]

    async def _fence_run(self, run_id: str, t: Takeover) -> RunRecord | None:
        ts = now()
        params: tuple[Any, ...]
        if t.status is None:
            sql, params = S.RUN_FENCE, (t.owner, ts, run_id, t.expected_token)
        else:
            sql = S.RUN_FENCE_STATUS
            error = self.rows.error_param(run_id, t.error)
            params = (t.owner, str(t.status), error, ts, run_id, t.expected_token)
        audit = t.audit
        key = None if audit is None else await self._chain_key()
        missing = False
        async with self._transaction("fence_run", chained=audit is not None) as tx:
            row = await tx.one(sql, params)
            if row is None:
                missing = await tx.one(S.RUN_EXISTS, (run_id,)) is None
            elif audit is not None and key is not None:
                await self._append_audit_in_tx(tx, audit, key)
        if missing:
            raise RunNotFoundError(f"run {run_id!r} does not exist")
        return None if row is None else self.rows.run_from_row(row)

    # -- retention ---------------------------------------------------------------------

    async def _prune(self, p: PrunePolicy) -> PruneReport:
        """See :meth:`oncegraph.storage.protocols.Pruner.prune`. Each thread is pruned in
        its own transaction, so writers wait at most one thread; the thread row is only
        read, and rows a racing commit inserts are kept."""
        terms = p.terms()
        if p.thread_id is not None:
            report = await self._prune_thread(p.thread_id, terms)
            if p.on_thread is not None:
                p.on_thread(report)
            return report
        report = PruneReport()
        after: str | None = None
        while True:
            if after is None:
                page = await self._fetchall("prune", S.THREAD_IDS_FIRST, (_THREAD_PAGE,))
            else:
                page = await self._fetchall("prune", S.THREAD_IDS_AFTER, (after, _THREAD_PAGE))
            for (tid,) in page:
                one = await self._prune_thread(tid, terms)
                if p.on_thread is not None:
                    p.on_thread(one)
                report = report.plus(one)
            if len(page) < _THREAD_PAGE:
                return report
            after = page[-1][0]

    async def _delete_thread(self, thread_id: str) -> PruneReport:
        """See :meth:`~oncegraph.storage.saver_api.SaverMethods.adelete_thread`: one
        transaction, the thread's row deleted first (so a writer of the thread waits for
        it, then finds the thread gone), refused while a run of it is unfinished."""
        key = await self._chain_key()
        async with self._transaction("delete_thread") as tx:  # counts read: no pipeline
            threads = max(await tx.count(S.THREAD_DELETE, (thread_id,)), 0)
            busy = await tx.one(_THREAD_UNFINISHED, (thread_id, *_KEEP_RUN_STATUSES))
            if busy is not None:
                raise refuse_deleting(thread_id, str(busy[0]), str(busy[1]))
            children = [r[0] for r in await tx.all(S.THREAD_CHILDREN, (thread_id, thread_id))]
            checkpoints = writes = 0
            for tid in (thread_id, *children):
                writes += max(await tx.count(S.TASK_WRITES_DELETE_THREAD, (tid,)), 0)
                await tx.count(S.LOG_DELETE_THREAD, (tid,))
                checkpoints += max(await tx.count(S.CHECKPOINTS_DELETE_THREAD, (tid,)), 0)
                if tid != thread_id:
                    threads += max(await tx.count(S.THREAD_DELETE, (tid,)), 0)
            report = PruneReport(threads=threads, checkpoints=checkpoints, task_writes=writes)
            await self._append_audit_in_tx(tx, deletion_audit(thread_id, report), key)
        return report

    async def _prune_thread(self, thread_id: str, t: PruneTerms) -> PruneReport:
        keep, cutoff, fold = t.keep, t.cutoff, t.fold
        writes = effects = 0
        async with self._transaction("prune") as tx:
            if await tx.one(S.THREAD_SELECT, (thread_id,)) is None:
                return PruneReport()
            if fold is not None:  # a run's call that ended under durability="exit"
                doomed = await tx.all(S.CHECKPOINT_FOLD, (thread_id, *fold, thread_id))
            else:
                doomed = await tx.all(
                    _CHECKPOINT_PRUNE,
                    (thread_id, thread_id, keep, thread_id, *_KEEP_RUN_STATUSES),
                )
            if doomed:
                writes = await tx.count_many(
                    S.TASK_WRITES_DELETE, [(thread_id, cid) for (cid,) in doomed]
                )
            if cutoff is not None:
                effects = await tx.count(
                    _EFFECT_PRUNE,
                    (thread_id, cutoff, *_PRUNE_EFFECT_STATUSES, *_PRUNE_EFFECT_RUN_STATUSES),
                )
            if t.dry_run:
                tx.discard()  # counted, not deleted
        return PruneReport(
            threads=1, checkpoints=len(doomed), task_writes=max(writes, 0), effects=max(effects, 0)
        )


__all__ = ["RunMethods", "run_update"]
