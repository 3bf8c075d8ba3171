"""A database served without the app's code (``oncegraph serve --db runs.db``).

The shop's runs are made with its app, then the SQLite file (or the PostgreSQL
database) is served alone: the runs, effects and audit log read as with the app,
Resolve effect and Abandon work, and everything that runs the graph's code is a 409
whose words say to start the server with the app. A key below admin sees no payload,
since which fields are secret is known only from the tools' code.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from shop import ACME, ADMIN, CARD, KEYS, OPERATOR, VIEWER, Shop, auth
from starlette.testclient import TestClient

from conftest import close_store, free_port
from oncegraph.server import create_app
from oncegraph.server.database_app import DatabaseApp
from oncegraph.server.loading import database_only
from oncegraph.storage.checkpointer import SqliteCheckpointer
from oncegraph.storage.protocols import Checkpointer


@pytest.fixture
def alone(
    request: pytest.FixtureRequest, shop: Shop, store: Checkpointer, tmp_path: Path
) -> Iterator[tuple[TestClient, DatabaseApp]]:
    if isinstance(store, SqliteCheckpointer):
        where = str(tmp_path / "server.db")  # the file the shop's app writes
    else:
        where = str(request.getfixturevalue("fresh_dsn"))  # the shop's own database
    app = database_only(where)
    assert isinstance(app, DatabaseApp)
    with TestClient(create_app(app, keys=KEYS), raise_server_exceptions=False) as client:
        yield client, app
    close_store(app.store)


def test_reads_resolve_and_abandon_work_and_code_is_refused_with_the_fix(
    shop: Shop, alone: tuple[TestClient, DatabaseApp]
) -> None:
    client, _ = alone
    run_id, effect_id = shop.parked("t-db")
    done_id = shop.completed("t-done")
    before = shop.performed()

    health = client.get("/api/health").json()
    assert health["graph"] == "database"
    listed = client.get("/api/runs", headers=auth(VIEWER)).json()["runs"]
    assert {r["run_id"] for r in listed} == {run_id, done_id}

    seen = client.get(f"/api/runs/{run_id}/effects", headers=auth(OPERATOR)).json()["effects"]
    (refund,) = [e for e in seen if e["effect_type"] == "refund"]
    assert refund["effect_id"] == effect_id and refund["status"] == "pending"
    assert CARD not in str(seen)  # the masks are unknown here: no payload below admin
    assert refund["request"].startswith("(not shown")
    assert refund["attempts"][-1]["number"] == 1  # when and how it ended stay shown
    as_admin = client.get(f"/api/runs/{run_id}/effects", headers=auth(ADMIN)).json()
    assert CARD in str(as_admin)  # an admin sees what is stored, as with the app

    for path, body, what in [
        (f"/api/runs/{run_id}/continue", {"reason": "go"}, "continue a run"),
        (f"/api/runs/{done_id}/replay", {"reason": "audit"}, "replay a run"),
        (f"/api/runs/{done_id}/branch", {"patch": {}, "reason": "try"}, "branch a run"),
        (f"/api/runs/{run_id}/effects/{effect_id}/check", {"reason": "ask"}, "recipient"),
        ("/api/threads/t-new/runs", {"input": {"messages": []}}, "start a run"),
    ]:
        refused = client.post(path, headers=auth(OPERATOR), json=body)
        assert refused.status_code == 409, (path, refused.text)
        error = refused.json()["error"]
        assert error["code"] == "needs_app" and what in error["message"]
        assert "oncegraph serve MODULE:APP" in error["message"]
    for read in (
        "/api/threads/t-db/state",
        f"/api/runs/{done_id}/events",
        f"/api/runs/{done_id}/history",
    ):  # read from checkpoints: only the graph can
        refused = client.get(read, headers=auth(OPERATOR))
        assert refused.status_code == 409, (read, refused.text)
        assert "oncegraph serve MODULE:APP" in refused.text
    streamed = client.post(
        "/api/threads/t-new/runs/stream", headers=auth(OPERATOR), json={"input": {}}
    )
    assert streamed.status_code == 409 and "needs_app" in streamed.text
    assert client.get("/api/threads/t-db", headers=auth(VIEWER)).status_code == 200
    redeliver = client.post(
        f"/api/runs/{run_id}/effects/{effect_id}/redeliver",
        headers=auth(ADMIN),
        json={"reason": "again"},
    )
    assert redeliver.status_code == 409 and "needs_app" in redeliver.text
    # a viewer is refused by role first, as with the app
    viewer = client.post(f"/api/runs/{run_id}/continue", headers=auth(VIEWER), json={})
    assert viewer.status_code == 403
    assert shop.performed() == before  # nothing ran

    resolved = client.post(
        f"/api/runs/{run_id}/effects/{effect_id}/resolve",
        headers=auth(OPERATOR),
        json={"outcome": "done", "reason": "seen in the PSP", "result": "ch_1"},
    )
    assert resolved.status_code == 200, resolved.text
    assert resolved.json()["effect"]["status"] == "completed"
    audit = client.get(f"/api/runs/{run_id}/audit", headers=auth(ADMIN)).json()["audit"]
    assert (audit[0]["action"], audit[0]["actor"]) == ("resolve_effect", "api:otto")

    # the app, given back its code, continues from what was resolved: no second refund
    shop.app.resume(run_id, actor="test", reason="resolved")
    assert shop.app.get_run(run_id).status == "completed" and shop.performed() == before


def test_abandon_and_the_run_page_say_what_needs_the_app(
    shop: Shop, alone: tuple[TestClient, DatabaseApp]
) -> None:
    client, _ = alone
    run_id, effect_id = shop.parked("t-page")
    client.headers["Origin"] = "http://testserver"  # as the UI's own login page posts
    done = client.post("/ui/login", data={"key": OPERATOR, "next": "/ui/runs"})
    assert done.status_code == 200 and done.url.path == "/ui/runs"
    page = client.get(f"/ui/runs/{run_id}")
    assert page.status_code == 200, page.text
    html = page.text
    assert 'id="needs-app"' in html and "oncegraph serve MODULE:APP" in html
    assert 'data-command="resolve"' in html and 'data-command="abandon"' in html
    for absent in ("continue", "replay", "branch", "check", "redeliver"):
        assert f'data-command="{absent}"' not in html
    assert 'id="database-only"' in html and CARD not in html
    assert "law " not in html.lower() and "DESIGN" not in html
    runs = client.get("/ui/runs")
    assert run_id in runs.text and 'id="database-only"' in runs.text
    assert client.get(f"/ui/runs/{run_id}/events").status_code == 204  # no live stream
    effect = client.get(f"/ui/runs/{run_id}/effects/{effect_id}")
    assert effect.status_code == 200 and CARD not in effect.text

    abandoned = client.post(
        f"/api/runs/{run_id}/abandon", headers=auth(OPERATOR), json={"reason": "customer left"}
    )
    assert abandoned.status_code == 200, abandoned.text
    assert abandoned.json()["run"]["status"] == "abandoned"
    assert effect_id  # the parked refund stays in the ledger, untouched


def test_a_tenant_key_is_refused_with_the_fix(
    shop: Shop, alone: tuple[TestClient, DatabaseApp]
) -> None:
    client, _ = alone
    shop.parked("acme:t1")
    refused = client.get("/api/runs", headers=auth(ACME))
    assert refused.status_code == 403, refused.text
    assert "oncegraph serve MODULE:APP" in refused.json()["error"]["message"]


def _chromium() -> str | None:
    found = os.environ.get("ONCEGRAPH_CHROMIUM") or shutil.which("chromium")
    if found is None and Path("/usr/bin/chromium").exists():
        found = "/usr/bin/chromium"
    return found


def test_an_operator_resolves_in_the_browser_on_a_database_served_alone(
    sqlite_shop: Shop, tmp_path: Path
) -> None:
    """Real uvicorn, real Chromium: the run page of a database served without the app
    offers Resolve and Abandon only, says why, and Resolve works from the page."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail("playwright is required under CI=true")
        pytest.skip("playwright is not installed (pip install -e '.[dev]')")
    path = _chromium()
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is required under CI=true")
        pytest.skip("no Chromium here (apt-get install -y chromium, or ONCEGRAPH_CHROMIUM)")
    run_id, effect_id = sqlite_shop.parked("t-browser")
    app = database_only(str(tmp_path / "server.db"))
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(app, keys=KEYS),
            host="127.0.0.1",
            port=port,
            log_level="warning",
            lifespan="on",
        )
    )
    thread = threading.Thread(target=server.run, name="uvicorn-db-only", daemon=True)
    thread.start()
    try:
        while not server.started:
            assert thread.is_alive(), "uvicorn did not start"
            thread.join(0.02)
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=path,
                headless=True,
                args=["--no-sandbox", "--disable-dev-shm-usage"],
            )
            try:
                page = browser.new_context(base_url=f"http://127.0.0.1:{port}").new_page()
                page.goto("/ui/runs")
                page.fill("input[name=key]", OPERATOR)
                page.click("button[type=submit]")
                page.wait_for_url("**/ui/runs")
                assert page.locator("#database-only").is_visible()
                page.goto(f"/ui/runs/{run_id}")
                assert "oncegraph serve MODULE:APP" in page.inner_text("#needs-app")
                found = page.locator("[data-command]")
                commands = [
                    found.nth(i).get_attribute("data-command") for i in range(found.count())
                ]
                assert commands == ["abandon", "resolve"]
                assert CARD not in page.content()
                form = page.locator(f"article[data-effect-id='{effect_id}'] [data-command=resolve]")
                form.locator("input[value=done]").check()
                form.locator("input[name=reason]").fill("seen in the PSP dashboard")
                form.locator("button[type=submit]").click()
                page.wait_for_url(f"**/ui/runs/{run_id}")
                assert "resolved: completed" in page.inner_text("#flash")
                page.screenshot(path=str(tmp_path / "database-only-run.png"), full_page=True)
            finally:
                browser.close()
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        close_store(app.store)
    audit = sqlite_shop.app.audit(run_id=run_id)
    assert (audit[0].action, audit[0].reason) == ("resolve_effect", "seen in the PSP dashboard")
