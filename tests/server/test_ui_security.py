"""Only the UI's own pages drive it: form tokens, origins, headers, no text from the request.

Over HTTP without a browser (Starlette's TestClient, whose own origin is
``http://testserver``); test_ui_browser.py does the same from a real page on another
port. Every refused request is checked to have changed nothing: the audit log, the
provider's charges, the runs and the effect are as before.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from shop import ADMIN, OPERATOR, VIEWER, Shop, auth
from starlette.testclient import TestClient
from test_ui import ORIGIN, login

from conftest import client_for
from oncegraph.errors import ConfigError
from oncegraph.server import create_app
from oncegraph.server.auth import COOKIE
from oncegraph.server.flash import COOKIE as FLASH
from oncegraph.server.headers import CSP

FOREIGN = "http://127.0.0.1:8766"  # another port of the same host: the same site


def _forms(run_id: str, effect_id: str, token: str) -> list[tuple[str, dict[str, str]]]:
    """Every command form of the UI, filled in as a person would (with ``token``)."""
    effect = f"/ui/runs/{run_id}/effects/{effect_id}"
    return [
        (f"/ui/runs/{run_id}/continue", {"reason": "forged"}),
        (f"/ui/runs/{run_id}/replay", {"mode": "live", "reason": "forged"}),
        (f"/ui/runs/{run_id}/branch", {"patch": "{}", "reason": "forged"}),
        (f"/ui/runs/{run_id}/abandon", {"reason": "forged"}),
        (f"{effect}/resolve", {"outcome": "done", "reason": "forged"}),
        (f"{effect}/check", {"reason": "forged"}),
        (f"{effect}/redeliver", {"confirmed": "yes", "token": token, "reason": "forged"}),
    ]


def _state(shop: Shop, run_id: str) -> tuple[Any, ...]:
    app = shop.app
    effects = [(e.effect_id, e.status, e.row_version) for e in app.effects(run_id=run_id)]
    return (
        shop.performed(),
        [(a.audit_id, a.action) for a in app.audit()],
        sorted(r.run_id for r in app.runs()),
        app.get_run(run_id).status,
        effects,
    )


def _redelivery_token(client: TestClient, run_id: str, effect_id: str) -> str:
    """A real preview's token, as the admin's own page would hold it."""
    preview = client.post(
        f"/api/runs/{run_id}/effects/{effect_id}/redeliver",
        headers=auth(ADMIN),
        json={"reason": "looked"},
    )
    assert preview.status_code == 200, preview.text
    return str(preview.json()["preview"]["token"])


def test_a_command_from_another_origin_or_from_none_changes_nothing(
    shop: Shop, client: TestClient
) -> None:
    run_id, effect_id = shop.parked("t-csrf-origin")
    csrf = login(client, ADMIN)
    token = _redelivery_token(client, run_id, effect_id)
    before = _state(shop, run_id)
    for headers in (
        {"Origin": FOREIGN},
        {"Origin": "http://testserver.evil.example"},
        {"Origin": "https://testserver"},  # another scheme is another origin
        {"Origin": "null"},
        {"Origin": FOREIGN, "Referer": f"{ORIGIN}/ui/runs"},  # Origin decides
        {"Referer": f"{FOREIGN}/attack.html"},
        {},  # neither: refused too
    ):
        client.headers.pop("Origin", None)
        for url, data in _forms(run_id, effect_id, token):
            refused = client.post(url, data={**data, "csrf": csrf}, headers=headers)
            assert refused.status_code == 403, (url, headers, refused.text)
            assert "did not come from a page of this server" in refused.text
            assert "reload it and submit the form again" in refused.text
        out = client.post("/ui/logout", data={"csrf": csrf}, headers=headers)
        assert out.status_code == 403 and COOKIE not in out.headers.get("set-cookie", "")
    assert _state(shop, run_id) == before
    # the same form from the UI's own page (its Origin, or only its Referer) does act
    client.headers.pop("Origin", None)
    done = client.post(
        f"/ui/runs/{run_id}/replay",
        data={"mode": "evidence", "reason": "from the page", "csrf": csrf},
        headers={"Referer": f"{ORIGIN}/ui/runs/{run_id}"},
        follow_redirects=False,
    )
    assert done.status_code == 303, done.text
    assert [a.action for a in shop.app.audit(run_id=run_id)] == ["replay"]


def test_a_command_without_the_login_s_form_token_changes_nothing(
    shop: Shop, client: TestClient
) -> None:
    run_id, effect_id = shop.parked("t-csrf-token")
    operator_token = login(client, OPERATOR)
    csrf = login(client, ADMIN)
    assert operator_token != csrf  # bound to the login
    token = _redelivery_token(client, run_id, effect_id)
    before = _state(shop, run_id)
    offline = hashlib.sha256(ADMIN.encode()).hexdigest()
    for sent in (None, "", "x", csrf[:-1], csrf + "A", operator_token, offline):
        for url, data in _forms(run_id, effect_id, token):
            body = data if sent is None else {**data, "csrf": sent}
            refused = client.post(url, data=body)
            assert refused.status_code == 403, (url, sent, refused.text)
            assert "Reload the page and submit the form again" in refused.text
            assert 'id="back"' in refused.text
    assert _state(shop, run_id) == before
    assert client.get("/ui/runs").status_code == 200  # still logged in: logout refused too
    out = client.post("/ui/logout", data={"csrf": operator_token}, follow_redirects=False)
    assert out.status_code == 403
    # the page's own token acts
    done = client.post(
        f"/ui/runs/{run_id}/replay",
        data={"mode": "evidence", "reason": "from the page", "csrf": csrf},
        follow_redirects=False,
    )
    assert done.status_code == 303, done.text
    assert [a.action for a in shop.app.audit(run_id=run_id)] == ["replay"]
    out = client.post("/ui/logout", data={"csrf": csrf}, follow_redirects=False)
    assert out.status_code == 303


def test_a_login_forced_from_another_origin_sets_no_cookie(sqlite_client: TestClient) -> None:
    client = sqlite_client
    for headers in ({"Origin": FOREIGN}, {}):
        forced = client.post(
            "/ui/login", data={"key": OPERATOR}, headers=headers, follow_redirects=False
        )
        assert forced.status_code == 403 and "set-cookie" not in forced.headers
        assert "Reload the page and log in again" in forced.text
    ok = client.post(
        "/ui/login", data={"key": OPERATOR}, headers={"Origin": ORIGIN}, follow_redirects=False
    )
    assert ok.status_code == 303 and COOKIE in ok.headers["set-cookie"]


def test_behind_a_proxy_only_the_configured_public_origins_may_post(
    sqlite_shop: Shop,
) -> None:
    run_id, _ = sqlite_shop.parked("t-csrf-proxy")
    with client_for(sqlite_shop, origins=["https://ops.example.com/"]) as client:
        csrf = login(client, OPERATOR, origin="https://ops.example.com")
        for origin in (ORIGIN, "http://ops.example.com", "https://ops.example.com:8443"):
            refused = client.post(
                f"/ui/runs/{run_id}/abandon",
                data={"reason": "r", "csrf": csrf},
                headers={"Origin": origin},
            )
            assert refused.status_code == 403
        assert sqlite_shop.app.audit(run_id=run_id) == []
        done = client.post(
            f"/ui/runs/{run_id}/abandon",
            data={"reason": "through the proxy", "csrf": csrf},
            headers={"Origin": "https://OPS.example.com:443"},
            follow_redirects=False,
        )
        assert done.status_code == 303
    assert [a.action for a in sqlite_shop.app.audit(run_id=run_id)] == ["abandon"]
    for bad in ("ops.example.com", "https://ops.example.com/ui", "ftp://x", "https://a?b"):
        with pytest.raises(ConfigError, match="not an origin"):
            create_app(sqlite_shop.app, keys={ADMIN: "admin"}, origins=[bad])


def test_every_response_carries_the_security_headers(sqlite_shop: Shop) -> None:
    run_id, _ = sqlite_shop.parked("t-headers")
    with client_for(sqlite_shop, auth_rate=0.01, auth_burst=5) as client:
        csrf = login(client, VIEWER)
        answers = {
            "ui page": client.get(f"/ui/runs/{run_id}"),
            "login page": client.get("/ui/login"),
            "redirect": client.get("/ui", follow_redirects=False),
            "error page": client.get("/ui/runs/nope"),
            "refused form": client.post(f"/ui/runs/{run_id}/abandon", data={"csrf": "x"}),
            "json": client.get("/api/runs", headers=auth(VIEWER)),
            "health": client.get("/api/health"),
            "openapi": client.get("/openapi.json"),
            "401": client.get("/api/runs"),
            "404": client.get("/api/nope", headers=auth(VIEWER)),
            "static js": client.get("/static/oncegraph.js"),
            "static css": client.get("/static/oncegraph.css"),
        }
        client.cookies.clear()
        for _ in range(10):  # guesses from one address: limited within auth_burst
            limited = client.get("/api/runs", headers=auth("not-a-key-at-all"))
            if limited.status_code == 429:
                break
        answers["429"] = limited
        assert csrf
    assert answers["429"].status_code == 429 and answers["401"].status_code == 401
    for what, answer in answers.items():
        h = answer.headers
        assert h["content-security-policy"] == CSP, what
        assert "frame-ancestors 'none'" in h["content-security-policy"]
        assert "script-src 'self'" in h["content-security-policy"]
        assert h["x-frame-options"] == "DENY", what
        assert h["x-content-type-options"] == "nosniff", what
        assert h["referrer-policy"] == "same-origin", what
        if not what.startswith("static"):
            assert "no-store" in h["cache-control"], what
    assert answers["static js"].headers["content-type"].startswith("text/javascript")


def test_the_ui_pages_need_no_inline_script_or_style() -> None:
    """What the policy forbids is not in the templates: no inline script or handler, no
    style attribute or element (the browser test checks no violation is reported)."""
    from pathlib import Path

    import oncegraph.server

    for template in (Path(oncegraph.server.__file__).parent / "templates").glob("*.html"):
        html = template.read_text()
        for forbidden in ("<script>", "<style", "style=", " onclick", " onload", "javascript:"):
            assert forbidden not in html, (template.name, forbidden)
        assert html.count("<script") == html.count('<script src="/static/')


def test_no_link_or_message_comes_from_the_request(shop: Shop, client: TestClient) -> None:
    run_id, effect_id = shop.parked("t-no-text")
    csrf = login(client, OPERATOR)
    # the error page's link is in the UI, never the Referer
    page = client.get("/ui/runs/nope", headers={"Referer": "https://evil.example/phish"})
    assert page.status_code == 404 and "evil.example" not in page.text
    assert 'href="/ui/runs/nope"' in page.text or 'href="/ui/runs"' in page.text
    # a ?msg= in the URL is not shown
    lure = "Your key expired: log in again at https://evil.example"
    shown = client.get(f"/ui/runs/{run_id}", params={"msg": lure})
    assert lure not in shown.text and "evil.example" not in shown.text
    assert 'id="flash"' not in shown.text
    # a command's message comes back once, from a signed cookie, never in the URL
    done = client.post(
        f"/ui/runs/{run_id}/effects/{effect_id}/resolve",
        data={"outcome": "done", "reason": "seen at the PSP", "csrf": csrf},
        follow_redirects=False,
    )
    assert done.status_code == 303 and done.headers["location"] == f"/ui/runs/{run_id}"
    cookie = done.headers["set-cookie"]
    assert FLASH in cookie and "httponly" in cookie.lower() and "samesite=strict" in cookie.lower()
    first = client.get(f"/ui/runs/{run_id}")
    assert f"Effect {effect_id} resolved: completed." in first.text
    again = client.get(f"/ui/runs/{run_id}")
    assert "resolved: completed" not in again.text  # shown once
    # a flash cookie this server did not write for this login is ignored (another page of
    # the same site can set cookies for this host)
    sealed = cookie.split(f"{FLASH}=", 1)[1].split(";", 1)[0].strip('"')
    body = sealed.split(".")[0]
    for planted in (f"{body}.forged", "Your key expired: log in again at https://evil.example"):
        client.cookies.set(FLASH, planted, path="/ui/")
        page = client.get(f"/ui/runs/{run_id}").text
        assert 'id="flash"' not in page and "evil.example" not in page
    login(client, ADMIN)  # the operator's message, read by another login
    client.cookies.set(FLASH, sealed, path="/ui/")
    assert 'id="flash"' not in client.get(f"/ui/runs/{run_id}").text


def test_a_redelivery_token_made_without_a_preview_is_refused_by_the_api_and_the_ui(
    shop: Shop, client: TestClient
) -> None:
    run_id, effect_id = shop.parked("t-offline-token")
    before = _state(shop, run_id)
    url = f"/api/runs/{run_id}/effects/{effect_id}/redeliver"
    offline = [
        hashlib.sha256(f"{effect_id}:{v}:{n}:{effect_id}".encode()).hexdigest()[:32]
        for v in range(1, 10)
        for n in (False, True)
    ]
    for token in offline:
        refused = client.post(
            url, headers=auth(ADMIN), json={"reason": "no preview", "confirm": token}
        )
        assert refused.status_code == 409 and "not one that a preview" in refused.text
    csrf = login(client, ADMIN)
    for token in offline:
        refused = client.post(
            f"/ui/runs/{run_id}/effects/{effect_id}/redeliver",
            data={"confirmed": "yes", "token": token, "reason": "no preview", "csrf": csrf},
        )
        assert refused.status_code == 409 and "not one that a preview" in refused.text
    missing = client.post(
        f"/ui/runs/{run_id}/effects/{effect_id}/redeliver",
        data={"confirmed": "yes", "reason": "no preview", "csrf": csrf},
    )
    assert missing.status_code == 400 and "confirmation from the preview is missing" in missing.text
    assert _state(shop, run_id) == before


def test_a_preview_token_is_its_actor_s_alone_over_the_api(sqlite_shop: Shop) -> None:
    run_id, effect_id = sqlite_shop.parked("t-two-admins")
    keys = {ADMIN: {"role": "admin", "name": "ada"}, "second-admin-key": "admin#bob"}
    url = f"/api/runs/{run_id}/effects/{effect_id}/redeliver"
    with TestClient(create_app(sqlite_shop.app, keys=keys)) as client:
        preview = client.post(url, headers=auth(ADMIN), json={"reason": "look"}).json()
        token = preview["preview"]["token"]
        before = _state(sqlite_shop, run_id)
        stolen = client.post(
            url, headers=auth("second-admin-key"), json={"reason": "r", "confirm": token}
        )
        assert stolen.status_code == 409 and "another actor" in stolen.text
        assert _state(sqlite_shop, run_id) == before
        sent = client.post(url, headers=auth(ADMIN), json={"reason": "r", "confirm": token})
        assert sent.status_code == 200 and sent.json()["sent"] is True
        again = client.post(url, headers=auth(ADMIN), json={"reason": "r", "confirm": token})
        assert again.status_code == 409 and "changed since the preview" in again.text
