"""The operator web UI in a real browser: Debian's Chromium driven by Playwright.

Opens the UI, finds the ``needs_review`` run, checks that the commands are distinct
and role-gated (a viewer sees none, an operator no Redeliver), resolves the effect,
creates an evidence replay and a branch, redelivers as admin, and saves a screenshot of
each page under the test's tmp directory. No browser is downloaded: the test launches
the system's ``chromium`` (``.ci/run`` installs it) and skips only where there is none,
never with ``CI=true``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from shop import ADMIN, CARD, OPERATOR, VIEWER, Shop

from conftest import Live


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
    assert viewer.page.locator(f"tr[data-effect-id='{effect_id}']").is_visible()
    viewer.shot("run-viewer")
    viewer.close()

    # an operator has each command apart, and no Redeliver
    op = Operator(browser, live, OPERATOR, shots)
    op.open_needs_review()
    commands = op.commands()
    assert commands == ["continue", "replay", "branch", "abandon", "resolve", "check"]
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
    row = op.page.locator(f"#effects tr[data-effect-id='{effect_id}']")
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
    admin.page.click(f"tr[data-effect-id='{effect_id}'] a[data-command=redeliver]")
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
    admin.close()
    assert len(list(shots.glob("*.png"))) >= 9
    print(f"screenshots: {shots}")
