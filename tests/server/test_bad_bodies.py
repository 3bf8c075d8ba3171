"""A bad request body, on every family of routes (start, run commands, effect commands,
the UI's forms, AG-UI): one error document (``{"error": {status, code, message}}``, a
400 that names the field and what it should be), and nothing is done."""

from __future__ import annotations

from typing import Any

import httpx
from shop import ADMIN, OPERATOR, USER, Shop, auth
from starlette.testclient import TestClient
from test_ui import login

from oncegraph.storage.records import RunStatus


def _refused(response: httpx.Response, said: str) -> None:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["status"] == 400 and error["code"] == "bad_request"
    assert said in error["message"], error["message"]


def test_a_bad_start_body_starts_nothing(sqlite_shop: Shop, sqlite_client: TestClient) -> None:
    start = "/api/threads/t-bad-start/runs"
    bad: list[tuple[dict[str, Any], str]] = [
        ({"input": 5}, "'input' must be a JSON object; got a number"),
        ({"input": USER, "config": {"recursion_limit": "9"}}, "'config.recursion_limit'"),
        ({"input": USER, "config": {"timeout": 1}}, "unknown field(s) 'timeout'"),
        ({"input": USER, "wait": "yes"}, "'wait' must be true or false"),
    ]
    for body, said in bad:
        _refused(sqlite_client.post(start, headers=auth(OPERATOR), json=body), said)
        streamed = sqlite_client.post(f"{start}/stream", headers=auth(OPERATOR), json=body)
        _refused(streamed, said)
    assert sqlite_shop.app.runs(thread_id="t-bad-start") == []


def test_a_bad_run_command_body_leaves_the_run_as_it_was(
    sqlite_shop: Shop, sqlite_client: TestClient
) -> None:
    run_id, _ = sqlite_shop.parked("t-bad-run")
    run = f"/api/runs/{run_id}"
    bad: list[tuple[str, dict[str, Any], str]] = [
        ("continue", {"reason": 7}, "'reason' must be a string; got a number"),
        ("continue", {"reason": "r", "because": "x"}, "unknown field(s) 'because'"),
        ("replay", {"mode": "yolo", "reason": "r"}, "got 'yolo'"),
        ("replay", {"mode": "live"}, "'reason' is required"),
        ("branch", {"reason": "r"}, "'patch' is required"),
        ("branch", {"patch": {}, "reason": "r", "as_node": 3}, "'as_node' must be a string"),
        ("abandon", {}, "'reason' is required"),
        ("abandon", {"reason": ""}, "'reason' must not be empty"),
    ]
    for command, body, said in bad:
        _refused(sqlite_client.post(f"{run}/{command}", headers=auth(OPERATOR), json=body), said)
    after = sqlite_shop.app.get_run(run_id)
    assert after.status is RunStatus.NEEDS_REVIEW
    assert sqlite_shop.app.runs(parent_run_id=run_id) == []  # no replay, no branch made


def test_a_bad_effect_command_body_touches_no_effect(
    sqlite_shop: Shop, sqlite_client: TestClient
) -> None:
    run_id, effect_id = sqlite_shop.parked("t-bad-effect")
    charges = sqlite_shop.performed()
    before = sqlite_shop.app.effects(run_id=run_id)
    effect = f"/api/runs/{run_id}/effects/{effect_id}"
    bad: list[tuple[str, str, dict[str, Any], str]] = [
        ("resolve", OPERATOR, {"outcome": "maybe", "reason": "r"}, "'outcome' must be 'done'"),
        ("resolve", OPERATOR, {"outcome": "done"}, "'reason' is required"),
        (
            "resolve",
            OPERATOR,
            {"outcome": "done", "reason": "r", "provider_reference": 1},
            ("'provider_reference' must be a string"),
        ),
        ("check", OPERATOR, {"reason": ["r"]}, "'reason' must be a string; got an array"),
        ("redeliver", ADMIN, {"reason": "r", "new_key": "yes"}, "'new_key' must be true or"),
        ("redeliver", ADMIN, {"reason": "r", "confirm": 5}, "'confirm' must be a string"),
    ]
    for command, key, body, said in bad:
        _refused(sqlite_client.post(f"{effect}/{command}", headers=auth(key), json=body), said)
    assert sqlite_shop.app.effects(run_id=run_id) == before
    assert sqlite_shop.performed() == charges


def test_a_form_without_a_required_field_is_named_and_nothing_is_done(
    sqlite_shop: Shop, sqlite_client: TestClient
) -> None:
    run_id, effect_id = sqlite_shop.parked("t-bad-form")
    csrf = login(sqlite_client, OPERATOR)
    effect = f"/ui/runs/{run_id}/effects/{effect_id}"
    missing = sqlite_client.post(f"{effect}/resolve", data={"reason": "r", "csrf": csrf})
    assert missing.status_code == 400 and "&#39;outcome&#39; is required" in missing.text
    unsaid = sqlite_client.post(f"/ui/runs/{run_id}/abandon", data={"csrf": csrf})
    assert unsaid.status_code == 400 and "&#39;reason&#39; is required" in unsaid.text
    blank = sqlite_client.post(f"/ui/runs/{run_id}/replay", data={"reason": "", "csrf": csrf})
    assert blank.status_code == 400 and "must not be empty" in blank.text
    assert sqlite_shop.app.get_run(run_id).status is RunStatus.NEEDS_REVIEW


def test_a_bad_agui_body_is_refused_before_anything_runs(
    sqlite_shop: Shop, sqlite_client: TestClient
) -> None:
    body = {"threadId": 5, "runId": "r1", "messages": []}
    _refused(
        sqlite_client.post("/api/agui", headers=auth(OPERATOR), json=body),
        "'threadId' must be a string; got a number",
    )
    body = {"threadId": "t-bad-agui", "messages": []}
    _refused(sqlite_client.post("/api/agui", headers=auth(OPERATOR), json=body), "'runId'")
    assert sqlite_shop.app.runs(thread_id="t-bad-agui") == []
