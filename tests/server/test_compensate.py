"""Compensate over HTTP: ``POST /api/effects/{id}/compensate`` (admin unless the server
says operator; refusals in the API's words; its body's model in the OpenAPI document) and the
UI's Compensate button in real Chromium (screenshots under the test's tmp directory).
Refusals are the server's error documents (``{"error": {"status", "code", "message"}}``).
The app is the shop of ``tests/integration/_compensation_app.py`` over the fake provider.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from shop import ACME, ADMIN, KEYS, OPERATOR, VIEWER, auth
from starlette.testclient import TestClient
from test_ui_browser import Operator, browser  # noqa: F401 (the browser fixture)

from conftest import start_live, stop_live
from oncegraph.server import create_app
from oncegraph.storage.protocols import Checkpointer
from oncegraph.testing.provider import FakeProvider

sys.path.insert(0, str(Path(__file__).parents[1] / "integration"))
from _compensation_app import Shop


@pytest.fixture
def comp_shop(checkpointer: Checkpointer) -> Iterator[Shop]:
    with FakeProvider() as provider:
        yield Shop(checkpointer, provider.url)


def _tickets(shop: Shop) -> int:
    return len(shop.tickets())


def test_the_api_compensates_once_for_an_admin(comp_shop: Shop) -> None:
    charge = comp_shop.book()
    url = f"/api/effects/{charge.effect_id}/compensate"
    with TestClient(create_app(comp_shop.app, keys=KEYS)) as client:
        for key in (VIEWER, OPERATOR):  # admin by default, like a redelivery
            refused = client.post(url, json={"reason": "r"}, headers=auth(key))
            assert refused.status_code == 403
            assert refused.json()["error"]["code"] == "forbidden"
        bad = client.post(url, json={"reason": "r", "again": True}, headers=auth(ADMIN))
        assert bad.status_code in (400, 422) and _tickets(comp_shop) == 0

        done = client.post(
            url, json={"reason": "customer cancelled", "args": {"note": "api"}}, headers=auth(ADMIN)
        )
        assert done.status_code == 200, done.text
        body = done.json()
        assert body["compensates"] == charge.effect_id and body["resumed"] is False
        refund = body["effect"]
        assert refund["effect_type"] == "refund" and refund["status"] == "completed"
        assert refund["compensates"] == charge.effect_id
        assert _tickets(comp_shop) == 1

        shown = client.get(
            f"/api/runs/{charge.run_id}/effects/{refund['effect_id']}", headers=auth(VIEWER)
        ).json()
        assert shown["effect"]["compensates"] == charge.effect_id

        again = client.post(url, json={"reason": "twice?"}, headers=auth(ADMIN))
        assert again.status_code == 409 and again.json()["error"]["code"] == "conflict"
        message = again.json()["error"]["message"]
        assert "already compensated" in message and '"allow_again": true' in message
        assert "app.compensate" not in message
        assert _tickets(comp_shop) == 1

        twice = client.post(
            url, json={"reason": "card closed", "allow_again": True}, headers=auth(ADMIN)
        )
        assert twice.status_code == 200 and _tickets(comp_shop) == 2
        linked = client.get(
            f"/api/runs/{charge.run_id}/effects/{charge.effect_id}", headers=auth(VIEWER)
        ).json()["effect"]
        assert linked["compensated_by"] == [
            refund["effect_id"],
            twice.json()["effect"]["effect_id"],
        ]

        note = comp_shop.effect("note").effect_id
        none = client.post(
            f"/api/effects/{note}/compensate", json={"reason": "r"}, headers=auth(ADMIN)
        )
        assert none.status_code == 400 and "@tool(compensate=" in none.text
        missing = client.post(
            "/api/effects/nope/compensate", json={"reason": "r"}, headers=auth(ADMIN)
        )
        assert missing.status_code == 404

        doc = client.get("/openapi.json").json()
        post = doc["paths"]["/api/effects/{effect_id}/compensate"]["post"]
        ref = post["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        assert ref.endswith("/CompensateBody")
        assert "allow_again" in doc["components"]["schemas"]["CompensateBody"]["properties"]


@pytest.mark.parametrize("checkpointer", ["sqlite"], indirect=True)
def test_an_operator_may_compensate_where_the_server_says_so(comp_shop: Shop) -> None:
    charge = comp_shop.book()
    app = create_app(comp_shop.app, keys=KEYS, compensate_role="operator")
    with TestClient(app) as client:
        url = f"/api/effects/{charge.effect_id}/compensate"
        assert client.post(url, json={"reason": "r"}, headers=auth(VIEWER)).status_code == 403
        # an operator bound to another tenant does not see this run's effect
        foreign = client.post(url, json={"reason": "r"}, headers=auth(ACME))
        assert foreign.status_code == 404 and _tickets(comp_shop) == 0
        done = client.post(url, json={"reason": "r"}, headers=auth(OPERATOR))
        assert done.status_code == 200, done.text
    with pytest.raises(Exception, match="compensate_role"):
        create_app(comp_shop.app, keys=KEYS, compensate_role="viewer")


@pytest.mark.parametrize("checkpointer", ["sqlite"], indirect=True)
def test_the_compensate_button_confirms_then_links_both_effects(
    browser: Any,  # noqa: F811
    comp_shop: Shop,
    tmp_path: Path,
) -> None:
    shots = tmp_path / "screenshots"
    shots.mkdir()
    charge = comp_shop.book()
    note = comp_shop.effect("note")
    live = start_live(comp_shop)  # type: ignore[arg-type]
    try:
        op = Operator(browser, live, ADMIN, shots)
        page = op.page
        page.goto(f"/ui/runs/{charge.run_id}")
        card = page.locator(f"article[data-effect-id='{charge.effect_id}']")
        assert card.locator("[data-command=compensate]").count() == 1
        # only where it applies: not on the note (its tool declares no compensation)
        other = page.locator(f"article[data-effect-id='{note.effect_id}']")
        assert other.locator("[data-command=compensate]").count() == 0
        op.shot("run-with-compensate")

        page.goto(f"/ui/runs/{charge.run_id}/effects/{charge.effect_id}")
        page.click("[data-command=compensate]")
        page.wait_for_url(f"**/ui/effects/{charge.effect_id}/compensate")
        assert "refund (irreversible)" in page.inner_text("[data-field=tool]")
        assert '"card": "***"' in page.inner_text("[data-field=payload]")
        op.shot("compensate-confirm")
        page.set_viewport_size({"width": 800, "height": 900})
        wide = page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        assert wide, "the confirmation page overflows an 800 px window"
        op.shot("compensate-confirm-800px")
        page.set_viewport_size({"width": 1366, "height": 900})
        form = page.locator("form[data-command=compensate-confirm]")
        form.locator("input[name=reason]").fill("customer cancelled")
        form.locator("input[name=confirmed]").check()
        form.locator("button[type=submit]").click()
        page.wait_for_selector("#flash")
        assert f"Effect {charge.effect_id} compensated" in page.inner_text("#flash")
        assert _tickets(comp_shop) == 1
        (refund,) = [
            e for e in comp_shop.app.effects(run_id=charge.run_id) if e.effect_type == "refund"
        ]
        assert page.locator(f"[data-compensated-by='{refund.effect_id}']").count() == 1
        op.shot("run-compensated")

        # the effect log across runs says what the refund compensates
        page.goto("/ui/effects")
        row = page.locator(f"tr[data-effect-id='{refund.effect_id}']")
        assert row.locator(f"[data-compensates='{charge.effect_id}']").count() == 1
        op.shot("effect-log")

        # both effects' pages link to each other; a second Compensate asks "again"
        page.goto(f"/ui/runs/{charge.run_id}/effects/{refund.effect_id}")
        assert charge.effect_id in page.inner_text("#compensates")
        page.goto(f"/ui/runs/{charge.run_id}/effects/{charge.effect_id}")
        assert refund.effect_id in page.inner_text("#compensated-by")
        op.shot("effect-compensated")
        page.click("[data-command=compensate]")
        assert page.locator("#already-compensated").count() == 1
        form = page.locator("form[data-command=compensate-confirm]")
        form.locator("input[name=reason]").fill("again without saying so")
        form.locator("input[name=confirmed]").check()
        form.locator("button[type=submit]").click()
        page.wait_for_load_state()
        text = page.inner_text("main")
        assert "already compensated" in text and "Compensate again" in text
        assert "app.compensate" not in text and _tickets(comp_shop) == 1
        op.shot("compensate-refused")
        op.close()
    finally:
        stop_live(live)


def test_oncegraph_serve_hands_compensate_role_to_the_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from typer.testing import CliRunner

    import oncegraph.server
    from oncegraph.cli.commands import app as cli

    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(oncegraph.server, "serve", lambda *a, **kw: seen.append(kw))
    done = CliRunner().invoke(cli, ["serve", "some.module:app", "--compensate-role", "operator"])
    assert done.exit_code == 0, done.output
    assert seen[0]["compensate_role"] == "operator"
    CliRunner().invoke(cli, ["serve", "some.module:app"])
    assert "compensate_role" not in seen[1]  # the server's default stays in one place
