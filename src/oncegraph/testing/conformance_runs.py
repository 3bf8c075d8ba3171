"""Contract tests of runs: create, read, update, the listings (by thread, status, app,
tenant, parent, page after page), unknown runs and fences (a part of
:class:`~oncegraph.testing.conformance.CheckpointerConformance`)."""

from __future__ import annotations

from typing import Any

import pytest

from oncegraph.errors import LeaseLostError, RunNotFoundError, StorageError
from oncegraph.storage.protocols import Checkpointer, ThreadOpening
from oncegraph.storage.records import EffectStatus, LogEntry, RunRecord, RunStatus
from oncegraph.testing.conformance_kit import (
    add_run,
    make_checkpoint,
    make_effect,
    make_run,
    new_id,
    snapshot,
    start_thread,
    step,
)


class RunConformance:
    """See the module docstring."""

    # -- runs -------------------------------------------------------------------------

    async def test_runs_create_get_update(self, checkpointer: Checkpointer) -> None:
        tid = new_id("thread")
        run = make_run(
            tid,
            status=RunStatus.QUEUED,
            input={"messages": [{"role": "user", "content": "hi"}]},
            config={"tool_timeout": 60},
            workflow_name="support",
            workflow_version="7",
            state_schema_version=3,
            graph_fingerprint="fp",
            parent_run_id="run_parent",
            parent_checkpoint_id="cp_parent",
            launch_reason="replay",
            mode="evidence",
            lease_owner="worker-1",
            lease_expires_at=99.5,
            fencing_token=4,
        )
        await checkpointer.create_run(run)
        assert await checkpointer.get_run(run.run_id) == run
        await checkpointer.update_run(run.run_id, status=RunStatus.FAILED, error="boom")
        got = await checkpointer.get_run(run.run_id)
        assert got is not None
        assert (got.status, got.error) == (RunStatus.FAILED, "boom")
        assert got.replace(status=run.status, error=None, updated_at=run.updated_at) == run
        await checkpointer.update_run(run.run_id, status=RunStatus.COMPLETED)
        got = await checkpointer.get_run(run.run_id)
        assert got is not None
        assert (got.status, got.error) == (RunStatus.COMPLETED, None)

    async def test_duplicate_run_is_rejected(self, checkpointer: Checkpointer) -> None:
        run = make_run(new_id("thread"), status=RunStatus.QUEUED)
        await checkpointer.create_run(run)
        # the same words on every backend, not the driver's
        with pytest.raises(StorageError, match=r"already exists; nothing was written") as info:
            await checkpointer.create_run(run.replace(status=RunStatus.COMPLETED))
        assert run.run_id in str(info.value)
        assert await checkpointer.get_run(run.run_id) == run

    async def test_list_runs_newest_first_by_thread_and_status(
        self, checkpointer: Checkpointer
    ) -> None:
        tid, other = new_id("thread"), new_id("thread")
        statuses = [
            RunStatus.COMPLETED,
            RunStatus.FAILED,
            RunStatus.RUNNING,
            RunStatus.INTERRUPTED,
            RunStatus.FAILED,
        ]
        # created_at (the submitters' clocks) is deliberately not in insertion order: a
        # thread's runs are listed in the order the store placed them, newest first
        created = [1_003.0, 1_001.0, 1_004.0, 1_000.0, 1_002.0]
        runs = [
            make_run(tid, status=s, created_at=c) for s, c in zip(statuses, created, strict=True)
        ]
        for run in runs:
            await checkpointer.create_run(run)
        await checkpointer.create_run(make_run(other, status=RunStatus.FAILED))
        newest_first = runs[::-1]
        assert await checkpointer.list_runs(thread_id=tid) == newest_first
        assert await checkpointer.list_runs(thread_id=tid, limit=2) == newest_first[:2]
        failed = await checkpointer.list_runs(thread_id=tid, statuses=[RunStatus.FAILED])
        assert failed == [runs[4], runs[1]]
        unfinished = await checkpointer.list_runs(
            thread_id=tid, statuses=[RunStatus.RUNNING, RunStatus.INTERRUPTED]
        )
        assert unfinished == [runs[3], runs[2]]
        # without a thread filter, our failed runs are found among everyone's
        everywhere = await checkpointer.list_runs(statuses=[RunStatus.FAILED], limit=100_000)
        ids = {r.run_id for r in everywhere}
        assert {runs[1].run_id, runs[4].run_id} <= ids
        assert all(r.status is RunStatus.FAILED for r in everywhere)

    async def test_open_thread_reads_the_thread_and_its_latest_run_together(
        self, checkpointer: Checkpointer
    ) -> None:
        """``open_thread`` answers what ``get_thread`` and the newest of ``list_runs`` do:
        for an unknown thread, a thread with runs but no row yet (a queued run), and a
        committed thread with several runs (the one the store placed last, whatever its
        ``created_at`` or ``run_id``);
        ``open_run`` what ``get_run`` and its thread's ``get_thread`` do."""
        if not isinstance(checkpointer, ThreadOpening):
            pytest.skip("this backend reads a thread and its latest run separately")
        assert await checkpointer.open_thread(new_id("thread")) == (None, None)

        queued = make_run(new_id("thread"), status=RunStatus.QUEUED)
        await checkpointer.create_run(queued)
        assert await checkpointer.open_thread(queued.thread_id) == (None, queued)

        tid, _, _ = await start_thread(checkpointer)
        later = make_run(tid, status=RunStatus.COMPLETED, created_at=1_002.0, app_id="a")
        tied = [make_run(tid, f"{tid}_r{i}", created_at=1_003.0) for i in (2, 1)]
        older = make_run(tid, f"{tid}_r0", created_at=1_001.0)  # written last, yet older
        for run in (later, *tied, older):
            await checkpointer.create_run(run)
        thread, latest = await checkpointer.open_thread(tid)
        assert thread == await checkpointer.get_thread(tid) and thread is not None
        assert (thread.version, latest) == (1, older)  # placed last: the thread's latest
        assert latest == (await checkpointer.list_runs(thread_id=tid, limit=1))[0]
        await checkpointer.update_run(older.run_id, status=RunStatus.FAILED, error="boom")
        _, latest = await checkpointer.open_thread(tid)
        assert latest is not None and (latest.status, latest.error) == (RunStatus.FAILED, "boom")

        # open_run: a run and its thread's row, by the run's id
        assert await checkpointer.open_run(new_id("run")) == (None, None)
        assert await checkpointer.open_run(queued.run_id) == (queued, None)
        assert await checkpointer.open_run(later.run_id) == (later, thread)

    async def test_list_runs_of_every_app_newest_first(self, checkpointer: Checkpointer) -> None:
        """With no app and no thread, a listing holds every app's runs in one order:
        newest first across the apps (a tie in time: the larger run id first), cut at the
        limit, the status and tenant filters applied to every app's runs alike."""
        apps, tenant = [new_id("app") for _ in range(3)], new_id("tenant")
        runs = [
            make_run(
                new_id("thread"),
                f"{new_id('run')}-{i:02d}",
                status=RunStatus.FAILED if i % 4 == 0 else RunStatus.COMPLETED,
                created_at=2_000.0 + i // 2,  # two apps' runs share each instant
                workflow_name=apps[i % 3],
                tenant=tenant if i % 3 == 1 else None,
            )
            for i in range(12)
        ]
        for run in reversed(runs):
            await checkpointer.create_run(run)
        newest = sorted(runs, key=lambda r: (r.created_at, r.run_id), reverse=True)
        assert await checkpointer.list_runs() == newest
        assert await checkpointer.list_runs(limit=5) == newest[:5]
        assert await checkpointer.list_runs(limit=0) == []
        failed = await checkpointer.list_runs(statuses=[RunStatus.FAILED], limit=2)
        assert failed == [r for r in newest if r.status is RunStatus.FAILED][:2]
        twice = [RunStatus.FAILED, RunStatus.FAILED]  # a status named twice counts once
        assert await checkpointer.list_runs(statuses=twice) == [
            r for r in newest if r.status is RunStatus.FAILED
        ]
        assert await checkpointer.list_runs(app_id=apps[0], statuses=twice) == [
            r for r in newest if r.status is RunStatus.FAILED and r.app_id == apps[0]
        ]
        assert await checkpointer.list_runs(tenant=tenant) == [
            r for r in newest if r.tenant == tenant
        ]

    async def test_list_runs_page_after_page(self, checkpointer: Checkpointer) -> None:
        """``before`` (a run's ``(created_at, run_id)``) lists the runs after that run in
        the listing's order: read page after page from each page's last run, a listing
        of any filters gives every run once, in order, as one long listing does; a tie
        in time goes on with the smaller ids."""
        apps, tenant = [new_id("app") for _ in range(2)], new_id("tenant")
        thread, parent = new_id("thread"), new_id("run")
        runs = [
            make_run(
                thread if i % 5 == 0 else new_id("thread"),
                f"{new_id('run')}-{i:02d}",
                status=RunStatus.FAILED if i % 3 == 0 else RunStatus.COMPLETED,
                created_at=3_000.0 + i // 3,  # three runs share each instant
                workflow_name=apps[i % 2],
                tenant=tenant if i % 4 == 1 else None,
                parent_run_id=parent if i % 4 == 2 else None,
            )
            for i in range(23)
        ]
        for run in reversed(runs):
            await checkpointer.create_run(run)
        failed, completed = RunStatus.FAILED, RunStatus.COMPLETED
        filters: list[dict[str, Any]] = [
            {},
            {"app_id": apps[0]},
            {"app_id": apps[1], "statuses": [failed]},
            {"statuses": [failed, completed]},
            {"statuses": [failed]},
            {"tenant": tenant},
            {"app_id": apps[1], "tenant": tenant},
            {"thread_id": thread},
            {"parent_run_id": parent},
            {"parent_run_id": parent, "app_id": apps[0]},
        ]
        for where in filters:
            whole = await checkpointer.list_runs(limit=1_000, **where)
            assert whole, where
            paged: list[RunRecord] = []
            before: tuple[float, str] | None = None
            while True:
                page = await checkpointer.list_runs(limit=2, before=before, **where)
                assert len(page) <= 2
                paged.extend(page)
                if len(page) < 2:
                    break
                before = (page[-1].created_at, page[-1].run_id)
            assert paged == whole, where
        # after one run of a tie in time: the tie's smaller ids, then the older runs
        newest = sorted(runs, key=lambda r: (r.created_at, r.run_id), reverse=True)
        tied = [r for r in newest if r.created_at == 3_003.0]
        assert len(tied) == 3
        after = await checkpointer.list_runs(before=(tied[0].created_at, tied[0].run_id), limit=4)
        assert after == newest[newest.index(tied[0]) + 1 :][:4]
        assert after[:2] == tied[1:]
        assert await checkpointer.list_runs(before=(2_999.0, "~"), tenant=tenant) == []

    async def test_list_runs_made_from_a_run(self, checkpointer: Checkpointer) -> None:
        """``parent_run_id`` lists the runs made from that run (its replays and
        branches), newest first, on any thread, with the other filters applied."""
        parent = make_run(new_id("thread"), created_at=1_000.0)
        app_a, app_b = new_id("app"), new_id("app")
        made = [
            make_run(
                f"{parent.thread_id}~{i}",
                created_at=1_001.0 + i,
                parent_run_id=parent.run_id,
                status=RunStatus.FAILED if i == 1 else RunStatus.COMPLETED,
                workflow_name=app_b if i == 2 else app_a,
            )
            for i in range(4)
        ]
        grandchild = make_run(new_id("thread"), created_at=1_010.0, parent_run_id=made[0].run_id)
        for run in (parent, *made, grandchild):
            await checkpointer.create_run(run)
        newest = made[::-1]
        assert await checkpointer.list_runs(parent_run_id=parent.run_id) == newest
        assert await checkpointer.list_runs(parent_run_id=parent.run_id, limit=2) == newest[:2]
        failed = [RunStatus.FAILED]
        assert await checkpointer.list_runs(parent_run_id=parent.run_id, statuses=failed) == [
            made[1]
        ]
        assert await checkpointer.list_runs(parent_run_id=parent.run_id, app_id=app_b) == [made[2]]
        assert await checkpointer.list_runs(parent_run_id=made[0].run_id) == [grandchild]
        assert await checkpointer.list_runs(
            parent_run_id=parent.run_id, thread_id=made[3].thread_id
        ) == [made[3]]
        assert await checkpointer.list_runs(parent_run_id=grandchild.run_id) == []

    async def test_runs_carry_their_app_and_tenant(self, checkpointer: Checkpointer) -> None:
        """Guarantee 15: a run's app and tenant are stored and come back as written; a run
        built without an app belongs to its workflow_name; both filter listings."""
        tid = new_id("thread")
        app_a, app_b, tenant = new_id("app"), new_id("app"), new_id("tenant")
        plain = make_run(tid, workflow_name=app_a, created_at=1_000.0)
        assert plain.app_id == app_a and plain.tenant is None
        tenanted = make_run(tid, workflow_name=app_a, tenant=tenant, created_at=1_001.0)
        other = make_run(tid, workflow_name=app_a, app_id=app_b, created_at=1_002.0)
        for run in (plain, tenanted, other):
            await checkpointer.create_run(run)
        for run in (plain, tenanted, other):
            assert await checkpointer.get_run(run.run_id) == run
        assert await checkpointer.list_runs(thread_id=tid, app_id=app_a) == [tenanted, plain]
        assert await checkpointer.list_runs(app_id=app_b) == [other]
        assert await checkpointer.list_runs(app_id=app_a, tenant=tenant) == [tenanted]
        assert await checkpointer.list_runs(app_id=app_b, tenant=tenant) == []
        assert await checkpointer.list_runs(tenant=tenant, limit=1) == [tenanted]
        assert await checkpointer.list_runs(app_id=new_id("app")) == []
        both = await checkpointer.list_runs(
            thread_id=tid, app_id=app_a, statuses=[RunStatus.RUNNING], limit=1
        )
        assert both == [tenanted]
        # a takeover (an operator's abandon, a resume) keeps the run's app and tenant
        taken = await checkpointer.fence_run(
            tenanted.run_id,
            expected_token=tenanted.fencing_token,
            owner="op",
            status=RunStatus.ABANDONED,
        )
        assert taken is not None and (taken.app_id, taken.tenant) == (app_a, tenant)

    async def test_effects_listed_by_their_runs_app_and_tenant(
        self, checkpointer: Checkpointer
    ) -> None:
        tid = new_id("thread")
        app_a, app_b, tenant = new_id("app"), new_id("app"), new_id("tenant")
        run_a = make_run(tid, workflow_name=app_a, tenant=tenant)
        run_b = make_run(tid, workflow_name=app_b)
        for run in (run_a, run_b):
            await checkpointer.create_run(run)
        mine = make_effect(run_a.run_id, tid, "m:1", created_at=3_001.0)
        theirs = make_effect(run_b.run_id, tid, "m:2", created_at=3_002.0)
        for effect in (mine, theirs):
            await checkpointer.begin_effect(effect)
        assert await checkpointer.list_effects(thread_id=tid) == [mine, theirs]
        assert await checkpointer.list_effects(thread_id=tid, app_id=app_a) == [mine]
        assert await checkpointer.list_effects(thread_id=tid, app_id=app_b) == [theirs]
        assert await checkpointer.list_effects(run_id=run_b.run_id, app_id=app_a) == []
        by_tenant = await checkpointer.list_effects(
            thread_id=tid, app_id=app_a, tenant=tenant, statuses=[EffectStatus.PENDING]
        )
        assert by_tenant == [mine]
        assert await checkpointer.list_effects(thread_id=tid, tenant=new_id("tenant")) == []

    async def test_unknown_run(self, checkpointer: Checkpointer) -> None:
        with pytest.raises(RunNotFoundError):
            await checkpointer.update_run(new_id("run"), status=RunStatus.COMPLETED)
        with pytest.raises(RunNotFoundError):
            await checkpointer.update_run(new_id("run"), status=RunStatus.COMPLETED, fence=1)
        tid, rid, cp1 = await start_thread(checkpointer)
        before = await snapshot(checkpointer, tid, [rid])
        ghost = new_id("run")
        cp2 = make_checkpoint(tid, ghost, 2, parent=cp1.checkpoint_id)
        # the run's update alone, fenced, or both: a missing run is named, not a lost fence
        for status, fence in ((RunStatus.COMPLETED, None), (None, 1), (RunStatus.COMPLETED, 1)):
            with pytest.raises(RunNotFoundError):
                await checkpointer.commit(step(cp2, run_status=status, fence=fence))
        assert await snapshot(checkpointer, tid, [rid]) == before

    async def test_fence_mismatch_raises_and_writes_nothing(
        self, checkpointer: Checkpointer
    ) -> None:
        tid, rid, cp1 = await start_thread(checkpointer)
        run_b = await add_run(checkpointer, tid, fencing_token=3)
        effect = make_effect(run_b, tid)
        await checkpointer.begin_effect(effect)
        with pytest.raises(LeaseLostError):
            await checkpointer.update_run(run_b, status=RunStatus.COMPLETED, fence=2)
        got = await checkpointer.get_run(run_b)
        assert got is not None and got.status is RunStatus.RUNNING
        before = await snapshot(checkpointer, tid, [rid, run_b])
        for run_status in (RunStatus.COMPLETED, None):
            cp2 = make_checkpoint(tid, run_b, 2, parent=cp1.checkpoint_id)
            with pytest.raises(LeaseLostError):
                await checkpointer.commit(
                    step(
                        cp2,
                        log=[LogEntry("messages", 0, "fenced out")],
                        run_status=run_status,
                        effects=[effect.replace(status=EffectStatus.COMPLETED, result=1)],
                        fence=2,
                    )
                )
            assert await checkpointer.get_checkpoint(tid, cp2.checkpoint_id) is None
        assert await snapshot(checkpointer, tid, [rid, run_b]) == before
        # the current token passes
        await checkpointer.update_run(run_b, status=RunStatus.RUNNING, fence=3)
        cp2 = make_checkpoint(tid, run_b, 2, parent=cp1.checkpoint_id)
        await checkpointer.commit(step(cp2, run_status=RunStatus.COMPLETED, fence=3))
        got = await checkpointer.get_run(run_b)
        assert got is not None and got.status is RunStatus.COMPLETED


__all__ = ["RunConformance"]
