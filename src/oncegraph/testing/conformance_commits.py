"""Contract tests of the protocol's shape, the store's lifecycle, the step commit and its
compare-and-swap, logs, checkpoint listings and task writes (a part of
:class:`~oncegraph.testing.conformance.CheckpointerConformance`)."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from oncegraph.errors import ConfigError, StaleStateError, StorageError
from oncegraph.storage.protocols import Checkpointer, RequestHashKeys
from oncegraph.storage.records import (
    EffectStatus,
    LogEntry,
    RunStatus,
    StepCommit,
    TaskWrite,
    WriteKind,
)
from oncegraph.testing.conformance_kit import (
    Reopen,
    make_checkpoint,
    make_effect,
    make_run,
    new_id,
    snapshot,
    start_thread,
    step,
)


class CommitConformance:
    """See the module docstring."""

    # -- protocol ---------------------------------------------------------------------

    async def test_is_a_checkpointer(self, checkpointer: Checkpointer) -> None:
        assert isinstance(checkpointer, Checkpointer)

    async def test_unknown_ids_read_as_empty(self, checkpointer: Checkpointer) -> None:
        tid = new_id("thread")
        assert await checkpointer.get_thread(tid) is None
        assert await checkpointer.get_checkpoint(tid) is None
        assert await checkpointer.get_checkpoint(tid, "cp_missing") is None
        assert await checkpointer.list_checkpoints(tid) == []
        assert await checkpointer.read_log(tid, "messages", 10) == []
        assert await checkpointer.get_task_writes(tid, "cp_missing") == []
        assert await checkpointer.get_run(new_id("run")) is None
        assert await checkpointer.list_runs(thread_id=tid) == []
        assert await checkpointer.get_effect(new_id("eff")) is None
        assert await checkpointer.list_effects(thread_id=tid) == []

    # -- lifecycle --------------------------------------------------------------------

    async def test_async_with_sets_up_and_closes(self, checkpointer: Checkpointer) -> None:
        async with checkpointer as store:  # type: ignore[attr-defined]
            assert store is checkpointer
            tid, _, _ = await start_thread(store)
        # closed on exit; the store opens again on its next use, with the data kept
        thread = await checkpointer.get_thread(tid)
        assert thread is not None and thread.version == 1

    async def test_setup_twice_is_harmless(self, checkpointer: Checkpointer) -> None:
        tid, rid, cp = await start_thread(checkpointer)
        await checkpointer.setup()
        await checkpointer.setup()
        assert await checkpointer.get_checkpoint(tid) == cp
        cp2 = make_checkpoint(tid, rid, 2, parent=cp.checkpoint_id)
        await checkpointer.commit(step(cp2))
        assert await checkpointer.get_checkpoint(tid) == cp2

    async def test_closed_store_can_be_set_up_again(self, checkpointer: Checkpointer) -> None:
        tid, rid, cp = await start_thread(checkpointer)
        await checkpointer.aclose()
        await checkpointer.aclose()  # closing twice is harmless
        await checkpointer.setup()
        assert await checkpointer.get_checkpoint(tid) == cp
        cp2 = make_checkpoint(tid, rid, 2, parent=cp.checkpoint_id)
        await checkpointer.commit(step(cp2))
        thread = await checkpointer.get_thread(tid)
        assert thread is not None and thread.version == 2

    async def test_request_hash_key_is_stable_and_shared(
        self, checkpointer: Checkpointer, reopen: Reopen | None
    ) -> None:
        """The ledger's request hashes are keyed by the store (guarantee 6 across processes):
        the key is secret-sized, never changes, and every instance on one database has it."""
        assert isinstance(checkpointer, RequestHashKeys)
        key = await checkpointer.request_hash_key()
        assert isinstance(key, bytes) and len(key) >= 16
        assert await checkpointer.request_hash_key() == key
        if reopen is not None:
            other = await reopen()
            assert isinstance(other, RequestHashKeys)
            assert await other.request_hash_key() == key

    async def test_durable_across_instances(
        self, checkpointer: Checkpointer, reopen: Reopen | None
    ) -> None:
        if reopen is None:
            pytest.skip("this backend keeps nothing across instances (no `reopen` fixture)")
        tid, rid, cp1 = await start_thread(checkpointer, log=[LogEntry("messages", 0, "hello")])
        cp2 = make_checkpoint(tid, rid, 2, parent=cp1.checkpoint_id, logs={"messages": 1})
        effect = make_effect(rid, tid)
        await checkpointer.begin_effect(effect)
        done = effect.replace(status=EffectStatus.COMPLETED, result={"id": 1})
        await checkpointer.commit(step(cp2, effects=[done], run_status=RunStatus.INTERRUPTED))
        write = TaskWrite(tid, cp2.checkpoint_id, "tools", WriteKind.INTERRUPT, 0, "approve?")
        await checkpointer.put_task_write(write)
        queued = make_run(tid, status=RunStatus.QUEUED, created_at=5_000.0)
        await checkpointer.create_run(queued)
        other = await reopen()
        assert other is not checkpointer
        thread = await other.get_thread(tid)
        assert thread is not None
        assert (thread.version, thread.head_checkpoint_id) == (2, cp2.checkpoint_id)
        assert await other.get_checkpoint(tid) == cp2
        assert await other.list_checkpoints(tid) == [cp2, cp1]
        assert await other.read_log(tid, "messages", 1) == ["hello"]
        assert await other.get_task_writes(tid, cp2.checkpoint_id) == [write]
        assert await other.get_effect(effect.effect_id) == done
        run = await other.get_run(rid)
        assert run is not None and run.status is RunStatus.INTERRUPTED
        assert await other.get_run(queued.run_id) == queued
        # and the new instance continues the CAS chain where the old one stopped
        cp3 = make_checkpoint(tid, rid, 3, parent=cp2.checkpoint_id)
        with pytest.raises(StaleStateError):
            await other.commit(
                StepCommit(
                    thread_id=tid,
                    expected_version=1,
                    checkpoint=make_checkpoint(tid, rid, 2),
                )
            )
        await other.commit(step(cp3))
        assert await checkpointer.get_checkpoint(tid) == cp3

    # -- commit and CAS ---------------------------------------------------------------

    async def test_commit_new_thread(self, checkpointer: Checkpointer) -> None:
        tid, rid, cp = await start_thread(checkpointer)
        thread = await checkpointer.get_thread(tid)
        assert thread is not None
        assert (thread.version, thread.head_checkpoint_id) == (1, cp.checkpoint_id)
        assert await checkpointer.get_checkpoint(tid) == cp
        assert await checkpointer.get_checkpoint(tid, cp.checkpoint_id) == cp
        run = await checkpointer.get_run(rid)
        assert run is not None
        assert (run.thread_id, run.status) == (tid, RunStatus.RUNNING)

    async def test_commit_moves_head_and_version(self, checkpointer: Checkpointer) -> None:
        tid, rid, cp1 = await start_thread(checkpointer)
        cp2 = make_checkpoint(tid, rid, 2, parent=cp1.checkpoint_id, values={"count": 2})
        await checkpointer.commit(step(cp2))
        cp3 = make_checkpoint(tid, rid, 3, parent=cp2.checkpoint_id, next_nodes=())
        await checkpointer.commit(step(cp3))
        thread = await checkpointer.get_thread(tid)
        assert thread is not None
        assert (thread.version, thread.head_checkpoint_id) == (3, cp3.checkpoint_id)
        assert await checkpointer.get_checkpoint(tid) == cp3
        assert await checkpointer.get_checkpoint(tid, cp1.checkpoint_id) == cp1
        assert await checkpointer.get_checkpoint(tid, cp2.checkpoint_id) == cp2

    async def test_checkpoint_of_another_thread_is_not_found(
        self, checkpointer: Checkpointer
    ) -> None:
        _, _, cp = await start_thread(checkpointer)
        other, _, _ = await start_thread(checkpointer)
        assert await checkpointer.get_checkpoint(other, cp.checkpoint_id) is None

    async def test_commit_applies_run_status_and_error(self, checkpointer: Checkpointer) -> None:
        tid, rid, cp1 = await start_thread(checkpointer)
        cp2 = make_checkpoint(tid, rid, 2, parent=cp1.checkpoint_id)
        await checkpointer.commit(step(cp2, run_status=RunStatus.FAILED, run_error="boom"))
        run = await checkpointer.get_run(rid)
        assert run is not None
        assert (run.status, run.error) == (RunStatus.FAILED, "boom")

    async def test_stale_cas_raises_and_writes_nothing(self, checkpointer: Checkpointer) -> None:
        tid, rid, cp1 = await start_thread(
            checkpointer, log=[LogEntry("messages", 0, {"role": "user", "content": "hi"})]
        )
        effect = make_effect(rid, tid)
        await checkpointer.begin_effect(effect)
        await checkpointer.put_task_write(
            TaskWrite(tid, cp1.checkpoint_id, "tools", WriteKind.WRITES, 0, {"x": 1})
        )
        before = await snapshot(checkpointer, tid, [rid])
        other_run = new_id("run")
        for stale in (0, 5):
            cp = make_checkpoint(tid, rid, stale + 1, parent=cp1.checkpoint_id)
            with pytest.raises(StaleStateError):
                await checkpointer.commit(
                    StepCommit(
                        thread_id=tid,
                        expected_version=stale,
                        checkpoint=cp,
                        log=[LogEntry("messages", 1, {"role": "ai", "content": "stale"})],
                        new_run=make_run(tid, other_run),
                        run_status=RunStatus.COMPLETED,
                        run_error="stale",
                        effects=[effect.replace(status=EffectStatus.COMPLETED, result="stale")],
                        clear_task_writes_of=cp1.checkpoint_id,
                    )
                )
            assert await checkpointer.get_checkpoint(tid, cp.checkpoint_id) is None
        assert await checkpointer.get_run(other_run) is None
        assert await snapshot(checkpointer, tid, [rid]) == before
        assert await checkpointer.read_log(tid, "messages", 5) == [
            {"role": "user", "content": "hi"}
        ]

    async def test_racing_writers_exactly_one_wins(self, checkpointer: Checkpointer) -> None:
        tid, rid, cp1 = await start_thread(checkpointer)
        candidates = [
            make_checkpoint(tid, rid, 2, parent=cp1.checkpoint_id, values={"writer": i})
            for i in range(6)
        ]
        results = await asyncio.gather(
            *(
                checkpointer.commit(
                    StepCommit(
                        thread_id=tid,
                        expected_version=1,
                        checkpoint=cp,
                        log=[LogEntry("messages", 0, {"writer": i})],
                    )
                )
                for i, cp in enumerate(candidates)
            ),
            return_exceptions=True,
        )
        winners = [i for i, r in enumerate(results) if not isinstance(r, BaseException)]
        assert len(winners) == 1, results
        lost = [r for r in results if isinstance(r, BaseException)]
        assert all(isinstance(r, StaleStateError) for r in lost), results
        thread = await checkpointer.get_thread(tid)
        assert thread is not None and thread.version == 2
        assert thread.head_checkpoint_id == candidates[winners[0]].checkpoint_id
        assert await checkpointer.read_log(tid, "messages", 5) == [{"writer": winners[0]}]
        assert len(await checkpointer.list_checkpoints(tid)) == 2

    async def test_racing_new_threads_exactly_one_wins(self, checkpointer: Checkpointer) -> None:
        tid = new_id("thread")
        commits = []
        for _ in range(4):
            rid = new_id("run")
            commits.append(
                StepCommit(
                    thread_id=tid,
                    expected_version=0,
                    checkpoint=make_checkpoint(tid, rid, 1),
                    new_run=make_run(tid, rid),
                )
            )
        results = await asyncio.gather(
            *(checkpointer.commit(c) for c in commits), return_exceptions=True
        )
        assert sum(not isinstance(r, BaseException) for r in results) == 1, results
        lost = [r for r in results if isinstance(r, BaseException)]
        assert all(isinstance(r, StaleStateError) for r in lost), results
        assert len(await checkpointer.list_runs(thread_id=tid)) == 1

    async def test_malformed_commit_is_rejected(self, checkpointer: Checkpointer) -> None:
        tid, rid, _ = await start_thread(checkpointer)
        wrong_version = make_checkpoint(tid, rid, 5)
        with pytest.raises(ConfigError):
            await checkpointer.commit(
                StepCommit(thread_id=tid, expected_version=1, checkpoint=wrong_version)
            )
        other_thread = make_checkpoint(new_id("thread"), rid, 2)
        with pytest.raises(ConfigError):
            await checkpointer.commit(
                StepCommit(thread_id=tid, expected_version=1, checkpoint=other_thread)
            )
        thread = await checkpointer.get_thread(tid)
        assert thread is not None and thread.version == 1

    async def test_unserializable_value_writes_nothing(self, checkpointer: Checkpointer) -> None:
        tid, rid, _ = await start_thread(checkpointer)
        before = await snapshot(checkpointer, tid, [rid])
        bad = make_checkpoint(tid, rid, 2, values={"x": object()})
        with pytest.raises(ConfigError):
            await checkpointer.commit(step(bad))
        bad_log = make_checkpoint(tid, rid, 2)
        with pytest.raises(ConfigError):
            await checkpointer.commit(
                step(
                    bad_log, log=[LogEntry("messages", 0, "ok"), LogEntry("messages", 1, object())]
                )
            )
        assert await snapshot(checkpointer, tid, [rid]) == before
        # the store is still usable at the same version
        good = make_checkpoint(tid, rid, 2)
        await checkpointer.commit(step(good))
        assert await checkpointer.get_checkpoint(tid) == good

    async def test_duplicate_checkpoint_id_writes_nothing(self, checkpointer: Checkpointer) -> None:
        tid, rid, cp1 = await start_thread(checkpointer)
        before = await snapshot(checkpointer, tid, [rid])
        dup = dataclasses.replace(make_checkpoint(tid, rid, 2), checkpoint_id=cp1.checkpoint_id)
        with pytest.raises(StorageError):
            await checkpointer.commit(
                StepCommit(
                    thread_id=tid,
                    expected_version=1,
                    checkpoint=dup,
                    log=[LogEntry("messages", 0, "x")],
                )
            )
        assert await snapshot(checkpointer, tid, [rid]) == before

    # -- logs -------------------------------------------------------------------------

    async def test_log_entries_appended_and_read_by_end(self, checkpointer: Checkpointer) -> None:
        m = [{"role": "user", "content": f"m{i}"} for i in range(5)]
        tid, rid, cp1 = await start_thread(
            checkpointer,
            log=[LogEntry("messages", 0, m[0]), LogEntry("messages", 1, m[1])],
        )
        cp2 = make_checkpoint(
            tid, rid, 2, parent=cp1.checkpoint_id, logs={"messages": 5, "events": 1}
        )
        await checkpointer.commit(
            step(
                cp2,
                log=[
                    LogEntry("messages", 2, m[2]),
                    LogEntry("messages", 3, m[3]),
                    LogEntry("messages", 4, m[4]),
                    LogEntry("events", 0, "started"),
                ],
            )
        )
        assert await checkpointer.read_log(tid, "messages", 5) == m
        assert await checkpointer.read_log(tid, "messages", 2) == m[:2]
        assert await checkpointer.read_log(tid, "messages", 100) == m
        assert await checkpointer.read_log(tid, "messages", 0) == []
        assert await checkpointer.read_log(tid, "events", 1) == ["started"]
        assert await checkpointer.read_log(tid, "nothing", 3) == []
        head = await checkpointer.get_checkpoint(tid)
        assert head is not None
        assert dict(head.logs) == {"messages": 5, "events": 1}
        assert "messages" not in head.values  # a checkpoint stores counts, not entries

    async def test_log_entry_is_never_rewritten(self, checkpointer: Checkpointer) -> None:
        tid, rid, cp1 = await start_thread(checkpointer, log=[LogEntry("messages", 0, "first")])
        before = await snapshot(checkpointer, tid, [rid])
        cp2 = make_checkpoint(tid, rid, 2, parent=cp1.checkpoint_id)
        with pytest.raises(StorageError):
            await checkpointer.commit(
                step(cp2, log=[LogEntry("messages", 1, "new"), LogEntry("messages", 0, "rewrite")])
            )
        assert await snapshot(checkpointer, tid, [rid]) == before
        assert await checkpointer.read_log(tid, "messages", 5) == ["first"]

    # -- checkpoint listings ----------------------------------------------------------

    async def test_list_checkpoints_newest_first_and_by_run(
        self, checkpointer: Checkpointer
    ) -> None:
        tid, run_a, cp1 = await start_thread(checkpointer)
        cp2 = make_checkpoint(tid, run_a, 2, parent=cp1.checkpoint_id)
        await checkpointer.commit(step(cp2))
        run_b = new_id("run")
        cp3 = make_checkpoint(tid, run_b, 3, parent=cp2.checkpoint_id)
        cp4 = make_checkpoint(tid, run_b, 4, parent=cp3.checkpoint_id)
        await checkpointer.commit(step(cp3, new_run=make_run(tid, run_b)))
        await checkpointer.commit(step(cp4))
        ids = [c.checkpoint_id for c in await checkpointer.list_checkpoints(tid)]
        assert ids == [cp4.checkpoint_id, cp3.checkpoint_id, cp2.checkpoint_id, cp1.checkpoint_id]
        by_a = await checkpointer.list_checkpoints(tid, run_id=run_a)
        assert [c.checkpoint_id for c in by_a] == [cp2.checkpoint_id, cp1.checkpoint_id]
        by_b = await checkpointer.list_checkpoints(tid, run_id=run_b, limit=1)
        assert by_b == [cp4]
        limited = await checkpointer.list_checkpoints(tid, limit=2)
        assert [c.version for c in limited] == [4, 3]
        assert await checkpointer.list_checkpoints(tid, run_id=new_id("run")) == []
        # the next page after a checkpoint: only lower versions
        after = await checkpointer.list_checkpoints(
            tid, limit=2, before_version=limited[-1].version
        )
        assert [c.version for c in after] == [2, 1]
        assert await checkpointer.list_checkpoints(tid, before_version=1) == []
        by_b_older = await checkpointer.list_checkpoints(tid, run_id=run_b, before_version=4)
        assert by_b_older == [cp3]

    # -- task writes ------------------------------------------------------------------

    async def test_task_writes_put_replace_get_ordered_and_cleared(
        self, checkpointer: Checkpointer
    ) -> None:
        tid, rid, cp1 = await start_thread(checkpointer)
        cid = cp1.checkpoint_id
        puts = [
            TaskWrite(tid, cid, "tools", WriteKind.WRITES, 1, {"b": 1}, created_at=1.0),
            TaskWrite(tid, cid, "agent", WriteKind.WRITES, 0, {"a": 1}, created_at=2.0),
            TaskWrite(tid, cid, "tools", WriteKind.INTERRUPT, 0, "ask?", created_at=3.0),
            TaskWrite(tid, cid, "tools", WriteKind.WRITES, 0, {"c": 1}, created_at=4.0),
        ]
        for w in puts:
            await checkpointer.put_task_write(w)
        await checkpointer.put_task_write(
            TaskWrite(tid, "cp_other", "agent", WriteKind.WRITES, 0, 1)
        )
        got = await checkpointer.get_task_writes(tid, cid)
        assert [(w.task, w.kind, w.idx) for w in got] == [
            ("agent", "writes", 0),
            ("tools", "interrupt", 0),
            ("tools", "writes", 0),
            ("tools", "writes", 1),
        ]
        assert got[0] == puts[1]
        replaced = TaskWrite(
            tid, cid, "tools", WriteKind.INTERRUPT, 0, {"answer": "yes"}, created_at=9.0
        )
        await checkpointer.put_task_write(replaced)
        got = await checkpointer.get_task_writes(tid, cid)
        assert len(got) == 4
        assert got[1] == replaced
        cp2 = make_checkpoint(tid, rid, 2, parent=cid)
        await checkpointer.commit(step(cp2, clear_task_writes_of=cid))
        assert await checkpointer.get_task_writes(tid, cid) == []
        assert len(await checkpointer.get_task_writes(tid, "cp_other")) == 1


__all__ = ["CommitConformance"]
