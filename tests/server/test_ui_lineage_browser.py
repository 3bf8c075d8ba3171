"""A run's lineage in the operator UI, in a real browser (Debian's Chromium, Playwright).

A completed run gets three children: an evidence replay and a branch an operator made
with a reason each, and a time-travel fork (LangGraph's ``invoke(None, {"checkpoint_id":
old})``), which parks on the irreversible refund. The parent's page lists each child with
what made it and why; each child's page names its parent, what it was made as, who made
it and the operator's reason (its own audit record). Screenshots go under the test's tmp
directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from shop import OPERATOR, Shop
from test_ui_browser import Operator, browser  # noqa: F401 - the browser fixture

from conftest import Live
from oncegraph.errors import NeedsReviewError


def test_the_run_page_shows_parent_children_and_reasons(
    browser: Any,  # noqa: F811 - the fixture imported above
    live: Live,
    sqlite_shop: Shop,
    tmp_path: Path,
) -> None:
    shots = tmp_path / "screenshots"
    shots.mkdir()
    app = sqlite_shop.app
    run_id = sqlite_shop.completed("t-lineage")
    replayed = app.replay(run_id, mode="evidence", reason="check the 1042 refund", actor="ana")
    branched = app.branch(run_id, patch={}, reason="customer asked for a retry", actor="bo")
    before_tools = next(
        s for s in app.get_state_history({"thread_id": "t-lineage"}) if s.next == ("tools",)
    )
    with pytest.raises(NeedsReviewError):
        app.invoke(None, before_tools.config)  # time travel: live, the refund is blocked
    (travelled,) = [r for r in app.runs(thread_id="t-lineage") if r.run_id != run_id]
    charges = sqlite_shop.performed()

    op = Operator(browser, live, OPERATOR, shots)
    page = op.page
    page.goto(f"/ui/runs/{run_id}")
    assert page.locator("#made-as").count() == 0  # an original run was made by nobody
    rows = {
        str(page.locator("#children li").nth(i).get_attribute("data-child")): (
            page.locator("#children li").nth(i).locator("[data-lineage=kind]").inner_text(),
            page.locator("#children li").nth(i).locator("[data-lineage=reason]").inner_text(),
        )
        for i in range(page.locator("#children li").count())
    }
    assert rows == {
        replayed.run_id: ("replay", "check the 1042 refund"),
        branched.run_id: ("branch", "customer asked for a retry"),
        travelled.run_id: ("time travel", "time_travel"),
    }
    op.shot("lineage-parent")

    page.click(f"#children li[data-child='{replayed.run_id}'] a[data-lineage=child]")
    page.wait_for_url(f"**/ui/runs/{replayed.run_id}")
    assert page.locator("a[data-lineage=parent]").inner_text() == run_id
    made = page.locator("#made-as")
    assert made.locator("[data-lineage=kind]").inner_text() == "replay"
    assert made.locator("[data-lineage=actor]").inner_text() == "ana"
    assert made.locator("[data-lineage=reason]").inner_text() == "check the 1042 refund"
    assert "(evidence)" in made.inner_text()
    op.shot("lineage-replay")

    page.goto(f"/ui/runs/{travelled.run_id}")
    assert page.inner_text("#run-status") == "needs_review"
    made = page.locator("#made-as")
    assert made.locator("[data-lineage=kind]").inner_text() == "time travel"
    assert "(live)" in made.inner_text()
    assert page.locator("a[data-lineage=parent]").inner_text() == run_id
    op.shot("lineage-time-travel")

    assert sqlite_shop.performed() == charges  # looking sends nothing
    assert op.violations == []
    op.close()
    assert len(list(shots.glob("*.png"))) == 3
