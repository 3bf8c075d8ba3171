"""The web UI's pages and forms over HTTP (no browser): login, role gating, refusals.

The browser test (test_ui_browser.py) walks the commands; these check what a page
offers each role and that a form the role may not use is refused with nothing done.
"""

from __future__ import annotations

import re
from typing import Any

from shop import ADMIN, OPERATOR, VIEWER, Shop
from starlette.testclient import TestClient

from oncegraph.server.auth import COOKIE

ORIGIN = "http://testserver"  # the TestClient's own origin: its pages' forms come from it


def form_token(html: str) -> str:
    """The form token a UI page gives its forms."""
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found is not None, "the page has no form token"
    return found.group(1)


def login(client: TestClient, key: str, origin: str = ORIGIN) -> str:
    """Log in as a browser on the UI's own page would; returns the login's form token."""
    client.cookies.clear()
    client.headers["Origin"] = origin
    done = client.post("/ui/login", data={"key": key, "next": "/ui/runs"}, follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"] == "/ui/runs"
    cookie = done.headers["set-cookie"]
    assert "httponly" in cookie.lower() and "samesite=strict" in cookie.lower()
    client.cookies.set(COOKIE, key)
    return form_token(client.get("/ui/runs").text)


def test_the_ui_asks_for_a_key_once_and_keeps_it(sqlite_client: TestClient) -> None:
    client = sqlite_client
    client.headers["Origin"] = ORIGIN
    first = client.get("/ui/runs", follow_redirects=False)
    assert first.status_code == 303 and first.headers["location"].startswith("/ui/login")
    assert client.get("/", follow_redirects=False).headers["location"] == "/ui/runs"
    wrong = client.post("/ui/login", data={"key": "not-the-key"}, follow_redirects=False)
    assert wrong.status_code == 401 and "not valid" in wrong.text
    away = client.post(
        "/ui/login",
        data={"key": VIEWER, "next": "https://elsewhere.example/"},
        follow_redirects=False,
    )
    assert away.headers["location"] == "/ui/runs"  # never sent off-site
    token = login(client, VIEWER)
    assert client.get("/ui/runs").status_code == 200
    out = client.post("/ui/logout", data={"csrf": token}, follow_redirects=False)
    assert out.status_code == 303 and COOKIE in out.headers["set-cookie"]
    assert client.get("/static/oncegraph.js").status_code == 200
    assert client.get("/static/oncegraph.css").status_code == 200


def test_each_role_sees_only_its_commands(sqlite_shop: Shop, sqlite_client: TestClient) -> None:
    client = sqlite_client
    run_id, _ = sqlite_shop.parked("t-ui-roles")
    page = f"/ui/runs/{run_id}"

    login(client, VIEWER)
    html = client.get(page).text
    assert 'id="read-only"' in html and "data-command=" not in html
    login(client, OPERATOR)
    html = client.get(page).text
    for command in ("continue", "replay", "branch", "abandon", "resolve"):
        assert f'data-command="{command}"' in html
    # the refund tool has no reconcile hook: nothing to ask the recipient with
    assert 'data-command="check"' not in html
    assert 'data-command="redeliver"' not in html and "Retry" not in html
    login(client, ADMIN)
    html = client.get(page).text
    # Redeliver only on the command sent to the payments recipient, not on model calls
    sent = [e for e in sqlite_shop.app.effects(run_id=run_id) if e.effect_class == "irreversible"]
    assert len(sent) == 1 and len(sqlite_shop.app.effects(run_id=run_id)) > 1
    assert html.count('data-command="redeliver"') == 1
    card = html[html.index(f'data-effect-id="{sent[0].effect_id}"') :]
    assert card.index('data-command="redeliver"') < card.index("</article>")

    runs = client.get("/ui/runs").text
    assert runs.index(run_id) < runs.index("</tbody>")
    assert client.get("/ui/runs?status=needs_review").text.count("data-run-id=") == 1
    assert client.get("/ui/runs?status=bogus").status_code == 400


def test_a_form_the_role_may_not_use_is_refused_and_nothing_happens(
    sqlite_shop: Shop, sqlite_client: TestClient
) -> None:
    client = sqlite_client
    run_id, effect_id = sqlite_shop.parked("t-ui-refused")
    charges = sqlite_shop.performed()
    effect = f"/ui/runs/{run_id}/effects/{effect_id}"

    csrf = login(client, VIEWER)
    refused = client.post(
        f"{effect}/resolve", data={"outcome": "done", "reason": "r", "csrf": csrf}
    )
    assert refused.status_code == 403 and "operator" in refused.text
    refused = client.post(f"/ui/runs/{run_id}/continue", data={"reason": "r", "csrf": csrf})
    assert refused.status_code == 403

    csrf = login(client, OPERATOR)
    assert client.get(f"{effect}/redeliver").status_code == 403
    refused = client.post(
        f"{effect}/redeliver",
        data={"reason": "r", "confirmed": "yes", "token": "x", "csrf": csrf},
    )
    assert refused.status_code == 403
    bad = client.post(
        f"/ui/runs/{run_id}/branch", data={"patch": "{oops", "reason": "r", "csrf": csrf}
    )
    assert bad.status_code == 400 and "not valid JSON" in bad.text
    bad = client.post(
        f"/ui/runs/{run_id}/branch", data={"patch": "{}", "reason": "", "csrf": csrf}
    )
    assert bad.status_code == 400 and "reason" in bad.text
    assert client.get("/ui/runs/run_nope").status_code == 404

    csrf = login(client, ADMIN)
    unconfirmed = client.post(
        f"{effect}/redeliver", data={"reason": "r", "token": "x", "csrf": csrf}
    )
    assert unconfirmed.status_code == 400 and "confirmation" in unconfirmed.text
    stale = client.post(
        f"{effect}/redeliver",
        data={"reason": "r", "confirmed": "yes", "token": "stale", "csrf": csrf},
    )
    assert stale.status_code == 409 and "not one that a preview" in stale.text

    assert sqlite_shop.performed() == charges
    assert sqlite_shop.app.audit(run_id=run_id) == []
    assert sqlite_shop.app.get_run(run_id).status == "needs_review"


def test_an_interrupted_run_is_answered_from_its_page(tmp_path: Any) -> None:
    from pathlib import Path

    from oncegraph.server import create_app
    from oncegraph.server.loading import compiled, load_target

    example = Path(__file__).resolve().parents[2] / "examples" / "support_agent_approval.py"
    app = compiled(load_target(f"{example}:app"), str(tmp_path / "approval.db"))
    ask = {"messages": [{"role": "user", "content": "Refund order 1042."}]}
    app.invoke(ask, {"thread_id": "ui-ask"})
    (run,) = app.runs(thread_id="ui-ask")
    assert run.status == "interrupted"
    with TestClient(create_app(app, keys={OPERATOR: "operator"})) as client:
        login(client, OPERATOR)
        page = client.get(f"/ui/runs/{run.run_id}").text
        # the page shows what is asked: the call to approve, with its arguments
        asked = page[page.index('id="questions"') : page.index('id="commands"')]
        assert "refund_order" in asked and "1042" in asked and "59.0" in asked
        # and asks for a decision per call, not for a JSON value prefilled with null
        assert 'name="decision_0"' in page and "null</textarea>" not in page
        for choice in ("approve", "edit", "reject"):
            assert f'name="decision_0" value="{choice}"' in page
        undecided = client.post(
            f"/ui/runs/{run.run_id}/continue",
            data={"answer_kind": "approval", "csrf": form_token(page)},
        )
        assert undecided.status_code == 400 and "Approve, Edit or Reject" in undecided.text
        assert app.get_run(run.run_id).status == "interrupted"
        done = client.post(
            f"/ui/runs/{run.run_id}/continue",
            data={
                "answer_kind": "approval",
                "decision_0": "approve",
                "reason": "approved",
                "csrf": form_token(page),
            },
        )
        assert done.status_code == 200 and "the run is completed" in done.text
        bad = client.post(
            f"/ui/runs/{run.run_id}/continue",
            data={"answer": "{nope", "csrf": form_token(page)},
        )
        assert bad.status_code == 400
    assert app.get_run(run.run_id).status == "completed"
    (approval,) = app.get_state({"thread_id": "ui-ask"}).values["approvals"]
    assert approval["decision"] == "approve" and approval["approver"].startswith("api:operator")
    app.close()


def test_the_runs_page_goes_on_to_older_runs(
    sqlite_shop: Shop, sqlite_client: TestClient, monkeypatch: Any
) -> None:
    """A full page of runs links to the next ("Older runs", after its last run, keeping
    the status filter); the last page has no such link."""
    from oncegraph.server import ui

    monkeypatch.setattr(ui, "RUNS_PAGE", 2)
    made = [sqlite_shop.completed(f"t-page-{i}") for i in range(3)]
    client = sqlite_client
    login(client, VIEWER)
    first = client.get("/ui/runs?status=completed").text
    assert [r for r in made if r in first] == made[1:]
    link = first.split('data-older')[0].rsplit('href="', 1)[1].split('"')[0]
    assert link == f"/ui/runs?status=completed&amp;before={made[1]}"
    second = client.get(link.replace("&amp;", "&")).text
    assert [r for r in made if f'data-run-id="{r}"' in second] == made[:1]
    assert "data-older" not in second
