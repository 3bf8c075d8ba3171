"""The pytest-native contract suite every :class:`Checkpointer` backend must pass.

A backend's test module subclasses :class:`CheckpointerConformance` and provides a
``checkpointer`` fixture yielding a set-up store (closing it afterwards)::

    class TestSqlite(CheckpointerConformance):
        @pytest.fixture
        async def checkpointer(self, tmp_path):
            store = SqliteCheckpointer(tmp_path / "db.sqlite")
            await store.setup()
            yield store
            await store.aclose()

        @pytest.fixture
        async def reopen(self, tmp_path):  # optional: enables the durability test
            ...yield an async function returning a NEW set-up store on the same database

Every test uses fresh, random thread and run ids and filters its listings by them, so
the suite may run against a shared database (PostgreSQL) and in parallel. Records use
fixed timestamps where an ordering is asserted, so no test depends on the clock.
"""

from __future__ import annotations

import pytest

from oncegraph.errors import StaleStateError
from oncegraph.storage.protocols import Checkpointer, RequestHashKeys
from oncegraph.storage.records import (
    EffectStatus,
    LogEntry,
    RunStatus,
    StepCommit,
    TaskWrite,
    WriteKind,
)
from oncegraph.testing.conformance_audit import AuditConformance
from oncegraph.testing.conformance_auditchain import AuditChainConformance
from oncegraph.testing.conformance_commits import CommitConformance
from oncegraph.testing.conformance_effects import EffectConformance
from oncegraph.testing.conformance_kit import (
    NESTED,
    PruneState,
    Reopen,
    add_run,
    as_pruner,
    build_history,
    make_checkpoint,
    make_effect,
    make_run,
    new_id,
    prune_graph,
    snapshot,
    start_thread,
    step,
)
from oncegraph.testing.conformance_order import ThreadOrderConformance
from oncegraph.testing.conformance_prune import PruneConformance
from oncegraph.testing.conformance_requests import IdempotencyConformance
from oncegraph.testing.conformance_runs import RunConformance
from oncegraph.testing.conformance_values import ValueConformance


class CheckpointerConformance(
    CommitConformance,
    RunConformance,
    EffectConformance,
    AuditConformance,
    ValueConformance,
    PruneConformance,
    IdempotencyConformance,
    AuditChainConformance,
    ThreadOrderConformance,
):
    """Contract tests for :class:`~oncegraph.storage.protocols.Checkpointer` backends.

    One class to subclass, its tests written by subject in mixins: commits and their
    compare-and-swap (:mod:`.conformance_commits`), runs (:mod:`.conformance_runs`), the
    effect ledger (:mod:`.conformance_effects`), the audit log (:mod:`.conformance_audit`,
    :mod:`.conformance_auditchain`), stored values (:mod:`.conformance_values`), retention
    (:mod:`.conformance_prune`), idempotency keys (:mod:`.conformance_requests`) and a
    thread's run order (:mod:`.conformance_order`); the store's lifecycle is here."""

    @pytest.fixture
    def reopen(self) -> Reopen | None:
        """Override with a factory of NEW set-up stores on the same database to enable
        the durability test; ``None`` (the default) skips it."""
        return None

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


__all__ = [
    "NESTED",
    "CheckpointerConformance",
    "PruneState",
    "Reopen",
    "add_run",
    "as_pruner",
    "build_history",
    "make_checkpoint",
    "make_effect",
    "make_run",
    "new_id",
    "prune_graph",
    "snapshot",
    "start_thread",
    "step",
]
