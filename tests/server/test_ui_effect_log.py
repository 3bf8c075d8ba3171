"""The effect log as a view: a page of every effect across runs (filters, the counts of
effects that need review and that are pending), each effect's own page with only the
commands that apply, a picture of the graph with where the run is, and a running run's
page following the run live. Real Chromium through Playwright (see test_ui_browser.py),
screenshots under the test's tmp directory; the listing itself on SQLite and
PostgreSQL through the run service."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any, TypedDict

import pytest
from shop import ACME, ADMIN, CARD, GLOBEX, KEYS, OPERATOR, VIEWER, Shop
from starlette.testclient import TestClient
from test_ui_browser import Operator, browser  # noqa: F401 (the browser fixture)
from test_ui_operator_day import fits

from conftest import Live, start_live, stop_live
from oncegraph import END, START, StateGraph
from oncegraph.errors import ConfigError
from oncegraph.runs.effectlog import EffectQuery
from oncegraph.server import create_app
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import RunStatus

ORIGIN = {"origin": "http://testserver"}


def logged_in(client: TestClient, key: str) -> TestClient:
    answer = client.post("/ui/login", data={"key": key}, headers=ORIGIN, follow_redirects=False)
    assert answer.status_code == 303
    return client


def log(shop: Shop, **query: Any) -> Any:
    return asyncio.run(shop.app.service.effect_log(EffectQuery(**query)))


# -- the listing (the run service) ---------------------------------------------------------


def test_the_effect_log_lists_across_runs_with_filters_and_counts(shop: Shop) -> None:
    parked_run, parked_effect = shop.parked("t-parked")
    done_run = shop.completed("t-done")
    everything = log(shop)
    runs = {e.effect.run_id for e in everything.effects}
    assert runs == {parked_run, done_run}  # across runs, one listing
    created = [e.effect.created_at for e in everything.effects]
    assert created == sorted(created, reverse=True)  # newest first
    assert (everything.needs_review, everything.pending) == (1, 0)

    review = log(shop, statuses=("needs_review",))
    assert [e.effect.effect_id for e in review.effects] == [parked_effect]
    assert review.effects[0].needs_review and review.effects[0].run_status == "needs_review"
    assert CARD not in repr(review.effects[0].effect.request)  # masked

    refunds = log(shop, tool="refund")
    assert {e.effect.run_id for e in refunds.effects} == {parked_run, done_run}
    assert {e.effect.effect_type for e in refunds.effects} == {"refund"}
    assert log(shop, recipient="PAY").matched == 2  # a part of the name, any case
    assert log(shop, recipient="mail").effects == []
    assert log(shop, statuses=("completed",), tool="refund").matched == 1

    newest = max(created)
    assert log(shop, since=newest + 1).effects == []
    assert log(shop, until=min(created)).effects == []
    assert log(shop, limit=1).matched == len(everything.effects)
    assert len(log(shop, limit=1).effects) == 1
    with pytest.raises(ConfigError, match="unknown effect status"):
        EffectQuery(statuses=("stuck",))


def test_the_effect_log_keeps_to_its_app_and_tenant(shop: Shop, store: Checkpointer) -> None:
    shop.parked("acme:t1")
    shop.completed("globex:t2")
    other = _counter(store, "other-app")
    other.invoke({"messages": [{"role": "user", "content": "hi"}]}, {"thread_id": "t-other"})
    assert other.effects(thread_id="t-other")  # it has effects of its own

    acme = asyncio.run(shop.app.for_tenant("acme").service.effect_log(EffectQuery()))
    assert {e.effect.thread_id for e in acme.effects} == {"acme:t1"}
    assert acme.needs_review == 1
    whole = log(shop)
    assert {e.effect.thread_id for e in whole.effects} == {"acme:t1", "globex:t2"}
    assert log(shop, tenant="globex").needs_review == 0
    with pytest.raises(ConfigError, match="only that app's effects"):
        log(shop, app_id="other-app")


def _counter(store: Checkpointer, name: str) -> Any:
    """Another app on the same database: an agent whose one model call is an effect."""
    from oncegraph.prebuilt.agent import ReactAgent
    from oncegraph.prebuilt.models.scripted import ScriptedModel

    agent = ReactAgent(model=ScriptedModel.turns("Hello."), tools=[])
    return agent.graph().compile(checkpointer=store, name=name)


# -- the pages (in-process) ----------------------------------------------------------------


def test_a_tenant_key_sees_its_tenants_effects_only_and_bad_filters_are_pages(
    sqlite_shop: Shop,
) -> None:
    _, acme_effect = sqlite_shop.parked("acme:t1")
    _, other_effect = sqlite_shop.parked("t-untenanted")
    with TestClient(create_app(sqlite_shop.app, keys=KEYS)) as client:
        page = logged_in(client, ACME).get("/ui/effects").text
        assert acme_effect in page and other_effect not in page
        assert CARD not in page
    with TestClient(create_app(sqlite_shop.app, keys=KEYS)) as client:
        page = logged_in(client, GLOBEX).get("/ui/effects").text
        assert acme_effect not in page and other_effect not in page
        bad = client.get("/ui/effects?status=stuck")
        assert bad.status_code == 400 and "use one of" in bad.text
        bad = client.get("/ui/effects?since=yesterday")
        assert bad.status_code == 400 and "2026-12-01T09:30" in bad.text
    with TestClient(create_app(sqlite_shop.app, keys=KEYS)) as client:
        run = sqlite_shop.app.runs(thread_id="acme:t1")[0].run_id
        other = logged_in(client, GLOBEX).get(f"/ui/runs/{run}/effects/{acme_effect}")
        assert other.status_code == 404  # another tenant's effect: as if unknown


# -- in the browser ------------------------------------------------------------------------


def test_an_operator_finds_what_waits_for_a_person_in_the_effect_log(
    browser: Any,  # noqa: F811
    live: Live,
    sqlite_shop: Shop,
    tmp_path: Path,
) -> None:
    shots = tmp_path / "screenshots"
    shots.mkdir()
    run_id, effect_id = sqlite_shop.parked("t-parked")
    done = sqlite_shop.completed("t-done")

    op = Operator(browser, live, OPERATOR, shots)
    op.page.click("#nav-effects")
    op.page.wait_for_url("**/ui/effects")
    assert op.page.inner_text("[data-count=needs_review] strong") == "1"
    assert op.page.inner_text("[data-count=pending] strong") == "0"
    assert op.page.locator("table.effect-log tbody tr").count() == 5  # 2 refunds, 3 model calls
    op.shot("effect-log")
    for width in (1366, 800):
        op.page.set_viewport_size({"width": width, "height": 900})
        assert fits(op.page), f"the effect log overflows a {width} px window"
        op.shot(f"effect-log-{width}px")

    op.page.click("[data-count=needs_review]")
    rows = op.page.locator("table.effect-log tbody tr")
    assert rows.count() == 1 and rows.first.get_attribute("data-effect-id") == effect_id
    op.page.goto("/ui/effects")
    op.page.fill("#effect-filters input[name=tool]", "refund")
    op.page.click("#effect-filters button[type=submit]")
    assert op.page.locator("table.effect-log tbody tr").count() == 2
    op.page.select_option("#effect-filters select[name=status]", "completed")
    op.page.click("#effect-filters button[type=submit]")
    rows = op.page.locator("table.effect-log tbody tr")
    assert rows.count() == 1 and rows.first.get_attribute("data-status") == "completed"
    op.shot("effect-log-filtered")

    # the parked refund's own page: what is known, and Resolve only (its tool has no
    # hook to ask the recipient with; an operator cannot redeliver)
    op.page.goto("/ui/effects?status=needs_review")
    op.page.locator("a[data-open-effect]").first.click()
    op.page.wait_for_url(f"**/ui/runs/{run_id}/effects/{effect_id}")
    assert op.page.inner_text("#effect-status") == "needs review"
    assert "Check at the recipient" in op.page.inner_text("#needs-review")
    assert "none declared" not in op.page.inner_text("#effect-summary")
    assert op.page.inner_text("[data-field=recipient]") == "payments"
    assert "1042" in op.page.inner_text("[data-field=request]")
    assert CARD not in op.page.content()  # masked, for an operator too
    assert op.commands() == ["resolve"]
    for width in (1366, 800):
        op.page.set_viewport_size({"width": width, "height": 900})
        assert fits(op.page), f"the effect page overflows a {width} px window"
        op.shot(f"effect-needs-review-{width}px")

    form = op.page.locator("form[data-command=resolve]")
    form.locator("input[name=outcome][value=done]").check()
    form.locator("input[name=reason]").fill("the provider shows the refund")
    form.locator("button[type=submit]").click()
    op.page.wait_for_selector("#flash")
    assert "resolved: completed" in op.page.inner_text("#flash")
    op.page.goto(f"/ui/runs/{run_id}/effects/{effect_id}")
    assert op.page.inner_text("#effect-status") == "completed"
    assert op.commands() == []
    audit = op.page.inner_text("#effect-audit")
    assert "resolve" in audit and "the provider shows the refund" in audit
    op.shot("effect-resolved")
    op.close()

    # an admin may redeliver a refund, never a model call
    admin = Operator(browser, live, ADMIN, shots)
    admin.page.goto("/ui/effects?tool=refund&status=completed")
    refunds = admin.page.locator("a[data-open-effect]")
    assert refunds.count() == 2
    refunds.first.click()
    admin.page.wait_for_load_state()
    assert admin.commands() == ["redeliver"]
    admin.page.goto(f"/ui/runs/{done}")
    model_call = admin.page.locator("article.effect[data-class=model] a[data-open-effect]")
    model_call.first.click()
    admin.page.wait_for_load_state()
    assert admin.commands() == []
    assert "never redelivered" in admin.page.inner_text("#no-commands")
    admin.shot("effect-model-call")
    admin.close()

    viewer = Operator(browser, live, VIEWER, shots)
    viewer.page.goto(f"/ui/runs/{run_id}/effects/{effect_id}")
    assert viewer.commands() == []
    assert viewer.page.locator("#read-only").is_visible()
    viewer.close()
    assert sqlite_shop.performed() == 2  # nothing above sent anything


def test_the_run_page_draws_the_graph_with_where_the_run_is(
    browser: Any,  # noqa: F811
    live: Live,
    sqlite_shop: Shop,
    tmp_path: Path,
) -> None:
    shots = tmp_path / "screenshots"
    shots.mkdir()
    parked, _ = sqlite_shop.parked("t-parked")
    done = sqlite_shop.completed("t-done")
    op = Operator(browser, live, OPERATOR, shots)
    op.page.goto(f"/ui/runs/{parked}")
    picture = op.page.locator("#graph svg.graph")
    assert picture.is_visible()
    nodes = picture.locator("g.node")
    names = [nodes.nth(i).get_attribute("data-node") for i in range(nodes.count())]
    assert names == ["__start__", "agent", "tools", "__end__"]
    current = picture.locator("g[data-current]")
    assert [current.nth(i).get_attribute("data-node") for i in range(current.count())] == ["tools"]
    box = current.first.locator("rect").bounding_box()
    assert box is not None and box["width"] > 0  # drawn, not just present
    op.shot("graph-parked")
    op.page.goto(f"/ui/runs/{done}")
    assert op.page.locator("#graph g[data-current]").get_attribute("data-node") == "__end__"
    op.page.set_viewport_size({"width": 800, "height": 900})
    assert fits(op.page)
    op.shot("graph-completed-800px")
    assert op.violations == []  # drawn under the page's policy: no inline style or script
    op.close()


class Slow(TypedDict):
    n: int


def test_a_running_runs_page_follows_the_run_live(
    browser: Any,  # noqa: F811
    sqlite_store: Checkpointer,
    tmp_path: Path,
) -> None:
    shots = tmp_path / "screenshots"
    shots.mkdir()
    entered, release = threading.Event(), threading.Event()

    def first(state: Slow) -> Slow:
        return {"n": state["n"] + 1}

    def wait(state: Slow) -> Slow:
        entered.set()
        assert release.wait(60), "the test never released the node"
        return {"n": state["n"] + 10}

    g = StateGraph(Slow)
    g.add_node("first", first)
    g.add_node("wait", wait)
    g.add_edge(START, "first")
    g.add_edge("first", "wait")
    g.add_edge("wait", END)
    app = g.compile(checkpointer=sqlite_store)

    class Served:
        def __init__(self, app: Any) -> None:
            self.app = app

    live = start_live(Served(app))  # type: ignore[arg-type]
    runner = threading.Thread(target=app.invoke, args=({"n": 1}, {"thread_id": "t-slow"}))
    runner.start()
    try:
        assert entered.wait(60)
        (run,) = app.runs(thread_id="t-slow")
        assert run.status is RunStatus.RUNNING
        op = Operator(browser, live, OPERATOR, shots)
        op.page.goto(f"/ui/runs/{run.run_id}")
        assert op.page.inner_text("#run-status") == "running"
        assert op.page.locator("#live[data-events]").count() == 1
        assert op.page.locator("#graph g[data-current]").get_attribute("data-node") == "wait"
        op.shot("live-running")
        release.set()  # the run goes on; the page is not reloaded by the test
        op.page.wait_for_selector("#run-status:text-is('completed')", timeout=60_000)
        assert op.page.locator("#live").count() == 0  # finished: nothing more to follow
        assert op.page.locator("#graph g[data-current]").get_attribute("data-node") == "__end__"
        op.shot("live-completed")
        op.close()
    finally:
        release.set()
        runner.join(60)
        stop_live(live)


def test_the_effect_page_shows_what_the_recipient_answered(sqlite_store: Checkpointer) -> None:
    from oncegraph import Reconciled
    from oncegraph.testing.provider import FakeProvider

    knows: list[Any] = []

    def reconcile(record: Any) -> Any:  # the provider's dashboard, as the test sets it
        return knows[-1] if knows else Reconciled.unknown()

    with FakeProvider() as provider:
        shop = Shop(sqlite_store, provider, reconcile=reconcile)
        run_id, effect_id = shop.parked("t-asked")  # the hook could not tell: parked
        page = f"/ui/runs/{run_id}/effects/{effect_id}"
        with TestClient(create_app(shop.app, keys=KEYS)) as client:
            before = logged_in(client, OPERATOR).get(page).text
            assert 'data-command="check"' in before and 'data-command="resolve"' in before
            assert 'data-command="redeliver"' not in before  # an operator's page
            api = {"Authorization": f"Bearer {OPERATOR}"}
            asked = client.post(
                f"/api/runs/{run_id}/effects/{effect_id}/check",
                json={"reason": "is it there?"},
                headers=api,
            )
            assert asked.json()["verdict"] == "unknown"
            knows.append(Reconciled.done("ch_7", provider_reference="ch_7"))
            client.post(f"/api/runs/{run_id}/effects/{effect_id}/check", json={}, headers=api)
            after = client.get(page).text
    answers = after[after.index('id="answers"') : after.index('id="payload"')]
    assert 'data-answer="checked_unknown"' in answers and 'data-answer="checked_done"' in answers
    assert answers.count("data-asked") == 2 and "is it there?" in answers
    assert "<strong>done</strong>" in answers  # the verdict the recipient gave
    assert 'data-status="completed"' in after and "ch_7" in after
    assert 'data-command="check"' not in after and 'data-command="resolve"' not in after
    audit = after[after.index('id="effect-audit"') :]
    assert audit.count('data-action="check_effect"') == 2
