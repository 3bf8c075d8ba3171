"""Redeliver effect and the recipient's dedup window, in the UI (real Chromium through
Playwright, see test_ui_browser.py) and in the API: the preview shows what the recipient
said when asked and the dedup method in words; when nobody knows how long the recipient
keeps the key, it warns, and a send without the box (or the body field) ticked is
refused with nothing sent. Screenshots under the test's tmp directory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from shop import ADMIN, Shop, auth
from starlette.testclient import TestClient
from test_ui_browser import Operator, browser  # noqa: F401 (the browser fixture)

from conftest import Live, client_for, start_live, stop_live
from oncegraph.ledger.outcomes import Reconciled
from oncegraph.storage.protocols import Checkpointer
from oncegraph.testing.provider import FakeProvider
from oncegraph.tools.tool import UNSAID

BOX = "Send it although the recipient may have forgotten the key"


@pytest.fixture
def unsure(sqlite_store: Checkpointer) -> Iterator[Shop]:
    """A refund that declares no dedup window, whose reconcile cannot tell."""
    with FakeProvider() as provider:
        yield Shop(
            sqlite_store,
            provider,
            reconcile=lambda record: Reconciled.unknown(),
            dedup_window=UNSAID,
        )


def _redelivered(shop: Shop, effect_id: str) -> int:
    return sum(a.action == "redeliver" for a in shop.app.audit(target_id=effect_id))


def test_the_preview_page_warns_and_refuses_without_the_box(
    browser: Any,  # noqa: F811
    unsure: Shop,
    tmp_path: Path,
) -> None:
    shots = tmp_path / "screenshots"
    shots.mkdir()
    run_id, effect_id = unsure.parked("t-window")
    live: Live = start_live(unsure)
    try:
        admin = Operator(browser, live, ADMIN, shots)
        page = admin.page
        page.goto(f"/ui/runs/{run_id}/effects/{effect_id}/redeliver")
        preview = page.locator("#redeliver-preview")
        answer = preview.locator("[data-field=recipient_answer]").inner_text()
        assert answer.startswith("unknown: the recipient could not tell")
        method = preview.locator("[data-field=dedup_method]").inner_text()
        assert "this tool does not say how long its recipient keeps a key" in method
        warning = page.locator("[data-field=window-warning]")
        assert warning.is_visible()
        assert "may have forgotten this key" in warning.inner_text()
        admin.shot("redeliver-window-warning")

        form = page.locator("form[data-command=redeliver-confirm]")
        form.locator("input[name=reason]").fill("customer asked")
        form.locator("input[name=confirmed]").check()
        form.locator("button[type=submit]").click()
        page.wait_for_selector("p.flash.error")
        refused = page.inner_text("p.flash.error")
        assert "Nothing was sent" in refused and f'tick "{BOX}"' in refused
        assert _redelivered(unsure, effect_id) == 0
        assert unsure.client.stats()["replayed"] == 0  # the provider saw nothing
        admin.shot("redeliver-window-refused")

        page.goto(f"/ui/runs/{run_id}/effects/{effect_id}/redeliver")
        form = page.locator("form[data-command=redeliver-confirm]")
        form.locator("input[name=reason]").fill("customer asked, window checked")
        form.locator("input[name=confirmed]").check()
        form.get_by_label(BOX).check()
        form.locator("button[type=submit]").click()
        page.wait_for_selector("#flash")
        assert "redelivered" in page.inner_text("#flash")
        assert _redelivered(unsure, effect_id) == 1
        assert unsure.client.stats()["replayed"] == 1  # sent once, the same key
        admin.shot("redeliver-window-sent")
        admin.close()
    finally:
        stop_live(live)
    assert len(list(shots.glob("*.png"))) == 3


def test_the_api_names_the_body_field(unsure: Shop) -> None:
    run_id, effect_id = unsure.parked("t-window-api")
    url = f"/api/runs/{run_id}/effects/{effect_id}/redeliver"
    with client_for(unsure) as client:
        shown = client.post(url, headers=auth(ADMIN), json={"reason": "r"})
        assert shown.status_code == 200, shown.text
        preview = shown.json()["preview"]
        assert preview["past_dedup_window"] is True and preview["warning"]
        assert preview["recipient_answer"].startswith("unknown")
        assert "does not say how long" in preview["dedup_method"]
        body = {"reason": "r", "confirm": preview["token"]}
        refused = client.post(url, headers=auth(ADMIN), json=body)
        assert refused.status_code == 409, refused.text
        message = refused.json()["error"]["message"]
        assert '"past_dedup_window": true in its body' in message
        assert _redelivered(unsure, effect_id) == 0
        sent = client.post(url, headers=auth(ADMIN), json={**body, "past_dedup_window": True})
        assert sent.status_code == 200, sent.text
        assert sent.json()["sent"] is True and _redelivered(unsure, effect_id) == 1
        assert unsure.client.stats()["replayed"] == 1


def test_a_bad_past_dedup_window_is_a_clear_400(unsure: Shop) -> None:
    run_id, effect_id = unsure.parked("t-window-bad")
    url = f"/api/runs/{run_id}/effects/{effect_id}/redeliver"
    client: TestClient
    with client_for(unsure) as client:
        bad = client.post(url, headers=auth(ADMIN), json={"reason": "r", "past_dedup_window": "y"})
        assert bad.status_code == 400 and "past_dedup_window" in bad.text
