"""Contract tests of the effect ledger: first writer wins, compare-and-set saves, fenced
writes, taking a run over, run locks, listings and payloads, effects folded into a
commit and planned intents (a part of
:class:`~oncegraph.testing.conformance.CheckpointerConformance`)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from oncegraph.errors import LeaseLostError, RunNotFoundError, StaleStateError
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import (
    Attempt,
    EffectClass,
    EffectRecord,
    EffectStatus,
    RunStatus,
    TaskWrite,
    WriteKind,
)
from oncegraph.testing.conformance_kit import (
    add_run,
    make_checkpoint,
    make_effect,
    new_id,
    start_thread,
    step,
)


class EffectConformance:
    """See the module docstring."""

    # -- effects ----------------------------------------------------------------------

    async def test_begin_effect_first_writer_wins(self, checkpointer: Checkpointer) -> None:
        tid, rid, _ = await start_thread(checkpointer)
        first = make_effect(rid, tid, request={"amount": 10})
        stored, created = await checkpointer.begin_effect(first)
        assert created is True
        assert stored == first
        second = first.replace(
            request_hash="sha256:other", request={"amount": 99}, recipient="someone else"
        )
        stored, created = await checkpointer.begin_effect(second)
        assert created is False
        assert stored == first
        assert stored.request_hash == first.request_hash
        assert await checkpointer.get_effect(first.effect_id) == first

    async def test_begin_effect_racing_one_creates(self, checkpointer: Checkpointer) -> None:
        tid, rid, _ = await start_thread(checkpointer)
        base = make_effect(rid, tid)
        variants = [base.replace(request_hash=f"sha256:{i}", request={"i": i}) for i in range(5)]
        results = await asyncio.gather(*(checkpointer.begin_effect(v) for v in variants))
        assert sum(created for _, created in results) == 1
        winner = next(stored for stored, created in results if created)
        assert all(stored == winner for stored, _ in results)
        assert await checkpointer.get_effect(base.effect_id) == winner

    async def test_save_effect_updates_result_never_request_hash(
        self, checkpointer: Checkpointer
    ) -> None:
        tid, rid, _ = await start_thread(checkpointer)
        effect = make_effect(rid, tid, request={"amount": 10})
        await checkpointer.begin_effect(effect)
        attempts = (
            Attempt(number=1, started_at=3_000.0, ended_at=3_001.0, outcome="timeout"),
            Attempt(number=2, started_at=3_002.0, ended_at=3_003.5, outcome="completed"),
        )
        done = effect.replace(
            status=EffectStatus.COMPLETED,
            attempts=attempts,
            result={"refund_id": "r_1", "amount": 10},
            provider_reference="prov_1",
            error=None,
            updated_at=3_004.0,
            request_hash="sha256:tampered",
            request={"amount": 99},
            row_version=2,
        )
        await checkpointer.save_effect(done)
        got = await checkpointer.get_effect(effect.effect_id)
        assert got is not None
        assert got.status is EffectStatus.COMPLETED
        assert got.attempts == attempts
        assert got.result == {"refund_id": "r_1", "amount": 10}
        assert got.provider_reference == "prov_1"
        assert got.updated_at == 3_004.0
        assert got.request_hash == effect.request_hash
        assert got.request == {"amount": 10}
        assert got.created_at == effect.created_at
        failed = done.replace(
            status=EffectStatus.FAILED, error="declined", result=None, row_version=3
        )
        await checkpointer.save_effect(failed)
        got = await checkpointer.get_effect(effect.effect_id)
        assert got is not None
        assert (got.status, got.error, got.result) == (EffectStatus.FAILED, "declined", None)
        assert got.request_hash == effect.request_hash

    async def test_save_effect_never_begun_is_recorded(self, checkpointer: Checkpointer) -> None:
        tid, rid, _ = await start_thread(checkpointer)
        effect = make_effect(rid, tid, status=EffectStatus.COMPLETED, result={"ok": True})
        await checkpointer.save_effect(effect)
        assert await checkpointer.get_effect(effect.effect_id) == effect
        with pytest.raises(StaleStateError):  # a second "first write" is stale
            await checkpointer.save_effect(effect.replace(result={"ok": False}))
        assert await checkpointer.get_effect(effect.effect_id) == effect

    async def test_save_effect_is_a_compare_and_set_on_the_row_version(
        self, checkpointer: Checkpointer
    ) -> None:
        tid, rid, _ = await start_thread(checkpointer)
        effect = make_effect(rid, tid)
        await checkpointer.begin_effect(effect)  # row version 1
        second = effect.replace(attempts=(*effect.attempts, Attempt(2, 3_010.0)), row_version=2)
        await checkpointer.save_effect(second)
        # A writer that read version 1 too (it would start attempt 2 as well) loses.
        rival = effect.replace(status=EffectStatus.COMPLETED, result="rival", row_version=2)
        with pytest.raises(StaleStateError, match="changed since it was read"):
            await checkpointer.save_effect(rival)
        for stale in (1, 2, 4):  # not the next version (3): refused, nothing written
            with pytest.raises(StaleStateError):
                await checkpointer.save_effect(second.replace(result=stale, row_version=stale))
        assert await checkpointer.get_effect(effect.effect_id) == second
        # Concurrent writers of the same next version: exactly one wins.
        tries = [second.replace(result=i, row_version=3) for i in range(5)]
        outcomes = await asyncio.gather(
            *(checkpointer.save_effect(t) for t in tries), return_exceptions=True
        )
        assert sum(o is None for o in outcomes) == 1
        assert all(isinstance(o, StaleStateError) for o in outcomes if o is not None)
        got = await checkpointer.get_effect(effect.effect_id)
        assert got is not None and got.row_version == 3 and got.result in range(5)

    async def test_fenced_effect_and_task_writes(self, checkpointer: Checkpointer) -> None:
        tid, _, cp = await start_thread(checkpointer)
        run_b = await add_run(checkpointer, tid, fencing_token=4)
        effect = make_effect(run_b, tid)
        with pytest.raises(LeaseLostError):
            await checkpointer.begin_effect(effect, fence=3)
        assert await checkpointer.get_effect(effect.effect_id) is None
        stored, created = await checkpointer.begin_effect(effect, fence=4)
        assert created and stored == effect
        with pytest.raises(LeaseLostError):  # an existing record is not returned to it
            await checkpointer.begin_effect(effect, fence=3)
        done = effect.replace(status=EffectStatus.COMPLETED, result="ok", row_version=2)
        with pytest.raises(LeaseLostError):
            await checkpointer.save_effect(done, fence=3)
        assert await checkpointer.get_effect(effect.effect_id) == effect
        await checkpointer.save_effect(done, fence=4)
        assert await checkpointer.get_effect(effect.effect_id) == done
        write = TaskWrite(tid, cp.checkpoint_id, "agent", WriteKind.WRITES, 0, {"update": {}})
        with pytest.raises(LeaseLostError):
            await checkpointer.put_task_write(write, run_id=run_b, fence=5)
        with pytest.raises(RunNotFoundError):
            await checkpointer.put_task_write(write, run_id=new_id("run"), fence=1)
        assert await checkpointer.get_task_writes(tid, cp.checkpoint_id) == []
        await checkpointer.put_task_write(write, run_id=run_b, fence=4)
        assert [w.task for w in await checkpointer.get_task_writes(tid, cp.checkpoint_id)] == [
            "agent"
        ]
        with pytest.raises(RunNotFoundError):
            await checkpointer.begin_effect(make_effect(new_id("run"), tid), fence=1)

    async def test_fence_run_takes_a_run_over_by_compare_and_set(
        self, checkpointer: Checkpointer
    ) -> None:
        tid, _, _ = await start_thread(checkpointer)
        run_id = await add_run(checkpointer, tid, fencing_token=2)
        taken = await checkpointer.fence_run(
            run_id, expected_token=2, owner="host:1:a", status=RunStatus.RUNNING
        )
        assert taken is not None
        assert (taken.fencing_token, taken.lease_owner, taken.status) == (
            3,
            "host:1:a",
            RunStatus.RUNNING,
        )
        assert taken.lease_expires_at is None
        assert await checkpointer.get_run(run_id) == taken
        # a second taker that read token 2 too loses, and writes nothing
        assert await checkpointer.fence_run(run_id, expected_token=2, owner="other") is None
        assert await checkpointer.get_run(run_id) == taken
        # without a status, the status and error stay
        again = await checkpointer.fence_run(run_id, expected_token=3, owner="op")
        assert again is not None and again.status is RunStatus.RUNNING
        assert again.fencing_token == 4 and again.lease_owner == "op"
        stopped = await checkpointer.fence_run(
            run_id, expected_token=4, owner="op", status=RunStatus.ABANDONED, error="no"
        )
        assert stopped is not None and (stopped.status, stopped.error) == (
            RunStatus.ABANDONED,
            "no",
        )
        # the old holder's writes are fenced out
        with pytest.raises(LeaseLostError):
            await checkpointer.update_run(run_id, status=RunStatus.COMPLETED, fence=3)
        with pytest.raises(RunNotFoundError):
            await checkpointer.fence_run(new_id("run"), expected_token=0, owner="x")
        racers = await asyncio.gather(
            *(checkpointer.fence_run(run_id, expected_token=5, owner=f"r{i}") for i in range(5))
        )
        assert sum(r is not None for r in racers) == 1

    async def test_lock_run_is_exclusive_and_released(self, checkpointer: Checkpointer) -> None:
        first = await checkpointer.lock_run("run_locked")
        assert first is not None and first.run_id == "run_locked" and not first.lost
        assert await checkpointer.lock_run("run_locked") is None  # held, in this process too
        other = await checkpointer.lock_run("run_other")
        assert other is not None  # locks are per run
        await first.release()
        await first.release()  # idempotent
        again = await checkpointer.lock_run("run_locked")
        assert again is not None
        await again.release()
        await other.release()

    async def test_list_effects_by_run_thread_status_in_creation_order(
        self, checkpointer: Checkpointer
    ) -> None:
        tid, run_a, _ = await start_thread(checkpointer)
        run_b = await add_run(checkpointer, tid)
        other_tid, run_c, _ = await start_thread(checkpointer)
        specs = [  # (run, status, created_at) - inserted out of creation order
            (run_a, EffectStatus.PENDING, 3_005.0),
            (run_a, EffectStatus.COMPLETED, 3_001.0),
            (run_b, EffectStatus.ACCEPTED, 3_003.0),
            (run_a, EffectStatus.FAILED, 3_002.0),
            (run_b, EffectStatus.COMPLETED, 3_004.0),
        ]
        effects = [
            make_effect(r, tid, f"msg:{i}", status=s, created_at=c)
            for i, (r, s, c) in enumerate(specs)
        ]
        for e in effects:
            await checkpointer.begin_effect(e)
        await checkpointer.begin_effect(make_effect(run_c, other_tid, created_at=3_000.5))

        def order(*idx: int) -> list[EffectRecord]:
            return [effects[i] for i in idx]

        assert await checkpointer.list_effects(run_id=run_a) == order(1, 3, 0)
        assert await checkpointer.list_effects(run_id=run_b) == order(2, 4)
        assert await checkpointer.list_effects(thread_id=tid) == order(1, 3, 2, 4, 0)
        done = await checkpointer.list_effects(thread_id=tid, statuses=[EffectStatus.COMPLETED])
        assert done == order(1, 4)
        unsure = await checkpointer.list_effects(
            run_id=run_b, statuses=[EffectStatus.PENDING, EffectStatus.ACCEPTED]
        )
        assert unsure == order(2)
        assert await checkpointer.list_effects(run_id=run_a, thread_id=other_tid) == []
        # pages: limit and offset over the same order, without gaps or repeats
        assert await checkpointer.list_effects(thread_id=tid, limit=2) == order(1, 3)
        assert await checkpointer.list_effects(thread_id=tid, limit=2, offset=2) == order(2, 4)
        assert await checkpointer.list_effects(thread_id=tid, limit=2, offset=4) == order(0)
        assert await checkpointer.list_effects(thread_id=tid, offset=3) == order(4, 0)
        assert await checkpointer.list_effects(thread_id=tid, limit=0) == []

    async def test_effect_payloads_are_the_listed_effects_type_request_and_result(
        self, checkpointer: Checkpointer
    ) -> None:
        """What masking reads: each effect's type, request and result, in the order and
        with the filters of list_effects, and no result when not asked for one."""
        tid, run_a, _ = await start_thread(checkpointer)
        run_b = await add_run(checkpointer, tid)
        other_tid, run_c, _ = await start_thread(checkpointer)
        late = make_effect(run_a, tid, "msg:0", request={"card": "4242 4242"}, created_at=3_009.0)
        early = make_effect(run_b, tid, "msg:1", request=["a", {"b": 2}], created_at=3_001.0)
        middle = make_effect(run_a, tid, "msg:2", created_at=3_004.0).replace(effect_type="model")
        for e in (late, early, middle):
            await checkpointer.begin_effect(e)
        await checkpointer.begin_effect(make_effect(run_c, other_tid, created_at=3_000.5))
        done = early.replace(
            status=EffectStatus.COMPLETED, result={"tool_calls": [1]}, row_version=2
        )
        await checkpointer.save_effect(done)

        def payloads(records: list[EffectRecord], results: bool = True) -> list[Any]:
            return [(r.effect_type, r.request, r.result if results else None) for r in records]

        mine = await checkpointer.list_effects(thread_id=tid)
        assert [e.effect_id for e in mine] == [early.effect_id, middle.effect_id, late.effect_id]
        found = await checkpointer.list_effect_payloads(thread_id=tid)
        assert [tuple(p) for p in found] == payloads(mine)
        assert found[0].result == {"tool_calls": [1]} and found[1].effect_type == "model"
        bare = await checkpointer.list_effect_payloads(thread_id=tid, results=False)
        assert [tuple(p) for p in bare] == payloads(mine, results=False)
        by_run = await checkpointer.list_effect_payloads(run_id=run_a)
        assert [tuple(p) for p in by_run] == payloads(await checkpointer.list_effects(run_id=run_a))
        assert len(by_run) == 2
        assert await checkpointer.list_effect_payloads(run_id=run_a, thread_id=other_tid) == []
        # several threads in one read: their effects, in list_effects order across them
        both = await checkpointer.list_effect_payloads(thread_ids=[other_tid, tid, "t-none"])
        everyone = [e for e in await checkpointer.list_effects() if e.thread_id in (tid, other_tid)]
        assert [tuple(p) for p in both] == payloads(everyone) and len(both) == 4
        assert await checkpointer.list_effect_payloads(thread_ids=[]) == []
        assert await checkpointer.list_effect_payloads(thread_ids=["t-none"]) == []

    async def test_folded_effects_saved_in_commit(self, checkpointer: Checkpointer) -> None:
        tid, rid, cp1 = await start_thread(checkpointer)
        pending = make_effect(rid, tid)
        await checkpointer.begin_effect(pending)
        folded_new = make_effect(rid, tid, "msg_1:call_2", status=EffectStatus.COMPLETED)
        cp2 = make_checkpoint(tid, rid, 2, parent=cp1.checkpoint_id)
        done = pending.replace(
            status=EffectStatus.COMPLETED,
            result={"ok": 1},
            provider_reference="p1",
            checkpoint_id=cp2.checkpoint_id,
            request_hash="sha256:ignored",
        )
        await checkpointer.commit(step(cp2, effects=[done, folded_new]))
        got = await checkpointer.get_effect(pending.effect_id)
        assert got is not None
        assert (got.status, got.result, got.provider_reference) == (
            EffectStatus.COMPLETED,
            {"ok": 1},
            "p1",
        )
        assert got.request_hash == pending.request_hash
        assert await checkpointer.get_effect(folded_new.effect_id) == folded_new

    async def test_planned_intents_are_inserted_never_overwriting(
        self, checkpointer: Checkpointer
    ) -> None:
        tid, rid, cp1 = await start_thread(checkpointer)
        done = make_effect(rid, tid, "msg_1:call_1", status=EffectStatus.COMPLETED)
        await checkpointer.begin_effect(done.replace(row_version=1))
        again = done.replace(status=EffectStatus.PENDING, attempts=(), row_version=1)
        # a planned intent: a write call's, nothing attempted yet (oncegraph.ledger.planned)
        planned = make_effect(rid, tid, "msg_2:call_1").replace(
            attempts=(), effect_class=EffectClass.WRITE
        )
        cp2 = make_checkpoint(tid, rid, 2, parent=cp1.checkpoint_id)
        inserted = await checkpointer.commit(step(cp2, intents=[planned, again]))
        # it says how many it inserted (None: cannot tell), never more than it did
        assert inserted in (1, None), "one of the two intents was new"
        assert await checkpointer.get_effect(planned.effect_id) == planned
        kept = await checkpointer.get_effect(done.effect_id)
        assert kept is not None and kept.status is EffectStatus.COMPLETED, "never overwritten"
        # a lost CAS writes no intent either
        late = make_effect(rid, tid, "msg_3:call_1").replace(
            attempts=(), effect_class=EffectClass.WRITE
        )
        stale = make_checkpoint(tid, rid, 2, parent=cp1.checkpoint_id)
        with pytest.raises(StaleStateError):
            await checkpointer.commit(step(stale, intents=[late]))
        assert await checkpointer.get_effect(late.effect_id) is None


__all__ = ["EffectConformance"]
