"""The operator web UI in a real browser: Debian's Chromium driven by Playwright.

Opens the UI, finds the ``needs_review`` run, checks that the commands are distinct
and role-gated (a viewer sees none, an operator no Redeliver), resolves the effect,
creates an evidence replay and a branch, redelivers as admin, and saves a screenshot of
each page under the test's tmp directory; the pages' own script works under the
server's Content-Security-Policy, which the browser reports no violation of. Then a page
served from another port of the same host (the same site: the login cookie goes with its
requests) posts every command form with the admin's cookie, and nothing happens; nor can
it frame the UI. No browser is downloaded: the test launches the system's ``chromium``
(``.ci/run`` installs it) and skips only where there is none, never with ``CI=true``.
"""

from __future__ import annotations

import functools
import hashlib
import html
import http.server
import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from shop import ADMIN, CARD, OPERATOR, VIEWER, Shop, auth

from conftest import Live, free_port


def _chromium() -> str | None:
    found = os.environ.get("ONCEGRAPH_CHROMIUM") or shutil.which("chromium")
    if found is None and Path("/usr/bin/chromium").exists():
        found = "/usr/bin/chromium"
    return found


def _unavailable(why: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"browser tests must run under CI=true: {why}")
    pytest.skip(why)


@pytest.fixture
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("playwright is not installed (pip install -e '.[dev]')")
    path = _chromium()
    if path is None:
        _unavailable("no Chromium here (apt-get install -y chromium, or ONCEGRAPH_CHROMIUM)")
    with sync_playwright() as p:
        found = p.chromium.launch(
            executable_path=path, headless=True, args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        try:
            yield found
        finally:
            found.close()


class Operator:
    """One person at the UI with one key; screenshots go to ``shots``."""

    def __init__(self, browser: Any, live: Live, key: str, shots: Path) -> None:
        self.context = browser.new_context(base_url=live.url)
        self.page = self.context.new_page()
        self.shots = shots
        self.violations: list[str] = []  # what the browser says the policy blocked
        self.page.on(
            "console",
            lambda m: (
                self.violations.append(m.text) if "Content Security Policy" in m.text else None
            ),
        )
        self.page.goto("/ui/runs")
        assert "/ui/login" in self.page.url  # no key yet: the login page
        self.page.fill("input[name=key]", key)
        self.page.click("button[type=submit]")
        self.page.wait_for_url("**/ui/runs")

    def shot(self, name: str) -> None:
        self.page.screenshot(path=str(self.shots / f"{name}.png"), full_page=True)

    def open_needs_review(self) -> str:
        page = self.page
        page.goto("/ui/runs")
        first = page.locator("table.runs tbody tr").first
        assert first.get_attribute("data-status") == "needs_review"  # needs_review first
        page.click("a[data-filter=needs_review]")
        rows = page.locator("table.runs tbody tr")
        assert rows.count() == 1
        run_id = str(rows.first.get_attribute("data-run-id"))
        rows.first.locator("a").first.click()
        page.wait_for_url(f"**/ui/runs/{run_id}")
        assert page.inner_text("#run-status") == "needs_review"
        return run_id

    def commands(self) -> list[str]:
        found = self.page.locator("[data-command]")
        return [str(found.nth(i).get_attribute("data-command")) for i in range(found.count())]

    def close(self) -> None:
        self.context.close()


def test_operators_work_a_parked_run_in_the_browser(
    browser: Any, live: Live, sqlite_shop: Shop, tmp_path: Path
) -> None:
    shots = tmp_path / "screenshots"
    shots.mkdir()
    run_id, effect_id = sqlite_shop.parked("t-ui")
    sqlite_shop.completed("t-ui-done")
    charges = sqlite_shop.performed()

    # a viewer reads, masked, and has no command at all
    viewer = Operator(browser, live, VIEWER, shots)
    viewer.shot("runs-viewer")
    assert viewer.open_needs_review() == run_id
    assert viewer.commands() == []
    assert viewer.page.locator("#read-only").is_visible()
    assert viewer.page.locator("button", has_text="Retry").count() == 0
    assert CARD not in viewer.page.content()
    assert viewer.page.locator(f"article[data-effect-id='{effect_id}']").is_visible()
    viewer.shot("run-viewer")
    viewer.close()

    # an operator has each command apart, and no Redeliver
    op = Operator(browser, live, OPERATOR, shots)
    op.open_needs_review()
    commands = op.commands()
    # no Check at recipient: the refund tool has no reconcile hook to ask with
    assert commands == ["continue", "replay", "branch", "abandon", "resolve"]
    labels = [
        op.page.locator(f"[data-command={c}] button[type=submit]").inner_text() for c in commands
    ]
    assert len(set(labels)) == len(labels) and not any("Retry" in t for t in labels)
    assert op.page.locator("[data-command=redeliver]").count() == 0
    op.shot("run-operator")

    # Resolve effect: done, with a reason
    resolve = op.page.locator("form[data-command=resolve]")
    resolve.locator("input[value=done]").check()
    resolve.locator("input[name=provider_reference]").fill("ch_seen")
    resolve.locator("input[name=reason]").fill("seen in the PSP dashboard")
    resolve.locator("button[type=submit]").click()
    op.page.wait_for_selector("#flash")
    assert "resolved: completed" in op.page.inner_text("#flash")
    row = op.page.locator(f"#effects article[data-effect-id='{effect_id}']")
    assert row.get_attribute("data-status") == "completed"
    assert row.locator("form[data-command=resolve]").count() == 0  # nothing left to resolve
    op.shot("resolved")

    # Continue the resolved run: it completes with the recorded result, no new charge
    op.page.goto(f"/ui/runs/{run_id}")
    op.page.locator("form[data-command=continue] input[name=reason]").fill("resolved")
    op.page.locator("form[data-command=continue] button[type=submit]").click()
    op.page.wait_for_selector("#flash")
    assert op.page.inner_text("#run-status") == "completed"
    assert op.page.locator("form[data-command=continue]").count() == 0
    assert sqlite_shop.performed() == charges
    op.shot("continued")

    # Create replay: evidence is the default mode
    replay = op.page.locator("form[data-command=replay]")
    assert replay.locator("input[name=mode][value=evidence]").is_checked()
    replay.locator("input[name=reason]").fill("check the resolved refund")
    replay.locator("button[type=submit]").click()
    op.page.wait_for_selector("#flash")
    assert "Replay (evidence) created; the run is completed." in op.page.inner_text("#flash")
    replay_id = op.page.inner_text("#run-id")
    assert replay_id != run_id
    assert op.page.locator("a[data-lineage=parent]").inner_text() == run_id
    op.shot("replay")

    # Create branch with changes: the patch is previewed, a reason is required
    op.page.goto(f"/ui/runs/{run_id}")
    branch = op.page.locator("form[data-command=branch]")
    branch.locator("textarea[name=patch]").fill("{not json")
    assert branch.locator("button[type=submit]").is_disabled()
    patch = '{"messages": [{"role": "user", "content": "and order 1043"}]}'
    branch.locator("textarea[name=patch]").fill(patch)
    assert "and order 1043" in branch.locator(".patch-preview").inner_text()
    branch.locator("input[name=reason]").fill("customer added an order")
    op.shot("branch-form")
    branch.locator("button[type=submit]").click()
    op.page.wait_for_selector("#branch-diff")
    assert "and order 1043" in op.page.inner_text("#branch-diff")
    branch_id = op.page.inner_text("#branch-run")
    op.shot("branch-created")
    op.page.click("#branch-run")
    assert op.page.inner_text("#run-status") == "paused"
    assert op.page.locator("form[data-command=continue]").count() == 1  # paused: continuable

    # the original run lists both children
    op.page.goto(f"/ui/runs/{run_id}")
    children = op.page.locator("a[data-lineage=child]")
    assert {children.nth(i).inner_text() for i in range(children.count())} == {
        replay_id,
        branch_id,
    }
    op.close()

    # an admin alone can redeliver: a preview first, then a confirmation and a reason
    admin = Operator(browser, live, ADMIN, shots)
    admin.page.goto(f"/ui/runs/{run_id}")
    admin.page.click(f"article[data-effect-id='{effect_id}'] a[data-command=redeliver]")
    admin.page.wait_for_selector("#redeliver-preview")
    preview = admin.page.locator("#redeliver-preview")
    assert preview.locator("[data-field=recipient]").inner_text() == "payments"
    assert preview.locator("[data-field=effect_id]").inner_text() == effect_id
    assert preview.locator("[data-field=status]").inner_text() == "completed"
    assert "resolved_done" in preview.locator("[data-field=last_attempt]").inner_text()
    assert preview.locator("[data-field=dedup]").inner_text().startswith("same key ")
    assert '"card": "***"' in preview.locator("[data-field=payload]").inner_text()
    assert sqlite_shop.performed() == charges  # the preview sent nothing
    admin.shot("redeliver-preview")
    form = admin.page.locator("form[data-command=redeliver-confirm]")
    form.locator("input[name=reason]").fill("customer asked again")
    form.locator("input[name=confirmed]").check()
    form.locator("button[type=submit]").click()
    admin.page.wait_for_selector("#flash")
    assert "redelivered" in admin.page.inner_text("#flash")
    assert sqlite_shop.performed() == charges  # same key: the provider deduplicated it
    admin.shot("redelivered")
    actions = [a.action for a in sqlite_shop.app.audit(run_id=run_id)]
    assert {"resolve_effect", "replay", "branch", "continue", "redeliver"} <= set(actions)
    assert op.violations == [] and admin.violations == [] and viewer.violations == []
    admin.close()
    assert len(list(shots.glob("*.png"))) >= 9
    print(f"screenshots: {shots}")


@pytest.fixture
def elsewhere(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """Another web server on another port of 127.0.0.1 (the same site as the UI's)."""
    root = tmp_path / "elsewhere"
    root.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    thread = threading.Thread(target=server.serve_forever, name="elsewhere", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", root
    finally:
        server.shutdown()
        server.server_close()


def _attack_page(ui: str, run_id: str, effect_id: str, token: str, csrf: str) -> str:
    """Every command form of the UI, posted at once by a page that is not the UI's: into
    hidden frames (forms) and by ``fetch`` (no-cors, cookies included)."""
    effect = f"/ui/runs/{run_id}/effects/{effect_id}"
    forms = [
        (f"/ui/runs/{run_id}/continue", {"reason": "forged"}),
        (f"/ui/runs/{run_id}/replay", {"mode": "live", "reason": "forged: live replay"}),
        (f"/ui/runs/{run_id}/branch", {"patch": "{}", "reason": "forged"}),
        (f"/ui/runs/{run_id}/abandon", {"reason": "forged"}),
        (f"{effect}/resolve", {"outcome": "done", "reason": "forged"}),
        (f"{effect}/check", {"reason": "forged"}),
        (f"{effect}/redeliver", {"confirmed": "yes", "token": token, "reason": "forged"}),
        ("/ui/login", {"key": OPERATOR}),  # log the admin in as someone else
        ("/ui/logout", {}),
    ]
    parts = []
    for n, (path, fields) in enumerate(forms):
        inputs = "".join(
            f'<input name="{html.escape(k)}" value="{html.escape(v)}">'
            for k, v in {**fields, "csrf": csrf}.items()
        )
        parts.append(
            f'<iframe name="sink{n}"></iframe>'
            f'<form id="f{n}" method="post" target="sink{n}" action="{ui}{path}">{inputs}</form>'
        )
    bodies = [
        (f"{ui}{path}", "&".join(f"{k}={v}" for k, v in {**fields, "csrf": csrf}.items()))
        for path, fields in forms
    ]
    fetches = "".join(
        f"fetch({url!r}, {{method: 'POST', mode: 'no-cors', credentials: 'include', "
        f"headers: {{'Content-Type': 'application/x-www-form-urlencoded'}}, body: {body!r}}})"
        ".then(() => window.fetched++, () => window.fetched++);"
        for url, body in bodies
    )
    submits = "".join(f"document.getElementById('f{n}').submit();" for n in range(len(forms)))
    return (
        "<!doctype html><html><body>"
        + "".join(parts)
        + f'<iframe id="framed" src="{ui}/ui/runs"></iframe>'
        + f"<script>window.fetched = 0; {submits} {fetches}</script>"
        + "</body></html>"
    )


def test_a_page_on_another_port_drives_nothing(
    browser: Any, live: Live, sqlite_shop: Shop, elsewhere: tuple[str, Path], tmp_path: Path
) -> None:
    import httpx

    run_id, effect_id = sqlite_shop.parked("t-csrf")
    sqlite_shop.completed("t-csrf-done")
    app = sqlite_shop.app
    # a real preview token of the admin's (as if it leaked), and one computed offline
    preview = httpx.post(
        f"{live.url}/api/runs/{run_id}/effects/{effect_id}/redeliver",
        headers=auth(ADMIN),
        json={"reason": "looked"},
        timeout=30,
    ).json()["preview"]
    offline = hashlib.sha256(f"{effect_id}:2:False:{effect_id}".encode()).hexdigest()[:32]

    def state() -> tuple[Any, ...]:
        effects = [(e.effect_id, e.status, e.row_version) for e in app.effects(run_id=run_id)]
        audit = [(a.audit_id, a.action) for a in app.audit()]
        runs = sorted((r.run_id, r.status) for r in app.runs())
        return sqlite_shop.performed(), audit, runs, effects

    before = state()
    admin = Operator(browser, live, ADMIN, tmp_path)
    admin.page.goto(f"/ui/runs/{run_id}")
    redeliver = f"article[data-effect-id='{effect_id}'] a[data-command=redeliver]"
    assert admin.page.locator(redeliver).count() == 1  # logged in, as the admin
    url, root = elsewhere
    seen: list[tuple[str, int]] = []
    admin.page.on(
        "response",
        lambda r: seen.append((r.url, r.status)) if r.request.method == "POST" else None,
    )
    for n, (token, csrf) in enumerate([(preview["token"], "guessed"), (offline, "")]):
        (root / f"attack{n}.html").write_text(
            _attack_page(live.url, run_id, effect_id, token, csrf)
        )
        seen.clear()
        admin.page.goto(f"{url}/attack{n}.html")
        deadline = time.monotonic() + 60  # until every form and fetch was answered
        while len(seen) < 9 or admin.page.evaluate("window.fetched") < 9:
            assert time.monotonic() < deadline, f"not all answered: {seen}"
            admin.page.wait_for_timeout(100)
        assert {status for _, status in seen} == {403}, seen
        # the UI in a frame of the other page: the browser refused to show it
        framed = [f for f in admin.page.frames if f.url.startswith(f"{live.url}/ui")]
        for frame in framed:
            assert "data-run-id" not in frame.content()
        assert all('table class="runs"' not in f.content() for f in admin.page.frames[1:])
    admin.page.goto(f"/ui/runs/{run_id}")  # still the admin: no forced login or logout
    assert "ada · admin" in admin.page.inner_text("header")
    assert state() == before
    admin.close()
