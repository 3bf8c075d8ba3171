"""Contract tests of retention (``prune``): what is kept, what goes, dry runs, racing
commits, and an app that resumes after a prune (a part of
:class:`~oncegraph.testing.conformance.CheckpointerConformance`)."""

from __future__ import annotations

import asyncio
from typing import cast

import pytest

from oncegraph.errors import ConfigError
from oncegraph.storage.protocols import Checkpointer, Pruner
from oncegraph.storage.records import (
    UNFINISHED_STATUSES,
    CheckpointRecord,
    EffectStatus,
    LogEntry,
    PruneReport,
    RunStatus,
    StepCommit,
    now,
)
from oncegraph.testing.conformance_kit import (
    WithoutPrune,
    as_pruner,
    build_history,
    ids,
    ids_of,
    make_checkpoint,
    make_effect,
    make_run,
    new_id,
    prune_graph,
    snapshot,
    start_thread,
    step,
)


class PruneConformance:
    """See the module docstring."""

    # -- retention (prune) ------------------------------------------------------------

    async def test_is_a_pruner(self, checkpointer: Checkpointer) -> None:
        assert isinstance(checkpointer, Pruner)

    async def test_prune_keeps_head_and_newest_n(self, checkpointer: Checkpointer) -> None:
        store = as_pruner(checkpointer)
        tid, runs = await build_history(checkpointer, [RunStatus.COMPLETED] * 3)
        other, _ = await build_history(checkpointer, [RunStatus.COMPLETED] * 2)
        other_before = await snapshot(checkpointer, other, [])
        cps = [cp for _, run_cps in runs for cp in run_cps]
        report = await store.prune(keep_checkpoints=3, thread_id=tid)
        assert report == PruneReport(threads=1, checkpoints=3, task_writes=3, effects=0)
        assert await checkpointer.list_checkpoints(tid) == cps[:2:-1]  # v6, v5, v4
        for cp in cps[:3]:
            assert await checkpointer.get_checkpoint(tid, cp.checkpoint_id) is None
            assert await checkpointer.get_task_writes(tid, cp.checkpoint_id) == []
        for cp in cps[3:]:
            (write,) = await checkpointer.get_task_writes(tid, cp.checkpoint_id)
            assert write.value == {"v": cp.version}
        # log entries are never pruned: the head needs all of them
        assert await checkpointer.read_log(tid, "messages", 100) == [f"m{i}" for i in range(6)]
        report = await store.prune(keep_checkpoints=1, thread_id=tid)
        assert (report.checkpoints, report.task_writes) == (2, 2)
        assert await checkpointer.list_checkpoints(tid) == [cps[-1]]
        assert await checkpointer.get_checkpoint(tid) == cps[-1]
        assert await snapshot(checkpointer, other, []) == other_before

    async def test_prune_keeps_checkpoints_of_unfinished_runs(
        self, checkpointer: Checkpointer
    ) -> None:
        store = as_pruner(checkpointer)
        for status in sorted(UNFINISHED_STATUSES):
            tid, runs = await build_history(
                checkpointer, [RunStatus.ABANDONED, status, RunStatus.COMPLETED]
            )
            (_, gone), (open_run, kept), (_, last) = runs
            report = await store.prune(keep_checkpoints=1, thread_id=tid)
            assert (report.checkpoints, report.task_writes) == (3, 3), status
            remaining = await checkpointer.list_checkpoints(tid)
            assert remaining == [last[-1], kept[1], kept[0]], status
            assert await checkpointer.list_checkpoints(tid, run_id=open_run) == kept[::-1]
            for cp in kept:
                assert len(await checkpointer.get_task_writes(tid, cp.checkpoint_id)) == 1
            for cp in [*gone, last[0]]:
                assert await checkpointer.get_checkpoint(tid, cp.checkpoint_id) is None
                assert await checkpointer.get_task_writes(tid, cp.checkpoint_id) == []

    async def test_prune_effects_only_finished_old_of_finished_runs(
        self, checkpointer: Checkpointer
    ) -> None:
        store = as_pruner(checkpointer)
        tid, runs = await build_history(
            checkpointer, [RunStatus.COMPLETED, RunStatus.ABANDONED, RunStatus.INTERRUPTED]
        )
        (done, _), (abandoned, _), (open_run, _) = runs
        fresh = now() - 1.0
        doomed = [
            make_effect(done, tid, "c:1", status=EffectStatus.COMPLETED),
            make_effect(done, tid, "c:2", status=EffectStatus.FAILED),
            make_effect(abandoned, tid, "c:3", status=EffectStatus.COMPLETED),
        ]
        kept = [
            make_effect(done, tid, "c:4", status=EffectStatus.PENDING),
            make_effect(done, tid, "c:5", status=EffectStatus.ACCEPTED),
            make_effect(abandoned, tid, "c:6", status=EffectStatus.PENDING),
            make_effect(done, tid, "c:7", status=EffectStatus.COMPLETED, created_at=fresh),
            make_effect(open_run, tid, "c:8", status=EffectStatus.COMPLETED),
            make_effect(open_run, tid, "c:9", status=EffectStatus.FAILED),
            make_effect(new_id("run"), tid, "c:10", status=EffectStatus.COMPLETED),  # no run row
        ]
        other, ((other_run, _),) = await build_history(checkpointer, [RunStatus.COMPLETED])
        elsewhere = make_effect(other_run, other, "c:11", status=EffectStatus.COMPLETED)
        for e in [*doomed, *kept, elsewhere]:
            await checkpointer.begin_effect(e)
        # without effects_older_than no effect is touched
        report = await store.prune(keep_checkpoints=100, thread_id=tid)
        assert report == PruneReport(threads=1)
        report = await store.prune(keep_checkpoints=100, effects_older_than=3_600.0, thread_id=tid)
        assert report == PruneReport(threads=1, effects=3)
        for e in doomed:
            assert await checkpointer.get_effect(e.effect_id) is None
        assert await ids_of(checkpointer.list_effects(thread_id=tid)) == ids(kept)
        assert await checkpointer.get_effect(elsewhere.effect_id) == elsewhere
        # an age of 0 takes the fresh completed one too, never the others
        report = await store.prune(keep_checkpoints=100, effects_older_than=0, thread_id=tid)
        assert report.effects == 1
        remaining = ids(kept[:3] + kept[4:])
        assert await ids_of(checkpointer.list_effects(thread_id=tid)) == remaining

    async def test_prune_dry_run_counts_exactly_and_deletes_nothing(
        self, checkpointer: Checkpointer
    ) -> None:
        store = as_pruner(checkpointer)
        tid, runs = await build_history(checkpointer, [RunStatus.COMPLETED] * 3)
        other, _ = await build_history(checkpointer, [RunStatus.COMPLETED] * 2)
        (done, _) = runs[0]
        effect = make_effect(done, tid, "c:1", status=EffectStatus.COMPLETED)
        await checkpointer.begin_effect(effect)
        before = {t: await checkpointer.list_checkpoints(t) for t in (tid, other)}
        seen: list[PruneReport] = []
        dry = await store.prune(
            keep_checkpoints=1, effects_older_than=0, dry_run=True, on_thread=seen.append
        )
        assert dry.threads == 2 and dry.checkpoints > 0 and dry.effects == 1
        assert len(seen) == 2 and sum(r.checkpoints for r in seen) == dry.checkpoints
        for t, cps in before.items():
            assert await checkpointer.list_checkpoints(t) == cps  # nothing deleted
        assert await checkpointer.get_effect(effect.effect_id) is not None
        real = await store.prune(keep_checkpoints=1, effects_older_than=0)
        assert real == dry
        assert await checkpointer.get_effect(effect.effect_id) is None

    async def test_prune_is_idempotent(self, checkpointer: Checkpointer) -> None:
        store = as_pruner(checkpointer)
        tid, runs = await build_history(
            checkpointer, [RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.COMPLETED]
        )
        await checkpointer.begin_effect(make_effect(runs[0][0], tid, status=EffectStatus.COMPLETED))
        first = await store.prune(keep_checkpoints=2, effects_older_than=60.0, thread_id=tid)
        assert (first.checkpoints, first.effects) == (2, 1)
        after = await snapshot(checkpointer, tid, [rid for rid, _ in runs])
        again = await store.prune(keep_checkpoints=2, effects_older_than=60.0, thread_id=tid)
        assert again == PruneReport(threads=1)
        assert await snapshot(checkpointer, tid, [rid for rid, _ in runs]) == after

    async def test_prune_unknown_thread_and_bad_arguments(self, checkpointer: Checkpointer) -> None:
        store = as_pruner(checkpointer)
        assert await store.prune(thread_id=new_id("thread")) == PruneReport()
        tid, _ = await build_history(checkpointer, [RunStatus.COMPLETED] * 2)
        before = await snapshot(checkpointer, tid, [])
        for bad in (
            {"keep_checkpoints": 0},
            {"keep_checkpoints": -1},
            {"effects_older_than": -1.0},
        ):
            with pytest.raises(ConfigError):
                await store.prune(thread_id=tid, **bad)
        assert await snapshot(checkpointer, tid, []) == before

    async def test_pruned_thread_loads_and_continues(self, checkpointer: Checkpointer) -> None:
        store = as_pruner(checkpointer)
        tid, runs = await build_history(checkpointer, [RunStatus.COMPLETED] * 2)
        head = runs[-1][1][-1]
        await store.prune(keep_checkpoints=1, thread_id=tid)
        assert await checkpointer.get_checkpoint(tid) == head
        thread = await checkpointer.get_thread(tid)
        assert thread is not None
        assert (thread.version, thread.head_checkpoint_id) == (4, head.checkpoint_id)
        rid = new_id("run")
        cp5 = make_checkpoint(tid, rid, 5, parent=head.checkpoint_id, logs={"messages": 5})
        await checkpointer.commit(
            step(
                cp5,
                log=[LogEntry("messages", 4, "m4")],
                new_run=make_run(tid, rid),
                clear_task_writes_of=head.checkpoint_id,
            )
        )
        assert await checkpointer.get_checkpoint(tid) == cp5
        assert await checkpointer.read_log(tid, "messages", 5) == [f"m{i}" for i in range(5)]

    async def test_prune_every_thread(self, checkpointer: Checkpointer) -> None:
        # Prunes the whole store: a backend fixture must give each test its own database.
        store = as_pruner(checkpointer)
        threads = [await build_history(checkpointer, [RunStatus.COMPLETED] * 2) for _ in range(3)]
        report = await store.prune(keep_checkpoints=1)
        assert report.threads >= 3
        assert report.checkpoints >= 9
        for tid, runs in threads:
            assert await checkpointer.list_checkpoints(tid) == [runs[-1][1][-1]]

    async def test_prune_racing_commits(self, checkpointer: Checkpointer) -> None:
        store = as_pruner(checkpointer)
        tid, first_run, cp = await start_thread(checkpointer)
        await checkpointer.update_run(first_run, status=RunStatus.COMPLETED)
        steps = 30
        done = asyncio.Event()
        reports: list[PruneReport] = []

        async def write() -> CheckpointRecord:
            head = cp
            for v in range(2, steps + 2):
                rid = new_id("run")
                nxt = make_checkpoint(tid, rid, v, parent=head.checkpoint_id, logs={"messages": v})
                await checkpointer.commit(  # never stale: this is the only writer
                    StepCommit(
                        thread_id=tid,
                        expected_version=v - 1,
                        checkpoint=nxt,
                        log=[LogEntry("messages", v - 2, v)],
                        new_run=make_run(tid, rid),
                        run_status=RunStatus.COMPLETED,
                    )
                )
                head = nxt
                await asyncio.sleep(0)
            done.set()
            return head

        async def prune() -> None:
            while not done.is_set():
                reports.append(await store.prune(keep_checkpoints=1, thread_id=tid))
                await asyncio.sleep(0)

        head, _ = await asyncio.gather(write(), prune())
        reports.append(await store.prune(keep_checkpoints=1, thread_id=tid))
        assert await checkpointer.list_checkpoints(tid) == [head]
        # every checkpoint but the head was deleted exactly once
        assert sum(r.checkpoints for r in reports) == steps
        assert await checkpointer.read_log(tid, "messages", 100) == list(range(2, steps + 2))

    async def test_app_prune_then_resume(self, checkpointer: Checkpointer) -> None:
        from oncegraph import Command

        app = prune_graph(checkpointer)
        tid = new_id("thread")
        cfg = {"thread_id": tid}
        expected: list[str] = []
        for turn in range(4):
            out = await app.ainvoke({"log": [f"u{turn}"]}, cfg)
            expected += [f"u{turn}", "before"]
            assert out["log"] == expected
            if turn < 3:
                out = await app.ainvoke(Command(resume=f"a{turn}"), cfg)
                expected += [f"ask:a{turn}", "after"]
                assert out["log"] == expected
        (open_run,) = await app.aruns(thread_id=tid, limit=1)
        assert open_run.status is RunStatus.INTERRUPTED
        open_cps = await checkpointer.list_checkpoints(tid, run_id=open_run.run_id)
        total = len(await checkpointer.list_checkpoints(tid))
        report = await app.aprune(keep_checkpoints=1, thread_id=tid)
        assert report.checkpoints == total - len(open_cps) > 0
        assert await checkpointer.list_checkpoints(tid) == open_cps
        # a fresh app (no in-process copy of the head) resumes the interrupted run
        again = prune_graph(checkpointer)
        assert (await again.aget_state(cfg)).interrupts[0]["value"] == "approve?"
        out = await again.ainvoke(Command(resume="a3"), cfg)
        expected += ["ask:a3", "after"]
        assert out["log"] == expected
        assert (await again.aget_run(open_run.run_id)).status is RunStatus.COMPLETED
        await again.aprune(thread_id=tid)
        (head,) = await checkpointer.list_checkpoints(tid)
        assert (await again.aget_state(cfg)).values["log"] == expected
        assert head.next == ()

    async def test_app_prune_needs_a_store_that_prunes(self, checkpointer: Checkpointer) -> None:
        app = prune_graph(cast(Checkpointer, WithoutPrune(checkpointer)))
        with pytest.raises(ConfigError, match="prune"):
            await app.aprune()


__all__ = ["PruneConformance"]
