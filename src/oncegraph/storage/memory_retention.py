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
