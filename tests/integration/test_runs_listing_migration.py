"""Schema migration 9: an app's runs are listed newest first from an index in that order.

Listings filtered on ``COALESCE(app_id, workflow_name)``, which no index served, so every
listing read and sorted every run. The app's runs are now read from
``oncegraph_runs_app_created`` (app_id, created_at, run_id), newest first and cut at the
limit, merged with the runs an older oncegraph wrote with no app_id (which the index
holds under NULL). A database at version 8 migrates with every listing as before, and
both planners then read the app's newest runs from the index, without reading the rest.
"""

from __future__ import annotations

import itertools
import re
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from old_schema import Execute, app_runs, insert_runs, old_store

from oncegraph.storage.records import RunRecord, RunStatus
from oncegraph.storage.sql import statements as S
from oncegraph.storage.sql.listing import RunListing
from oncegraph.storage.sql.sqlite import SqliteCheckpointer

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
@pytest.mark.parametrize("rare", [S.RARE_STATUS, 0, 10**9], ids=["counted", "app", "status"])
async def test_migration_9_lists_an_apps_runs_newest_first_from_the_index(
    kind: str,
    rare: int,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """And the same answers whichever index an app's listing of some statuses walks
    (SQLite counts the statuses' runs to choose: ``rare`` forces each way)."""
    monkeypatch.setattr(S, "RARE_STATUS", rare)
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


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
@pytest.mark.parametrize("arms_max", [S.APP_ARMS_MAX, 1], ids=["by-app", "whole"])
async def test_every_apps_runs_are_listed_app_by_app_from_the_index(
    kind: str,
    arms_max: int,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With no app and no thread (``oncegraph runs --db`` without ``--app``), every app's
    runs and the rows with no app_id are listed newest first: read app by app from
    ``oncegraph_runs_app_created`` (the apps found by a walk that jumps from one app to
    the next), or, with more apps than :data:`APP_ARMS_MAX`, by reading and sorting them
    all: the same answer both ways."""
    monkeypatch.setattr(S, "APP_ARMS_MAX", arms_max)
    where, store = old_store(kind, tmp_path, request, version=8, fill=_fill)
    everything = sorted(_runs(), key=lambda r: (r.created_at, r.run_id), reverse=True)
    try:
        await store.setup()  # migrates
        cases: list[tuple[set[RunStatus] | None, str | None, int]] = [
            (None, None, 100),
            (None, None, 5),  # the two made at once (by run id), then across the apps
            (None, None, 12),  # a legacy run among them
            ({RunStatus.FAILED}, None, 100),
            ({RunStatus.COMPLETED, RunStatus.FAILED}, "t1", 4),
            (None, None, 0),
        ]
        for statuses, tenant, limit in cases:
            listed = await store.list_runs(
                statuses=sorted(statuses) if statuses else None, tenant=tenant, limit=limit
            )
            expected = [
                r.run_id for r in everything
                if (statuses is None or r.status in statuses)
                and (tenant is None or r.tenant == tenant)
            ][:limit]  # fmt: skip
            assert [r.run_id for r in listed] == expected, (statuses, tenant, limit)
        legacy = [r for r in await store.list_runs() if r.run_id in _LEGACY]
        assert {r.app_id for r in legacy} == {"a"}  # read as their workflow's, as by app
    finally:
        await store.aclose()

    if arms_max == 1:
        return
    sql = S.run_list(by_thread=False, n_statuses=0, n_apps=2)
    params = S.run_list_params(
        thread_id=None, statuses=[], app_id=None, tenant=None, limit=5, apps=["a", "b"]
    )
    by_status = S.run_list(by_thread=False, n_statuses=2)  # every app's runs of 2 statuses
    status_params = S.run_list_params(
        thread_id=None, statuses=["failed", "completed"], app_id=None, tenant=None, limit=5
    )
    statements = ((S.RUN_APPS, (5,)), (sql, params), (by_status, status_params))
    if kind == "sqlite":
        with sqlite3.connect(where) as conn:
            plans = [
                [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + q, p)] for q, p in statements
            ]
        apps_plan, list_plan, status_plan = (
            [s for s in plan if "oncegraph_runs" in s] for plan in plans
        )
        assert apps_plan and all("INDEX oncegraph_runs_app_created" in s for s in apps_plan)
        # three arms (a, b, no app_id), each a search of the index, never a scan
        assert len(list_plan) == 3, list_plan
        assert all(s.startswith("SEARCH") and "app_created" in s for s in list_plan)
        # one arm a status, each a search of the statuses' index (migration 11)
        assert len(status_plan) == 2, status_plan
        assert all(s.startswith("SEARCH") and "status_created" in s for s in status_plan)
    else:
        import psycopg

        with psycopg.connect(where, autocommit=True) as pg:
            pg.execute("SET enable_seqscan = off")  # a tiny table: ask whether it CAN
            apps_text, list_text, status_text = (
                " | ".join(r[0].strip() for r in pg.execute("EXPLAIN " + q, p).fetchall())
                for q, p in ((S.to_format_params(q), p) for q, p in statements)
            )
        assert "Index Only Scan using oncegraph_runs_app_created" in apps_text, apps_text
        # every arm, the one with no app_id too, walks the index newest first
        walks = re.findall("Index Scan Backward using oncegraph_runs_app_created", list_text)
        assert len(walks) == 3, list_text
        walks = re.findall("Index Scan Backward using oncegraph_runs_status_created", status_text)
        assert len(walks) == 2 and not re.search(r"Sort  \(cost", status_text), status_text


def test_listing_parameters_follow_the_statement() -> None:
    """The parameters :func:`run_list_params` gives are as many as the statement's
    placeholders, for every combination of filters."""
    for thread in (None, "t"):
        for statuses in ([], ["queued"], ["failed", "completed"]):
            for app in (None, "a"):
                for tenant in (None, "t1"):
                    for apps, by_status, legacy, parent, before in itertools.product(
                        ([], ["a"], ["a", "b", "c"]),
                        (False, True),
                        (False, True),
                        (None, "p"),
                        (None, (7.5, "run-7")),
                    ):
                        sql = S.run_list(
                            by_thread=thread is not None,
                            n_statuses=len(statuses),
                            by_app=app is not None,
                            by_tenant=tenant is not None,
                            n_apps=len(apps),
                            by_status=by_status,
                            legacy=legacy,
                            by_parent=parent is not None,
                            by_before=before is not None,
                        )
                        params: list[Any] = S.run_list_params(
                            thread_id=thread,
                            statuses=statuses,
                            app_id=app,
                            tenant=tenant,
                            limit=9,
                            apps=apps,
                            by_status=by_status,
                            legacy=legacy,
                            parent_run_id=parent,
                            before=before,
                        )
                        assert sql.count("?") == len(params), (sql, params)
                        assert params[-1] == 9


async def test_the_listing_reads_runs_without_an_app_id_only_while_there_are_any(
    tmp_path: Path,
) -> None:
    """A database holding no run without an app_id is remembered as such: its listings
    leave out the arm that reads them, and stop asking. One that holds some keeps asking
    (they can be pruned). An app's listing of rare statuses walks the statuses' index."""
    store = SqliteCheckpointer(tmp_path / "runs.db")
    await store.setup()
    await store.aclose()
    conn = sqlite3.connect(tmp_path / "runs.db")
    read_sql: list[str] = []

    async def read(sql: str, params: Sequence[Any]) -> list[Any]:
        read_sql.append(sql)
        return conn.execute(sql, params).fetchall()

    async def listed(listing: RunListing, **filters: Any) -> list[str]:
        shape, params = await listing.plan(
            read, thread_id=None, tenant=None, limit=100, **{"statuses": [], **filters}
        )
        return [row[0] for row in conn.execute(shape.sql(), params)]

    try:
        insert_runs(conn.execute, app_runs(8))
        listing = RunListing(count_statuses=True)
        first = await listed(listing, app_id="a")
        assert first == [f"run-{i:02d}" for i in (7, 5, 3, 1)]
        assert read_sql.count(S.RUN_LEGACY) == 1
        again = await listed(listing, app_id="a")
        assert again == first and read_sql.count(S.RUN_LEGACY) == 1  # not asked again
        shape, _ = await listing.plan(
            read, thread_id=None, statuses=[], app_id=None, tenant=None, limit=5
        )
        assert (shape.n_apps, shape.legacy) == (2, False)

        insert_runs(conn.execute, [app_runs(9)[8].replace(run_id="run-old")], no_app_id={"run-old"})
        fresh = RunListing(count_statuses=True)
        assert (await listed(fresh, app_id="b"))[0] == "run-old"  # read as its workflow's
        await listed(fresh, app_id="b")
        assert read_sql.count(S.RUN_LEGACY) == 3  # it holds some: asked each time

        # few failed runs: walked from the statuses' index, the app a filter
        shape, _ = await fresh.plan(
            read, thread_id=None, statuses=["failed"], app_id="b", tenant=None, limit=5
        )
        assert shape.by_status and not shape.legacy
        assert await listed(fresh, app_id="b", statuses=["failed"]) == ["run-06", "run-00"]
    finally:
        conn.close()


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def test_migration_12_finds_a_runs_replays_and_branches_from_their_index(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A version-11 database migrates; a run's replays and branches (``parent_run_id``)
    are then found from ``oncegraph_runs_parent``, which holds only runs with a parent,
    not by reading the newest runs and filtering them."""
    made = [
        run.replace(parent_run_id="run-00" if i % 2 else "run-01", thread_id=f"t{i}~fork")
        for i, run in enumerate(app_runs(6)[2:], start=2)
    ]

    def fill(execute: Execute) -> None:
        insert_runs(execute, [*app_runs(2), *made])

    where, store = old_store(kind, tmp_path, request, version=11, fill=fill)
    try:
        await store.setup()  # migrates
        for parent in ("run-00", "run-01"):
            found = await store.list_runs(parent_run_id=parent)
            expected = sorted(
                (r for r in made if r.parent_run_id == parent),
                key=lambda r: (r.created_at, r.run_id),
                reverse=True,
            )
            assert [r.run_id for r in found] == [r.run_id for r in expected]
        assert await store.list_runs(parent_run_id="run-02") == []
    finally:
        await store.aclose()

    sql = S.run_list(by_thread=False, n_statuses=0, by_parent=True)
    params = S.run_list_params(
        thread_id=None, statuses=[], app_id=None, tenant=None, limit=5, parent_run_id="run-00"
    )
    if kind == "sqlite":
        with sqlite3.connect(where) as conn:
            plan = [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + sql, params)]
            indexed = conn.execute(
                "SELECT count(*) FROM pragma_index_info('oncegraph_runs_parent')"
            ).fetchone()
        assert indexed == (3,)
        assert any("USING INDEX oncegraph_runs_parent" in s for s in plan), plan
        assert not any("TEMP B-TREE" in s for s in plan), plan  # in the index's order
    else:
        import psycopg

        with psycopg.connect(where, autocommit=True) as pg:
            pg.execute("SET enable_seqscan = off")  # a tiny table: ask whether it CAN
            text = " | ".join(
                r[0].strip()
                for r in pg.execute("EXPLAIN " + S.to_format_params(sql), params).fetchall()
            )
            partial = pg.execute(
                "SELECT indexdef FROM pg_indexes WHERE indexname = 'oncegraph_runs_parent'"
            ).fetchone()
        assert partial is not None and "WHERE (parent_run_id IS NOT NULL)" in partial[0]
        assert "Index Scan Backward using oncegraph_runs_parent" in text, text


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def test_a_next_page_starts_in_each_index_where_the_last_ended(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """``before`` (the last listed run's ``(created_at, run_id)``) is a range on each
    arm's index after its equalities: the next page of an app's runs, of every app's, of
    a status's and of a run's replays is read from where the last page ended, not by
    reading past the runs already listed; and page by page a listing is the whole one."""
    where, store = old_store(kind, tmp_path, request, version=8, fill=_fill)
    everything = sorted(_runs(), key=lambda r: (r.created_at, r.run_id), reverse=True)
    try:
        await store.setup()  # migrates
        for filters in ({}, {"app_id": "a"}, {"statuses": [RunStatus.FAILED]}, {"tenant": "t1"}):
            paged: list[str] = []
            before: tuple[float, str] | None = None
            while page := await store.list_runs(limit=3, before=before, **filters):
                paged += [r.run_id for r in page]
                before = (page[-1].created_at, page[-1].run_id)
            whole = [r.run_id for r in await store.list_runs(limit=1_000, **filters)]
            assert paged == whole, filters
        assert {*paged} < {r.run_id for r in everything}
    finally:
        await store.aclose()

    position = (110.5, "run-legacy-2")
    shapes = [  # (statement, params, the index each arm must walk, arms)
        (
            S.run_list(by_thread=False, n_statuses=0, by_app=True, by_before=True),
            S.run_list_params(
                thread_id=None, statuses=[], app_id="a", tenant=None, limit=5, before=position
            ),
            "oncegraph_runs_app_created",
            2,
        ),
        (
            S.run_list(by_thread=False, n_statuses=0, n_apps=2, by_before=True),
            S.run_list_params(
                thread_id=None, statuses=[], app_id=None, tenant=None, limit=5,
                apps=["a", "b"], before=position,
            ),
            "oncegraph_runs_app_created",
            3,
        ),
        (
            S.run_list(by_thread=False, n_statuses=2, by_before=True),
            S.run_list_params(
                thread_id=None, statuses=["failed", "completed"], app_id=None, tenant=None,
                limit=5, before=position,
            ),
            "oncegraph_runs_status_created",
            2,
        ),
        (
            S.run_list(by_thread=False, n_statuses=0, by_parent=True, by_before=True),
            S.run_list_params(
                thread_id=None, statuses=[], app_id=None, tenant=None, limit=5,
                parent_run_id="run-00", before=position,
            ),
            "oncegraph_runs_parent",
            1,
        ),
    ]
    if kind == "sqlite":
        with sqlite3.connect(where) as conn:
            for sql, params, index, arms in shapes:
                plan = [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + sql, params)]
                walks = [s for s in plan if f"INDEX {index}" in s]
                # each arm a search of its index bounded by the position, never a scan
                assert len(walks) == arms, plan
                bound = "(created_at,run_id)<(?,?)"
                assert all(s.startswith("SEARCH") and bound in s for s in walks), plan
                assert not any(s.startswith("SCAN oncegraph_runs") for s in plan), plan
    else:
        import psycopg

        with psycopg.connect(where, autocommit=True) as pg:
            pg.execute("SET enable_seqscan = off")  # a tiny table: ask whether it CAN
            for sql, params, index, arms in shapes:
                text = " | ".join(
                    r[0].strip()
                    for r in pg.execute("EXPLAIN " + S.to_format_params(sql), params).fetchall()
                )
                walks = re.findall(f"Index Scan Backward using {index}", text)
                assert len(walks) == arms, text
                bounded = re.findall(r"ROW\(created_at, run_id\) < ROW\(", text)
                assert len(bounded) == arms, text
