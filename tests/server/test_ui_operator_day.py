"""An operator's day in the UI and the API: a run whose process crashed is shown as
stopped by a crash and is continued from its page; an interrupted run shows its
question; a Continue whose node raises is a readable outcome, not a server error; the
pages fit a 1366 and an 800 px window. Real Chromium through Playwright (see
test_ui_browser.py), screenshots under the test's tmp directory."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypedDict

import pytest
from shop import ADMIN, KEYS, OPERATOR, SENT, USER, Shop, auth
from starlette.testclient import TestClient
from test_ui_browser import Operator, browser  # noqa: F401 (the browser fixture)

from conftest import Live, start_live, stop_live
from oncegraph import END, START, FaultPlan, StateGraph, interrupt
from oncegraph.errors import _CrashSignal
from oncegraph.server import create_app
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import RunStatus


def crashed(shop: Shop, thread: str) -> str:
    """A run whose process stopped inside the refund call (the provider has the charge):
    the store says ``running``, and nobody holds it."""
    with pytest.raises(_CrashSignal):
        shop.app.invoke(USER, {"thread_id": thread, "fault_plan": FaultPlan(SENT)})
    (run,) = shop.app.runs(thread_id=thread)
    assert run.status is RunStatus.RUNNING
    return run.run_id


def fits(page: Any) -> bool:
    """No horizontal scrolling of the page itself (a wide JSON line scrolls in its box)."""
    return bool(page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"))


def test_a_crashed_run_is_shown_as_such_and_continued_from_its_page(
    browser: Any,  # noqa: F811
    live: Live,
    sqlite_shop: Shop,
    tmp_path: Path,
) -> None:
    shots = tmp_path / "screenshots"
    shots.mkdir()
    run_id = crashed(sqlite_shop, "t-crashed")
    charges = sqlite_shop.performed()
    assert charges == 1  # the money moved before the process stopped

    op = Operator(browser, live, OPERATOR, shots)
    op.page.goto("/ui/runs")
    row = op.page.locator(f"tr[data-run-id='{run_id}']")
    assert row.locator(".badge").inner_text() == "stopped by a crash"
    row.locator("a").first.click()
    op.page.wait_for_url(f"**/ui/runs/{run_id}")
    assert op.page.inner_text("#run-status") == "stopped by a crash"
    assert "stopped without finishing it" in op.page.inner_text("#crashed")
    op.shot("crashed-run")
    for width in (1366, 800):
        op.page.set_viewport_size({"width": width, "height": 900})
        assert fits(op.page), f"the run page overflows a {width} px window"
        op.shot(f"crashed-run-{width}px")
        op.page.goto("/ui/runs")
        assert fits(op.page), f"the runs list overflows a {width} px window"
        op.page.goto(f"/ui/runs/{run_id}")

    # Continue: the refund's outcome is unknown, so the run parks for a person; the
    # charge is never sent a second time
    op.page.locator("form[data-command=continue] input[name=reason]").fill("process died")
    op.page.locator("form[data-command=continue] button[type=submit]").click()
    op.page.wait_for_selector("#flash")
    assert "needs_review" in op.page.inner_text("#flash")
    assert op.page.inner_text("#run-status") == "needs_review"
    assert op.page.locator("#crashed").count() == 0
    assert sqlite_shop.performed() == charges
    op.shot("crashed-run-continued")
    op.close()


def test_the_api_says_who_holds_a_running_run_and_whether_it_is_there(
    sqlite_shop: Shop, sqlite_store: Checkpointer
) -> None:
    with TestClient(create_app(sqlite_shop.app, keys=KEYS)) as client:
        run_id = crashed(sqlite_shop, "t-crashed-api")  # after the server's own recovery
        got = client.get(f"/api/runs/{run_id}", headers=auth(OPERATOR)).json()["run"]
        assert got["status"] == "running" and got["crashed"] is True
        assert got["holder"]["alive"] is False and got["holder"]["owner"]
        listed = client.get("/api/runs", headers=auth(OPERATOR)).json()["runs"]
        assert [r["crashed"] for r in listed if r["run_id"] == run_id] == [True]

        # while a process holds the run's liveness lock, it is running, not crashed
        lock = asyncio.run(sqlite_store.lock_run(run_id))
        assert lock is not None
        try:
            got = client.get(f"/api/runs/{run_id}", headers=auth(OPERATOR)).json()["run"]
            assert got["crashed"] is False and got["holder"]["alive"] is True
        finally:
            asyncio.run(lock.release())

        # a run that is not running has no holder to show
        done = sqlite_shop.completed("t-done-api")
        got = client.get(f"/api/runs/{done}", headers=auth(OPERATOR)).json()["run"]
        assert "holder" not in got and "crashed" not in got


class Ask(TypedDict, total=False):
    order: str
    answer: str


def _asking_graph(store: Checkpointer) -> Any:
    def ask(state: Ask) -> Ask:
        answer = interrupt({"question": f"Refund order {state['order']}?"})
        return {"answer": answer.upper()}  # an answer that is not text: AttributeError

    g = StateGraph(Ask)
    g.add_node("ask", ask)
    g.add_edge(START, "ask")
    g.add_edge("ask", END)
    return g.compile(checkpointer=store)


class _Served:
    def __init__(self, app: Any) -> None:
        self.app = app


@pytest.fixture
def asking(sqlite_store: Checkpointer) -> Iterator[Any]:
    app = _asking_graph(sqlite_store)
    yield app


def test_continue_whose_node_raises_is_an_outcome_not_a_server_error(asking: Any) -> None:
    asking.invoke({"order": "A-2"}, {"thread_id": "t-raise"})
    (run,) = asking.runs(thread_id="t-raise")
    with TestClient(create_app(asking, keys=KEYS), raise_server_exceptions=False) as client:
        out = client.post(
            f"/api/runs/{run.run_id}/continue",
            json={"answer": 42, "reason": "a number, by mistake"},
            headers=auth(OPERATOR),
        )
        assert out.status_code == 200, out.text
        body = out.json()
        assert body["run"]["status"] == "failed"
        assert body["error"]["code"] == "node_failed"
        assert "AttributeError" in body["error"]["message"]
        # the answer given is a recorded fact of the run: continued, the node gets it
        # again and fails again, still a readable outcome (a branch changes the answer)
        again = client.post(
            f"/api/runs/{run.run_id}/continue", json={"reason": "retry"}, headers=auth(OPERATOR)
        )
        assert again.status_code == 200, again.text
        assert again.json()["error"]["code"] == "node_failed"
    assert asking.get_run(run.run_id).status == "failed"


def test_an_interrupted_run_shows_its_question_and_takes_a_text_answer(
    browser: Any,  # noqa: F811
    asking: Any,
    tmp_path: Path,
) -> None:
    shots = tmp_path / "screenshots"
    shots.mkdir()
    asking.invoke({"order": "A-2"}, {"thread_id": "t-ask"})
    asking.invoke({"order": "B-7"}, {"thread_id": "t-ask-bad"})
    (run,) = asking.runs(thread_id="t-ask")
    (bad,) = asking.runs(thread_id="t-ask-bad")
    live = start_live(_Served(asking))  # type: ignore[arg-type]
    try:
        op = Operator(browser, live, ADMIN, shots)
        op.page.goto(f"/ui/runs/{run.run_id}")
        assert op.page.inner_text("#questions .question-text") == "Refund order A-2?"
        form = op.page.locator("form[data-command=continue]")
        assert form.locator("textarea[name=answer]").input_value() == ""  # no null prefilled
        op.shot("question")
        form.locator("textarea[name=answer]").fill("yes")  # text is the default kind
        form.locator("input[name=reason]").fill("approved")
        form.locator("button[type=submit]").click()
        op.page.wait_for_selector("#flash")
        assert op.page.inner_text("#run-status") == "completed"

        # a JSON number by mistake: the node raises; the page says so, readably
        op.page.goto(f"/ui/runs/{bad.run_id}")
        assert op.page.inner_text("#questions .question-text") == "Refund order B-7?"
        form = op.page.locator("form[data-command=continue]")
        form.locator("input[name=answer_kind][value=json]").check()
        form.locator("textarea[name=answer]").fill("42")
        form.locator("input[name=reason]").fill("first try")
        form.locator("button[type=submit]").click()
        op.page.wait_for_selector("#flash")
        flash = op.page.inner_text("#flash")
        assert "the run is failed" in flash and "AttributeError" in flash
        assert op.page.inner_text("#run-status") == "failed"
        assert "internal_error" not in op.page.content()
        op.shot("node-failed")
        op.close()
    finally:
        stop_live(live)
    assert asking.get_state({"thread_id": "t-ask"}).values["answer"] == "YES"
    assert asking.get_run(bad.run_id).status == "failed"
