"""Who holds a listing's running runs, looked up in one pass (``runs.holders.holders``)."""

from __future__ import annotations

import asyncio

from oncegraph.runs.holders import holder, holders
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import RunRecord, RunStatus, now


def _run(
    run_id: str, status: RunStatus = RunStatus.RUNNING, lease: float | None = None
) -> RunRecord:
    return RunRecord(
        run_id=run_id,
        thread_id=f"t-{run_id}",
        status=status,
        lease_owner="w1" if lease is not None else None,
        lease_expires_at=lease,
    )


def test_a_listing_tells_live_holders_from_crashed_ones_and_keeps_no_lock(
    checkpointer: Checkpointer,
) -> None:
    async def go() -> None:
        await checkpointer.setup()
        runs = [
            _run("leased", lease=now() + 600),  # a worker's lease not run out
            _run("held"),  # its process is alive: it holds the lock
            _run("gone"),  # its process died: nobody holds the lock
            _run("done", status=RunStatus.COMPLETED),
        ]
        for run in runs:
            await checkpointer.create_run(run)
        lock = await checkpointer.lock_run("held")
        assert lock is not None
        try:
            found = await holders(checkpointer, runs)
            assert sorted(found) == ["gone", "held", "leased"]  # not the completed run
            assert found["leased"].alive and found["leased"].owner == "w1"
            assert found["held"].alive
            assert found["gone"].crashed
            # the same answer the one-run lookup gives
            for run in runs[:3]:
                one = await holder(checkpointer, run)
                assert one is not None and one.alive == found[run.run_id].alive
            # the lock taken to look at "gone" was given back: it can be taken again
            again = await checkpointer.lock_run("gone")
            assert again is not None
            await again.release()
            # a capped listing tries the first locks only (a live lease costs no try)
            capped = await holders(checkpointer, runs, looks=1)
            assert sorted(capped) == ["held", "leased"]
        finally:
            await lock.release()

    asyncio.run(go())
