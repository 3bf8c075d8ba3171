"""Contract tests of the audit log: appended and listed newest first, by app and tenant,
paged by record, and written with its change or not at all (a part of
:class:`~oncegraph.testing.conformance.CheckpointerConformance`)."""

from __future__ import annotations

import dataclasses

import pytest

from oncegraph.errors import StaleStateError, StorageError
from oncegraph.storage.protocols import Checkpointer, Pruner
from oncegraph.storage.records import AuditRecord
from oncegraph.testing.conformance_kit import add_run, make_effect, make_run, new_id, start_thread


class AuditConformance:
    """See the module docstring."""

    async def test_audit_is_appended_and_listed_newest_first(
        self, checkpointer: Checkpointer
    ) -> None:
        tid, rid, _ = await start_thread(checkpointer)
        made = [
            AuditRecord(
                audit_id=new_id("aud"),
                actor=f"op{i}",
                action="continue" if i % 2 else "resolve_effect",
                target_kind="run",
                target_id=rid if i < 3 else "eff_x",
                run_id=rid,
                thread_id=tid,
                reason=f"because {i}",
                details={"before": "failed", "i": i},
                at=5_000.0 + i,
            )
            for i in range(5)
        ]
        for record in made:
            await checkpointer.append_audit(record)
        with pytest.raises(StorageError):  # never replaced
            await checkpointer.append_audit(dataclasses.replace(made[0], reason="rewritten"))
        got = await checkpointer.list_audit(run_id=rid)
        assert got == list(reversed(made))
        assert await checkpointer.list_audit(thread_id=tid, limit=2) == [made[4], made[3]]
        assert await checkpointer.list_audit(target_id="eff_x") == [made[4], made[3]]
        assert await checkpointer.list_audit(run_id=rid, before=5_002.0) == [made[1], made[0]]
        assert await checkpointer.list_audit(run_id=new_id("run")) == []
        if isinstance(checkpointer, Pruner):
            await checkpointer.prune(keep_checkpoints=1, effects_older_than=0)
        assert len(await checkpointer.list_audit(run_id=rid)) == 5  # a prune keeps them

    async def test_audit_is_listed_for_an_app_and_a_tenant(
        self, checkpointer: Checkpointer
    ) -> None:
        """``list_audit(app_id=..., tenant=...)``: the records whose run is that app's
        (and that tenant's; a run with no tenant is none's), and those with no run or
        whose run the store does not hold, newest first and cut at the limit after the
        filter, however many newer records other apps wrote."""
        app, other, tenant = new_id("app"), new_id("app"), new_id("tenant")
        runs = [
            make_run(new_id("thread"), workflow_name=app, tenant=tenant),
            make_run(new_id("thread"), workflow_name=app),
            make_run(new_id("thread"), workflow_name=other, tenant=tenant),
        ]
        for run in runs:
            await checkpointer.create_run(run)
        owners = [0, 1, None, "gone", *[2] * 6]  # the newest six are the other app's

        def run_of(owner: int | str | None) -> str | None:
            if owner is None or owner == "gone":  # no run; a run the store does not hold
                return None if owner is None else new_id("run")
            return runs[int(owner)].run_id

        made = [
            AuditRecord(
                audit_id=new_id("aud"),
                actor="op",
                action="continue",
                target_kind="run",
                target_id=f"target-{i}",
                run_id=run_of(owner),
                at=6_000.0 + i,
            )
            for i, owner in enumerate(owners)
        ]
        for record in made:
            await checkpointer.append_audit(record)
        newest = made[::-1]
        assert await checkpointer.list_audit(app_id=app, limit=3) == [made[3], made[2], made[1]]
        assert await checkpointer.list_audit(app_id=app) == [made[3], made[2], made[1], made[0]]
        assert await checkpointer.list_audit(app_id=app, tenant=tenant) == [
            made[3],
            made[2],
            made[0],
        ]
        assert await checkpointer.list_audit(app_id=app, before=6_003.0, limit=1) == [made[2]]
        assert await checkpointer.list_audit(app_id=other, limit=2) == newest[:2]
        assert await checkpointer.list_audit(tenant=tenant, limit=100) == [
            r for r in newest if owners[made.index(r)] in (0, 2, None, "gone")
        ]
        assert await checkpointer.list_audit(app_id=app, target_id="target-0") == [made[0]]

    async def test_audit_pages_by_record_keep_records_of_one_instant(
        self, checkpointer: Checkpointer
    ) -> None:
        """``before=(at, audit_id)`` lists the records after that record in the log's
        order (``at``, then ``audit_id``, newest first): page after page, records written
        in one instant are neither skipped nor repeated; ``before=at`` gives the older
        records only."""
        tid, rid, _ = await start_thread(checkpointer)
        made = [
            AuditRecord(
                audit_id=f"{new_id('aud')}-{i}",
                actor="op",
                action="continue",
                target_kind="run",
                target_id=rid,
                run_id=rid,
                thread_id=tid,
                at=7_000.0 + (i >= 1) + (i >= 4),  # records 1 to 3 share one instant
            )
            for i in range(5)
        ]
        for record in made:
            await checkpointer.append_audit(record)
        newest = sorted(made, key=lambda r: (r.at, r.audit_id), reverse=True)
        paged: list[AuditRecord] = []
        position: tuple[float, str] | None = None
        while page := await checkpointer.list_audit(run_id=rid, limit=2, before=position):
            paged += page
            position = (page[-1].at, page[-1].audit_id)
        assert paged == newest
        assert await checkpointer.list_audit(run_id=rid, before=7_001.0) == [made[0]]
        tied = [r for r in newest if r.at == 7_001.0]
        after = await checkpointer.list_audit(run_id=rid, before=(tied[0].at, tied[0].audit_id))
        assert after == [*tied[1:], made[0]]

    async def test_audit_rides_with_its_change_or_not_at_all(
        self, checkpointer: Checkpointer
    ) -> None:
        tid, _, _ = await start_thread(checkpointer)
        run_id = await add_run(checkpointer, tid, fencing_token=1)

        def audit(action: str) -> AuditRecord:
            return AuditRecord(
                audit_id=new_id("aud"),
                actor="op",
                action=action,
                target_kind="run",
                target_id=run_id,
                run_id=run_id,
            )

        lost = await checkpointer.fence_run(
            run_id, expected_token=0, owner="x", audit=audit("lost")
        )
        assert lost is None
        won = await checkpointer.fence_run(run_id, expected_token=1, owner="x", audit=audit("won"))
        assert won is not None
        effect = make_effect(run_id, tid)
        await checkpointer.begin_effect(effect)
        with pytest.raises(StaleStateError):
            await checkpointer.save_effect(effect.replace(row_version=5), audit=audit("stale"))
        await checkpointer.save_effect(effect.replace(row_version=2), audit=audit("saved"))
        actions = [a.action for a in await checkpointer.list_audit(run_id=run_id)]
        assert sorted(actions) == ["saved", "won"]


__all__ = ["AuditConformance"]
