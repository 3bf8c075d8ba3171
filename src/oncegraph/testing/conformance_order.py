"""Contract tests of a thread's run order, mixed into
:class:`~oncegraph.testing.conformance.CheckpointerConformance`.

A run's place in its thread is given by the store when it stores the run, never by the
``created_at`` its submitter wrote (that process's clock) or its run id (a ULID of the
same clock): the thread's latest run (``open_thread``, ``list_runs(thread_id=...,
limit=1)``) is the one stored last, and a thread's listing, and its pages, follow that
order. Fixture as there: ``checkpointer`` (a set-up store). Fresh random threads, so the
suite may share a database; the clocks are made up, so no test depends on the real one.
"""

from __future__ import annotations

import time

from oncegraph.storage.protocols import Checkpointer, ThreadOpening
from oncegraph.storage.records import CheckpointRecord, RunRecord, RunStatus
from oncegraph.testing.conformance_kit import make_run, new_id, step

# What submitters' clocks said, in the order the runs are stored: on time, 4 s behind,
# an hour ahead, an hour behind, and a run id that sorts before every other.
_SKEWS = (0.0, -4.0, 3600.0, -3600.0, -1.0)


def _run(
    thread_id: str,
    at: float,
    run_id: str | None = None,
    *,
    status: RunStatus = RunStatus.COMPLETED,
) -> RunRecord:
    """A run its submitter's clock dated ``at``."""
    return make_run(thread_id, run_id, status=status, created_at=at)


async def _latest(store: Checkpointer, thread_id: str) -> RunRecord | None:
    listed = await store.list_runs(thread_id=thread_id, limit=1)
    if isinstance(store, ThreadOpening):
        _, opened = await store.open_thread(thread_id)
        assert opened == (listed[0] if listed else None)
    return listed[0] if listed else None


class ThreadOrderConformance:
    """See the module docstring."""

    async def test_a_threads_latest_run_is_the_one_stored_last_whatever_its_clock(
        self, checkpointer: Checkpointer
    ) -> None:
        tid, now = new_id("thread"), time.time()
        stored: list[RunRecord] = []
        for i, skew in enumerate(_SKEWS):
            smallest = i == len(_SKEWS) - 1  # an id that sorts before every other
            run = _run(tid, now + skew, f"run-0-{new_id('x')}" if smallest else None)
            await checkpointer.create_run(run)
            stored.append(run)
            assert await _latest(checkpointer, tid) == run, f"after run {i} was stored"
        assert await checkpointer.list_runs(thread_id=tid) == stored[::-1]

    async def test_a_run_stored_with_its_first_checkpoint_takes_its_place_too(
        self, checkpointer: Checkpointer
    ) -> None:
        """The runs ``invoke`` starts are stored by their first commit, not create_run."""
        tid, now = new_id("thread"), time.time()
        first = _run(tid, now, status=RunStatus.COMPLETED)
        await checkpointer.create_run(first)
        behind = _run(tid, now - 3600.0, status=RunStatus.RUNNING)
        cp = CheckpointRecord(
            checkpoint_id=new_id("cp"),
            thread_id=tid,
            run_id=behind.run_id,
            step=-1,
            version=1,
            parent_checkpoint_id=None,
            values={},
            logs={},
            next=("__start__",),
            created_at=now - 3600.0,
        )
        await checkpointer.commit(step(cp, new_run=behind))
        assert await _latest(checkpointer, tid) == behind
        assert [r.run_id for r in await checkpointer.list_runs(thread_id=tid)] == [
            behind.run_id,
            first.run_id,
        ]

    async def test_a_threads_pages_follow_its_order(self, checkpointer: Checkpointer) -> None:
        tid, now = new_id("thread"), time.time()
        stored = [_run(tid, now + skew) for skew in _SKEWS]
        for run in stored:
            await checkpointer.create_run(run)
        newest_first = stored[::-1]
        pages: list[RunRecord] = []
        before: tuple[float, str] | None = None
        while True:
            page = await checkpointer.list_runs(thread_id=tid, limit=2, before=before)
            pages.extend(page)
            if len(page) < 2:
                break
            before = (page[-1].created_at, page[-1].run_id)
        assert pages == newest_first
        # a filtered listing keeps the same order
        other = _run(tid, now - 10.0, status=RunStatus.FAILED)
        await checkpointer.create_run(other)
        failed = await checkpointer.list_runs(thread_id=tid, statuses=[RunStatus.FAILED])
        assert failed == [other]


__all__ = ["ThreadOrderConformance"]
