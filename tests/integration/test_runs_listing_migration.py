"""Schema migration 9: an app's runs are listed newest first from an index in that order.

Listings filtered on ``COALESCE(app_id, workflow_name)``, which no index served, so every
listing read and sorted every run. The app's runs are now read from
``oncegraph_runs_app_created`` (app_id, created_at, run_id), newest first and cut at the
limit, merged with the runs an older oncegraph wrote with no app_id (which the index
holds under NULL). A database at version 8 migrates with every listing as before, and
both planners then read the app's newest runs from the index, without reading the rest.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from old_schema import Execute, app_runs, insert_runs, old_store

from oncegraph.storage.records import RunRecord, RunStatus
from oncegraph.storage.sql import statements as S

_LEGACY = ("run-legacy-1", "run-legacy-2")


def _runs() -> list[RunRecord]:
    """Runs of apps ``a`` and ``b`` (some of tenant ``t1``); the legacy runs have no
    app_id, so they are their workflow_name's: ``a``'s, one among the newest."""
    made = app_runs(20, tenants=True)
    legacy = [
        RunRecord(
            run_id, f"t-old-{n}", status, workflow_name="a", created_at=at, updated_at=at
        )
        for n, (run_id, status, at) in enumerate(
            [(_LEGACY[0], RunStatus.COMPLETED, 50.0), (_LEGACY[1], RunStatus.FAILED, 110.5)]
        )
    ]
    same_time = [  # created in one instant: the run id decides
        RunRecord(
            run_id, f"t-{run_id}", RunStatus.COMPLETED, workflow_name="a",
            created_at=119.0, updated_at=119.0, app_id="a",
        )
        for run_id in ("run-s2", "run-s1")
    ]  # fmt: skip
    return [*made, *legacy, *same_time]


def _fill(execute: Execute) -> None:
    """``_runs()``, the legacy runs' app_id left NULL as an older oncegraph wrote it."""
    insert_runs(execute, _runs(), no_app_id=_LEGACY)


def _expected(
    app: str, statuses: set[RunStatus] | None, tenant: str | None, limit: int
) -> list[str]:
    mine = [
        r for r in _runs()
        if (r.app_id or r.workflow_name) == app
        and (statuses is None or r.status in statuses)
        and (tenant is None or r.tenant == tenant)
    ]  # fmt: skip
    mine.sort(key=lambda r: (r.created_at, r.run_id), reverse=True)
    return [r.run_id for r in mine[:limit]]


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def test_migration_9_lists_an_apps_runs_newest_first_from_the_index(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    where, store = old_store(kind, tmp_path, request, version=8, fill=_fill)
    try:
        await store.setup()  # migrates
        cases: list[tuple[str, set[RunStatus] | None, str | None, int]] = [
            ("a", None, None, 100),
            ("a", None, None, 3),  # the newest: the two made at once, by run id
            ("a", None, None, 6),  # a legacy run among them
            ("a", {RunStatus.FAILED}, None, 100),  # a legacy run's status counts
            ("b", {RunStatus.COMPLETED, RunStatus.FAILED}, None, 4),
            ("a", None, "t1", 100),
            ("b", {RunStatus.FAILED}, "t1", 2),
            ("a", None, None, 0),
            ("c", None, None, 100),
        ]
        for app, statuses, tenant, limit in cases:
            listed = await store.list_runs(
                app_id=app,
                statuses=sorted(statuses) if statuses else None,
                tenant=tenant,
                limit=limit,
            )
            assert [r.run_id for r in listed] == _expected(app, statuses, tenant, limit), (
                app,
                statuses,
                tenant,
                limit,
            )
        legacy = [r for r in await store.list_runs(app_id="a") if r.run_id in _LEGACY]
        assert {r.app_id for r in legacy} == {"a"}  # read as the app's, as before
        # by thread, the thread's index still finds its runs; the app is a filter
        assert [r.run_id for r in await store.list_runs(thread_id="t3", app_id="a")] == [
            "run-03"
        ]
        assert await store.list_runs(thread_id="t3", app_id="b") == []
    finally:
        await store.aclose()

    sql = S.run_list(by_thread=False, n_statuses=0, by_app=True)
    params = S.run_list_params(thread_id=None, statuses=[], app_id="a", tenant=None, limit=5)
    if kind == "sqlite":
        with sqlite3.connect(where) as conn:
            indexes = {r[1] for r in conn.execute("PRAGMA index_list(oncegraph_runs)")}
            plan = [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + sql, params)]
        assert "oncegraph_runs_app_created" in indexes
        scans = [step for step in plan if "oncegraph_runs" in step]
        # both arms read the index (in its order: no sort of the runs), never the table
        assert len(scans) == 2, plan
        assert all("INDEX oncegraph_runs_app_created" in s for s in scans), plan
        assert not any(s.startswith("SCAN oncegraph_runs") and "INDEX" not in s for s in scans)
    else:
        import psycopg

        with psycopg.connect(where, autocommit=True) as pg:
            found = pg.execute(
                "SELECT indexname FROM pg_indexes WHERE tablename = 'oncegraph_runs'"
            ).fetchall()
            pg.execute("SET enable_seqscan = off")  # a tiny table: ask whether it CAN
            rows_ = pg.execute("EXPLAIN " + S.to_format_params(sql), params).fetchall()
        assert "oncegraph_runs_app_created" in {r[0] for r in found}
        text = " | ".join(r[0].strip() for r in rows_)
        assert re.search("Index Scan Backward using oncegraph_runs_app_created", text), text
        # the only sort is of the legacy arm's rows (none after a migration), never the app's
        assert "Merge Append" in text or "Sort" not in text, text


def test_listing_parameters_follow_the_statement() -> None:
    """The parameters :func:`run_list_params` gives are as many as the statement's
    placeholders, for every combination of filters."""
    for thread in (None, "t"):
        for statuses in ([], ["queued"], ["failed", "completed"]):
            for app in (None, "a"):
                for tenant in (None, "t1"):
                    sql = S.run_list(
                        by_thread=thread is not None,
                        n_statuses=len(statuses),
                        by_app=app is not None,
                        by_tenant=tenant is not None,
                    )
                    params: list[Any] = S.run_list_params(
                        thread_id=thread, statuses=statuses, app_id=app, tenant=tenant, limit=9
                    )
                    assert sql.count("?") == len(params), (sql, params)
                    assert params[-1] == 9
