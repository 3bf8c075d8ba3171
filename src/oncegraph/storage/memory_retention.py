"""Retention (``prune``) of the in-memory store, by the rules of the SQL statements
of the prune."""

from __future__ import annotations

from typing import Any

from oncegraph.storage.memory_tables import (
    CP_RUN,
    CP_VERSION,
    EFFECT_RUN,
    EFFECT_STATUS,
    EFFECT_THREAD,
    EFFECT_UPDATED,
    KEEP_RUN_STATUSES,
    PRUNE_EFFECT_RUN_STATUSES,
    PRUNE_EFFECT_STATUSES,
    RUN_STATUS,
    Tables,
)
from oncegraph.storage.queries import PrunePolicy, PruneTerms
from oncegraph.storage.records import PruneReport
from oncegraph.storage.saver_api import refuse_deleting


class Retention(Tables):
    """Prune a thread at a time, one lock hold each."""

    # -- retention --------------------------------------------------------------------

    async def _prune(self, p: PrunePolicy) -> PruneReport:
        """See :meth:`oncegraph.storage.protocols.Pruner.prune`; one thread per lock hold,
        with the same rules as the SQL statements of the prune."""
        terms = p.terms()
        with self._lock:
            thread_ids = sorted(self._threads) if p.thread_id is None else [p.thread_id]
        report = PruneReport()
        for tid in thread_ids:
            with self._lock:
                one = self._prune_thread(tid, terms)
            if p.on_thread is not None:
                p.on_thread(one)
            report = report.plus(one)
        return report

    def _delete_thread_rows(self, thread_id: str) -> PruneReport:
        """Delete what LangGraph's saver holds of ``thread_id`` (its row, checkpoints, task
        writes and logs, and its subgraphs' threads': those holding checkpoints of its
        runs), refused while a run of it is unfinished (``saver_api``); call under the
        lock."""
        run_ids = list(self._thread_runs.get(thread_id, ()))
        for rid in run_ids:
            run = self._runs.get(rid)
            if run is not None and run[RUN_STATUS] in KEEP_RUN_STATUSES:
                raise refuse_deleting(thread_id, rid, str(run[RUN_STATUS]))
        owned = set(run_ids)
        doomed = {thread_id} | {
            tid for (tid, _), row in self._checkpoints.items() if row[CP_RUN] in owned
        }
        threads = checkpoints = writes = 0
        for tid in doomed:
            threads += self._threads.pop(tid, None) is not None
            for key in [k for k in self._checkpoints if k[0] == tid]:
                del self._checkpoints[key]
                checkpoints += 1
            for key in [k for k in self._task_writes if k[0] == tid]:
                writes += len(self._task_writes.pop(key))
            for key in [k for k in self._logs if k[0] == tid]:
                del self._logs[key]
        return PruneReport(threads=threads, checkpoints=checkpoints, task_writes=writes)

    def _prune_thread(self, thread_id: str, t: PruneTerms) -> PruneReport:
        """Prune one thread by ``t``; call under the lock."""
        keep, cutoff, dry_run, fold = t.keep, t.cutoff, t.dry_run, t.fold
        thread = self._threads.get(thread_id)
        if thread is None:
            return PruneReport()
        version, head = int(thread[1]), thread[2]

        def kept_run(run_id: str) -> bool:
            run = self._runs.get(run_id)
            return run is not None and run[RUN_STATUS] in KEEP_RUN_STATUSES

        def doomed_row(row: Any) -> bool:
            if fold is not None:
                return bool(row[CP_RUN] == fold[0] and row[CP_VERSION] > fold[1])
            return bool(row[CP_VERSION] <= version - keep and not kept_run(row[CP_RUN]))

        doomed = [
            cid
            for (tid, cid), row in self._checkpoints.items()
            if tid == thread_id and cid != head and doomed_row(row)
        ]
        writes = 0
        for cid in doomed:
            if dry_run:
                writes += len(self._task_writes.get((thread_id, cid), {}))
                continue
            del self._checkpoints[(thread_id, cid)]
            writes += len(self._task_writes.pop((thread_id, cid), {}))
        effects = 0
        if cutoff is not None:
            for effect_id, row in list(self._effects.items()):
                run = self._runs.get(row[EFFECT_RUN])
                if (
                    row[EFFECT_THREAD] == thread_id
                    and row[EFFECT_UPDATED] < cutoff
                    and row[EFFECT_STATUS] in PRUNE_EFFECT_STATUSES
                    and run is not None
                    and run[RUN_STATUS] in PRUNE_EFFECT_RUN_STATUSES
                ):
                    if not dry_run:
                        del self._effects[effect_id]
                    effects += 1
        return PruneReport(threads=1, checkpoints=len(doomed), task_writes=writes, effects=effects)
