"""The REST API: every endpoint, each role's denials, tenancy, bad input, limits.

The shop's refund is irreversible and masks ``card``; a run is parked the way production
parks one (a crash inside the call, then a resume), so Resolve, Continue, Replay, Branch,
Redeliver and Abandon all have something real to act on. The main flow runs on SQLite
and PostgreSQL; the rest on SQLite.
"""

from __future__ import annotations

from typing import Any

from shop import ACME, ADMIN, CARD, GLOBEX, OPERATOR, USER, VIEWER, Shop, auth
from starlette.testclient import TestClient

from oncegraph.runtime.portal import run_sync
from oncegraph.server import api, openapi


def _audit(client: TestClient, run_id: str) -> list[tuple[str, str, str | None]]:
    found = client.get(f"/api/runs/{run_id}/audit", headers=auth(VIEWER)).json()["audit"]
    return [(a["action"], a["actor"], a["reason"]) for a in reversed(found)]


def _error(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert error["status"] == status and error["message"]
    return error


# -- the main flow, SQLite and PostgreSQL ---------------------------------------------------


def test_operator_flow_resolve_continue_replay_branch_redeliver(
    shop: Shop, client: TestClient
) -> None:
    run_id, effect_id = shop.parked("t-main")
    listed = client.get("/api/runs", headers=auth(VIEWER)).json()["runs"]
    assert listed[0]["run_id"] == run_id and listed[0]["status"] == "needs_review"

    found = client.get(f"/api/runs/{run_id}/effects", headers=auth(VIEWER)).json()["effects"]
    (effect,) = [e for e in found if e["effect_type"] == "refund"]
    assert effect["effect_id"] == effect_id and effect["status"] == "pending"
    assert effect["request"]["card"] == "***" and effect["request_hash"]
    assert effect["attempts"] and effect["recipient"] == "payments"

    done = client.post(
        f"/api/runs/{run_id}/effects/{effect_id}/resolve",
        headers=auth(OPERATOR),
        json={"outcome": "done", "reason": "seen in the PSP", "result": "ch_1"},
    )
    assert done.status_code == 200, done.text
    assert done.json()["effect"]["status"] == "completed"

    went_on = client.post(
        f"/api/runs/{run_id}/continue", headers=auth(OPERATOR), json={"reason": "resolved"}
    )
    assert went_on.status_code == 200, went_on.text
    assert went_on.json()["run"]["status"] == "completed"
    assert went_on.json()["output"]["messages"][-1]["content"] == "Refunded."
    assert shop.performed() == 1  # Continue used the resolved result, no second charge

    replay = client.post(
        f"/api/runs/{run_id}/replay", headers=auth(OPERATOR), json={"reason": "audit it"}
    )
    assert replay.status_code == 201, replay.text
    child = replay.json()["run"]
    assert child["mode"] == "evidence" and child["parent_run_id"] == run_id
    assert (child["made_as"], child["launch_reason"]) == ("replay", "audit it")
    assert child["status"] == "completed" and shop.performed() == 1  # evidence: no live call

    branch = client.post(
        f"/api/runs/{run_id}/branch",
        headers=auth(OPERATOR),
        json={"patch": {"messages": [{"role": "user", "content": "also 1043"}]}, "reason": "x"},
    )
    assert branch.status_code == 201, branch.text
    made = branch.json()
    assert made["run"]["status"] == "paused" and made["run"]["made_as"] == "branch"
    assert made["run"]["launch_reason"] == "x"  # the operator's reason is the run's own
    assert [c["channel"] for c in made["diff"]] == ["messages"]

    lineage = client.get(f"/api/runs/{run_id}", headers=auth(VIEWER)).json()["lineage"]
    assert {c["run_id"] for c in lineage["children"]} == {child["run_id"], made["run"]["run_id"]}
    parent = client.get(f"/api/runs/{child['run_id']}", headers=auth(VIEWER)).json()
    assert parent["lineage"]["parent"]["run_id"] == run_id

    preview = client.post(
        f"/api/runs/{run_id}/effects/{effect_id}/redeliver",
        headers=auth(ADMIN),
        json={"reason": "customer asked", "new_key": True},
    )
    assert preview.status_code == 200, preview.text
    shown = preview.json()
    assert shown["sent"] is False and shown["preview"]["recipient"] == "payments"
    assert shown["preview"]["payload"] == {"order_id": "1042", "card": "***"}
    assert shown["preview"]["dedup"].startswith("new key ")
    assert shop.performed() == 1  # a preview sends nothing
    sent = client.post(
        f"/api/runs/{run_id}/effects/{effect_id}/redeliver",
        headers=auth(ADMIN),
        json={"reason": "customer asked", "new_key": True, "confirm": shown["preview"]["token"]},
    )
    assert sent.status_code == 200, sent.text
    assert sent.json()["sent"] is True and shop.performed() == 2
    again = client.post(
        f"/api/runs/{run_id}/effects/{effect_id}/redeliver",
        headers=auth(ADMIN),
        json={"reason": "twice?", "new_key": True, "confirm": shown["preview"]["token"]},
    )
    _error(again, 409)
    assert shop.performed() == 2

    assert _audit(client, run_id) == [
        ("resolve_effect", "api:otto", "seen in the PSP"),
        ("continue", "api:otto", "resolved"),
        ("replay", "api:otto", "audit it"),
        ("branch", "api:otto", "x"),
        ("redeliver", "api:ada", "customer asked"),
    ]


def test_start_a_run_wait_and_read_it_back(shop: Shop, client: TestClient) -> None:
    started = client.post(
        "/api/threads/t-new/runs", headers=auth(OPERATOR), json={"input": USER, "wait": True}
    )
    assert started.status_code == 200, started.text
    body = started.json()
    assert body["run"]["status"] == "completed" and body["thread_id"] == "t-new"
    assert body["events_url"] == f"/api/runs/{body['run_id']}/events"
    state = client.get("/api/threads/t-new/state", headers=auth(VIEWER)).json()["state"]
    assert state["values"]["messages"][-1]["content"] == "Refunded."
    assert state["run_id"] == body["run_id"]
    history = client.get("/api/threads/t-new/history", headers=auth(VIEWER)).json()["history"]
    assert len(history) >= 3 and history[0]["checkpoint_id"] == state["checkpoint_id"]
    thread = client.get("/api/threads/t-new", headers=auth(VIEWER)).json()
    assert [r["run_id"] for r in thread["runs"]] == [body["run_id"]]
    effects = client.get("/api/threads/t-new/effects", headers=auth(VIEWER)).json()["effects"]
    assert any(e["effect_type"] == "refund" and e["status"] == "completed" for e in effects)


# -- reads ----------------------------------------------------------------------------------


def test_every_read_endpoint(sqlite_shop: Shop, sqlite_client: TestClient) -> None:
    client = sqlite_client
    run_id, effect_id = sqlite_shop.parked("t-read")
    done_id = sqlite_shop.completed("t-done")
    assert client.get("/api/health").json()["status"] == "ok"  # no key needed
    assert client.get("/api/me", headers=auth(GLOBEX)).json() == {
        "name": "globex-view",
        "role": "viewer",
        "tenant": "globex",
    }
    runs = client.get("/api/runs", headers=auth(VIEWER)).json()["runs"]
    assert [r["status"] for r in runs] == ["needs_review", "completed"]  # needs_review first
    only = client.get("/api/runs?status=completed", headers=auth(VIEWER)).json()["runs"]
    assert [r["run_id"] for r in only] == [done_id]
    both = client.get(
        "/api/runs?status=completed&status=needs_review&limit=1", headers=auth(VIEWER)
    ).json()["runs"]
    assert len(both) == 1
    by_thread = client.get("/api/runs?thread_id=t-read", headers=auth(VIEWER)).json()["runs"]
    assert [r["run_id"] for r in by_thread] == [run_id]
    history = client.get(f"/api/runs/{run_id}/history", headers=auth(VIEWER)).json()["history"]
    assert history and all(s["run_id"] == run_id for s in history)
    one = client.get(f"/api/runs/{run_id}/effects/{effect_id}", headers=auth(VIEWER)).json()
    assert one["effect"]["effect_id"] == effect_id
    pending = client.get(f"/api/runs/{run_id}/effects?status=pending", headers=auth(VIEWER)).json()[
        "effects"
    ]
    assert [e["effect_id"] for e in pending] == [effect_id]
    models = client.get(f"/api/runs/{run_id}/effects?status=completed", headers=auth(VIEWER))
    assert {e["effect_class"] for e in models.json()["effects"]} == {"model"}
    threads = client.get("/api/threads", headers=auth(VIEWER)).json()["threads"]
    assert {t["thread_id"] for t in threads} == {"t-read", "t-done"}
    assert client.get("/api/audit", headers=auth(VIEWER)).json() == {"audit": [], "next": None}
    doc = client.get("/openapi.json").json()
    assert doc["openapi"].startswith("3.")


def test_viewers_see_masked_state_and_admins_see_it_as_stored(
    sqlite_shop: Shop, sqlite_client: TestClient
) -> None:
    run_id, _ = sqlite_shop.parked("t-mask")

    def card(key: str) -> str:
        state = sqlite_client.get("/api/threads/t-mask/state", headers=auth(key)).json()
        call = state["state"]["values"]["messages"][1]["tool_calls"][0]
        return str(call["args"]["card"])

    assert card(VIEWER) == "***" and card(OPERATOR) == "***"
    assert card(ADMIN) == CARD
    run = sqlite_client.get(f"/api/runs/{run_id}", headers=auth(VIEWER)).json()["run"]
    assert CARD not in str(run)
    hist = sqlite_client.get(f"/api/runs/{run_id}/history", headers=auth(VIEWER)).text
    assert CARD not in hist

    def effect_card(key: str) -> str:
        found = sqlite_client.get(f"/api/runs/{run_id}/effects", headers=auth(key)).json()
        (refund,) = [e for e in found["effects"] if e["effect_type"] == "refund"]
        return str(refund["request"]["card"])

    assert effect_card(VIEWER) == "***" and effect_card(OPERATOR) == "***"
    assert effect_card(ADMIN) == CARD, "an admin sees the payload as recorded"
    thread = sqlite_client.get("/api/threads/t-mask/effects", headers=auth(VIEWER)).text
    assert CARD not in thread


# -- auth and roles -------------------------------------------------------------------------


def test_no_key_or_a_wrong_key_is_401(sqlite_client: TestClient) -> None:
    _error(sqlite_client.get("/api/runs"), 401)
    _error(sqlite_client.get("/api/runs", headers=auth("not-a-key-at-all")), 401)
    _error(sqlite_client.get("/api/runs", headers={"X-API-Key": "nope-nope-nope"}), 401)
    assert sqlite_client.get("/api/runs", headers={"X-API-Key": VIEWER}).status_code == 200


def test_each_role_is_refused_what_it_may_not_do(
    sqlite_shop: Shop, sqlite_client: TestClient
) -> None:
    client = sqlite_client
    run_id, effect_id = sqlite_shop.parked("t-roles")
    effect_url = f"/api/runs/{run_id}/effects/{effect_id}"
    for url, body in [
        (f"/api/runs/{run_id}/continue", {"reason": "r"}),
        (f"/api/runs/{run_id}/replay", {"reason": "r"}),
        (f"/api/runs/{run_id}/branch", {"reason": "r", "patch": {}}),
        (f"/api/runs/{run_id}/abandon", {"reason": "r"}),
        (f"{effect_url}/resolve", {"outcome": "done", "reason": "r"}),
        (f"{effect_url}/redeliver", {"reason": "r"}),
        (f"{effect_url}/check", {"reason": "r"}),
        ("/api/threads/t-roles-2/runs", {"input": USER}),
    ]:
        assert "viewer" in _error(client.post(url, headers=auth(VIEWER), json=body), 403)["message"]
    error = _error(
        client.post(f"{effect_url}/redeliver", headers=auth(OPERATOR), json={"reason": "r"}), 403
    )
    assert "admin" in error["message"]
    # nothing changed: still parked, the effect still pending, no audit record, no run made
    assert client.get(f"/api/runs/{run_id}", headers=auth(VIEWER)).json()["run"]["status"] == (
        "needs_review"
    )
    assert client.get(effect_url, headers=auth(VIEWER)).json()["effect"]["status"] == "pending"
    assert _audit(client, run_id) == []
    assert sqlite_shop.performed() == 1
    _error(client.get("/api/threads/t-roles-2", headers=auth(VIEWER)), 404)


def test_abandon(sqlite_shop: Shop, sqlite_client: TestClient) -> None:
    run_id, _ = sqlite_shop.parked("t-abandon")
    done = sqlite_client.post(
        f"/api/runs/{run_id}/abandon", headers=auth(OPERATOR), json={"reason": "customer left"}
    )
    assert done.status_code == 200, done.text
    assert done.json()["run"]["status"] == "abandoned"
    again = sqlite_client.post(
        f"/api/runs/{run_id}/abandon", headers=auth(OPERATOR), json={"reason": "again"}
    )
    _error(again, 404)  # no unfinished run left on the thread
    cont = sqlite_client.post(f"/api/runs/{run_id}/continue", headers=auth(OPERATOR), json={})
    _error(cont, 409)
    assert _audit(sqlite_client, run_id) == [("abandon", "api:otto", "customer left")]


# -- tenancy --------------------------------------------------------------------------------


def test_a_tenant_key_sees_and_acts_only_on_its_threads(
    sqlite_shop: Shop, sqlite_client: TestClient
) -> None:
    client = sqlite_client
    mine, my_effect = sqlite_shop.parked("acme:t1")
    theirs, their_effect = sqlite_shop.parked("globex:t1")
    nobody = sqlite_shop.completed("t-untenanted")

    runs = client.get("/api/runs", headers=auth(ACME)).json()["runs"]
    assert [r["run_id"] for r in runs] == [mine]
    threads = client.get("/api/threads", headers=auth(ACME)).json()["threads"]
    assert [t["thread_id"] for t in threads] == ["acme:t1"]
    for run_id in (theirs, nobody):
        _error(client.get(f"/api/runs/{run_id}", headers=auth(ACME)), 404)
        _error(client.get(f"/api/runs/{run_id}/effects", headers=auth(ACME)), 404)
        _error(client.get(f"/api/runs/{run_id}/events", headers=auth(ACME)), 404)
    _error(client.get("/api/threads/globex:t1/state", headers=auth(ACME)), 404)
    _error(client.get("/api/threads/globex:t1/history", headers=auth(ACME)), 404)
    _error(client.get("/api/runs?thread_id=globex:t1", headers=auth(ACME)), 404)
    _error(
        client.post(
            f"/api/runs/{theirs}/effects/{their_effect}/resolve",
            headers=auth(ACME),
            json={"outcome": "done", "reason": "not mine"},
        ),
        404,
    )
    _error(client.post(f"/api/runs/{theirs}/continue", headers=auth(ACME), json={}), 404)
    _error(client.post("/api/threads/t-x/runs", headers=auth(ACME), json={"input": USER}), 403)
    # its own work goes through, and its replay stays with the tenant
    ok = client.post(
        f"/api/runs/{mine}/effects/{my_effect}/resolve",
        headers=auth(ACME),
        json={"outcome": "not_done", "reason": "not at the PSP"},
    )
    assert ok.status_code == 200, ok.text
    replay = client.post(f"/api/runs/{mine}/replay", headers=auth(ACME), json={"reason": "r"})
    assert replay.status_code == 201, replay.text
    assert replay.json()["run"]["thread_id"].startswith("acme:")
    replayed = sqlite_shop.app.get_run(replay.json()["run"]["run_id"])
    assert replayed.tenant == "acme", "a tenant key's runs carry its tenant"
    assert len(client.get("/api/runs", headers=auth(ACME)).json()["runs"]) == 2
    # the audit log shows only its tenant's records
    audit = client.get("/api/audit", headers=auth(ACME)).json()["audit"]
    assert audit and all(a["thread_id"].startswith("acme:") for a in audit)
    assert client.get("/api/audit", headers=auth(GLOBEX)).json()["audit"] == []
    # the other tenant's run is untouched
    assert client.get(f"/api/runs/{theirs}", headers=auth(GLOBEX)).json()["run"]["status"] == (
        "needs_review"
    )
    _error(client.get(f"/api/runs/{mine}", headers=auth(GLOBEX)), 404)


# -- bad input ------------------------------------------------------------------------------


def test_bad_input_is_a_clear_4xx_and_changes_nothing(
    sqlite_shop: Shop, sqlite_client: TestClient
) -> None:
    client = sqlite_client
    run_id, effect_id = sqlite_shop.parked("t-bad")
    effect_url = f"/api/runs/{run_id}/effects/{effect_id}"
    headers = {**auth(ADMIN), "Content-Type": "application/json"}
    resolve = f"{effect_url}/resolve"
    assert (
        "not valid JSON"
        in _error(client.post(resolve, headers=headers, content=b'{"outcome": "done",'), 400)[
            "message"
        ]
    )
    assert (
        "JSON object"
        in _error(client.post(resolve, headers=headers, content=b"[1]"), 400)["message"]
    )
    _error(client.post(resolve, headers=headers, content=b""), 400)
    _error(client.post(resolve, headers=headers, content=b"\xff\xfe"), 400)
    assert (
        "outcome"
        in _error(
            client.post(resolve, headers=headers, json={"outcome": "maybe", "reason": "r"}), 400
        )["message"]
    )
    assert (
        "reason"
        in _error(client.post(resolve, headers=headers, json={"outcome": "done"}), 400)["message"]
    )
    assert (
        "surprise"
        in _error(
            client.post(
                resolve, headers=headers, json={"outcome": "done", "reason": "r", "surprise": 1}
            ),
            400,
        )["message"]
    )
    _error(client.post(resolve, headers=headers, json={"outcome": "done", "reason": 7}), 400)
    _error(client.post(resolve, headers=headers, json={"outcome": "done", "reason": "a\x00b"}), 400)
    replay = f"/api/runs/{run_id}/replay"
    _error(client.post(replay, headers=headers, json={"reason": "r", "mode": "yolo"}), 400)
    _error(
        client.post(replay, headers=headers, json={"reason": "r", "checkpoint_id": "cp_nope"}),
        404,
    )
    branch = f"/api/runs/{run_id}/branch"
    _error(client.post(branch, headers=headers, json={"reason": "r", "patch": [1]}), 400)
    _error(client.post(branch, headers=headers, json={"reason": "r", "patch": {"nope": 1}}), 400)
    _error(client.post(branch, headers=headers, json={"patch": {}}), 400)
    start = "/api/threads/t-bad-2/runs"
    _error(client.post(start, headers=headers, json={"input": [1]}), 400)
    _error(client.post(start, headers=headers, json={"input": USER, "config": {"x": 1}}), 400)
    _error(
        client.post(
            start, headers=headers, json={"input": USER, "config": {"recursion_limit": -1}}
        ),
        400,
    )
    _error(client.post(start, headers=headers, json={"input": USER, "wait": "yes"}), 400)
    _error(client.post("/api/threads/t-bad/runs", headers=headers, json={"input": USER}), 409)
    # unknown ids
    _error(client.get("/api/runs/run_nope", headers=auth(VIEWER)), 404)
    _error(client.get(f"/api/runs/{run_id}/effects/nope", headers=auth(VIEWER)), 404)
    _error(client.post("/api/runs/run_nope/continue", headers=headers, json={}), 404)
    _error(
        client.post(
            f"/api/runs/{run_id}/effects/nope/resolve",
            headers=headers,
            json={"outcome": "done", "reason": "r"},
        ),
        404,
    )
    _error(client.get("/api/nowhere", headers=auth(VIEWER)), 404)
    _error(client.delete(f"/api/runs/{run_id}", headers=auth(ADMIN)), 405)
    # bad query values
    _error(client.get("/api/runs?status=sleepy", headers=auth(VIEWER)), 400)
    _error(client.get("/api/runs?limit=0", headers=auth(VIEWER)), 400)
    _error(client.get("/api/runs?limit=abc", headers=auth(VIEWER)), 400)
    _error(client.get("/api/audit?before=yesterday", headers=auth(VIEWER)), 400)
    _error(client.get("/api/threads/a%00b/state", headers=auth(VIEWER)), 400)
    _error(
        client.get(f"/api/runs/{run_id}/events", headers={**auth(VIEWER), "Last-Event-ID": "x"}),
        400,
    )
    # a command in the wrong state
    _error(
        client.post(f"/api/runs/{run_id}/continue", headers=headers, json={"answer": "yes"}), 409
    )
    # nothing changed
    assert client.get(effect_url, headers=auth(VIEWER)).json()["effect"]["status"] == "pending"
    assert _audit(client, run_id) == []
    assert [r["run_id"] for r in client.get("/api/runs", headers=auth(VIEWER)).json()["runs"]] == [
        run_id
    ]


def test_a_body_over_the_limit_is_413_with_or_without_content_length(
    sqlite_shop: Shop,
) -> None:
    from conftest import client_for

    run_id, effect_id = sqlite_shop.parked("t-big")
    url = f"/api/runs/{run_id}/effects/{effect_id}/resolve"
    big = {"outcome": "done", "reason": "r", "result": "x" * 5000}
    with client_for(sqlite_shop, max_body=1000) as client:
        assert (
            "1000 bytes" in _error(client.post(url, headers=auth(ADMIN), json=big), 413)["message"]
        )

        def chunks() -> Any:
            for _ in range(20):
                yield b" " * 100

        headers = {**auth(ADMIN), "Content-Type": "application/json"}
        _error(client.post(url, headers=headers, content=chunks()), 413)
        record = client.get(f"/api/runs/{run_id}/effects/{effect_id}", headers=auth(VIEWER))
        assert record.json()["effect"]["status"] == "pending"


def test_too_many_requests_is_429_with_retry_after(sqlite_shop: Shop) -> None:
    from conftest import client_for

    with client_for(sqlite_shop, rate=0.01, burst=3) as client:
        codes = [client.get("/api/runs", headers=auth(VIEWER)).status_code for _ in range(5)]
        assert codes[:3] == [200, 200, 200] and codes[3:] == [429, 429]
        refused = client.get("/api/runs", headers=auth(VIEWER))
        assert "too many requests" in _error(refused, 429)["message"]
        assert int(refused.headers["Retry-After"]) >= 1
        # another caller has its own budget
        assert client.get("/api/runs", headers=auth(ADMIN)).status_code == 200


def test_the_openapi_document_describes_every_route() -> None:
    doc = openapi.document()
    described = {(path, method) for path, item in doc["paths"].items() for method in item}
    for route in api.routes:
        for method in route.methods or ():
            if method == "HEAD":
                continue
            assert (route.path, method.lower()) in described, route.path
    assert len(described) == sum(len((r.methods or set()) - {"HEAD"}) for r in api.routes)


def test_a_command_whose_run_stops_again_reports_the_run_and_its_error(
    sqlite_shop: Shop, sqlite_client: TestClient
) -> None:
    client = sqlite_client
    run_id, _ = sqlite_shop.parked("t-again")
    charges = sqlite_shop.performed()
    went_on = client.post(f"/api/runs/{run_id}/continue", headers=auth(OPERATOR), json={})
    assert went_on.status_code == 200, went_on.text
    body = went_on.json()
    assert body["run"]["status"] == "needs_review" and body["error"]["code"] == "needs_review"
    assert "output" not in body
    replay = client.post(f"/api/runs/{run_id}/replay", headers=auth(OPERATOR), json={"reason": "r"})
    assert replay.status_code == 201, replay.text
    made = replay.json()
    assert made["run"]["parent_run_id"] == run_id and made["run"]["status"] != "running"
    assert made["error"]["message"]  # the pending refund has no recorded result to replay
    assert sqlite_shop.performed() == charges  # neither command charged anyone
    assert [a[0] for a in _audit(client, run_id)] == ["continue", "replay"]


def test_the_audit_log_filters(sqlite_shop: Shop, sqlite_client: TestClient) -> None:
    client = sqlite_client
    first, _ = sqlite_shop.parked("t-audit-1")
    second, _ = sqlite_shop.parked("t-audit-2")
    for run_id in (first, second):
        client.post(f"/api/runs/{run_id}/abandon", headers=auth(OPERATOR), json={"reason": "r"})
    everything = client.get("/api/audit", headers=auth(VIEWER)).json()["audit"]
    assert {a["run_id"] for a in everything} == {first, second}
    by_run = client.get(f"/api/audit?run_id={first}", headers=auth(VIEWER)).json()["audit"]
    assert [a["run_id"] for a in by_run] == [first]
    by_thread = client.get("/api/audit?thread_id=t-audit-2", headers=auth(VIEWER)).json()
    assert [a["run_id"] for a in by_thread["audit"]] == [second]
    by_target = client.get(f"/api/audit?target_id={second}", headers=auth(VIEWER)).json()
    assert [a["target_id"] for a in by_target["audit"]] == [second]
    newest = everything[0]["at"]
    older = client.get(f"/api/audit?before={newest}", headers=auth(VIEWER)).json()["audit"]
    assert [a["audit_id"] for a in older] == [a["audit_id"] for a in everything[1:]]
    assert len(client.get("/api/audit?limit=1", headers=auth(VIEWER)).json()["audit"]) == 1
    # page after page: next is the page's last record ('<at>,<audit_id>'), null at the end
    paged, after = [], None
    while True:
        url = "/api/audit?limit=1" + (f"&before={after}" if after else "")
        body = client.get(url, headers=auth(VIEWER)).json()
        paged += [a["audit_id"] for a in body["audit"]]
        after = body["next"]
        if after is None:
            break
        assert after.endswith("," + body["audit"][-1]["audit_id"])
    assert paged == [a["audit_id"] for a in everything]
    _error(client.get("/api/audit?run_id=run_nope", headers=auth(VIEWER)), 404)
    _error(client.get("/api/audit?before=yesterday", headers=auth(VIEWER)), 400)


def test_check_asks_the_recipient_through_the_tools_hook(sqlite_store: Any) -> None:
    from conftest import client_for
    from oncegraph import Reconciled
    from oncegraph.testing.provider import FakeProvider

    knows: list[Any] = []

    def reconcile(record: Any) -> Any:  # the provider's dashboard, as the test sets it
        return knows[-1] if knows else Reconciled.unknown()

    with FakeProvider() as provider:
        shop = Shop(sqlite_store, provider, reconcile=reconcile)
        run_id, effect_id = shop.parked("t-check")  # reconcile could not tell: parked
        url = f"/api/runs/{run_id}/effects/{effect_id}/check"
        with client_for(shop) as client:
            unknown = client.post(url, headers=auth(OPERATOR), json={"reason": "still?"})
            assert unknown.status_code == 200, unknown.text
            assert unknown.json()["verdict"] == "unknown"
            assert unknown.json()["effect"]["status"] == "pending"
            knows.append(Reconciled.done("ch_9", provider_reference="ch_9"))
            done = client.post(url, headers=auth(OPERATOR), json={})
            assert done.json()["verdict"] == "done"
            effect = done.json()["effect"]
            assert effect["status"] == "completed" and effect["provider_reference"] == "ch_9"
            _error(client.post(url, headers=auth(OPERATOR), json={}), 409)  # settled now
            actions = [a[0] for a in _audit(client, run_id)]
            assert actions == ["check_effect", "check_effect"]


def test_check_without_a_hook_says_how_to_resolve_instead(
    sqlite_shop: Shop, sqlite_client: TestClient
) -> None:
    run_id, effect_id = sqlite_shop.parked("t-nohook")
    refused = sqlite_client.post(
        f"/api/runs/{run_id}/effects/{effect_id}/check", headers=auth(OPERATOR), json={}
    )
    assert "resolve_effect" in _error(refused, 400)["message"]
    assert _audit(sqlite_client, run_id) == []


def test_runs_page_by_page_and_threads_past_a_busy_one(
    sqlite_shop: Shop, sqlite_store: Any, sqlite_client: TestClient, monkeypatch: Any
) -> None:
    """``GET /api/runs`` gives a page and its ``next`` (the last run's id; null on the
    last page): ``before=next`` goes on from there, so every run is listed once, past
    any number of newer runs, for a tenant key too. The threads list reads runs a page
    at a time until it has its threads: one busy thread's runs do not hide the others."""
    client = sqlite_client
    older = [sqlite_shop.completed(t) for t in ("t-first", "acme:t-old", "t-second")]
    first = sqlite_shop.app.get_run(sqlite_shop.completed("t-busy"))
    busy = [first.run_id]
    for i in range(1, 4):  # more runs of the thread, each a microsecond newer
        at = first.created_at + i * 1e-6
        again = first.replace(run_id=f"{first.run_id}-{i}", created_at=at, updated_at=at)
        run_sync(sqlite_store.create_run(again), "create_run")
        busy.append(again.run_id)
    mine = sqlite_shop.completed("acme:t-new")
    newest_first = [mine, *busy[::-1], *older[::-1]]

    def pages(key: str, query: str = "") -> list[list[str]]:
        found: list[list[str]] = []
        after: str | None = None
        while True:
            url = f"/api/runs?limit=2{query}" + (f"&before={after}" if after else "")
            body = client.get(url, headers=auth(key)).json()
            found.append([r["run_id"] for r in body["runs"]])
            after = body["next"]
            if after is None:
                return found
            assert after == found[-1][-1]  # the page's oldest (a page of completed runs)

    listed = pages(VIEWER)
    assert [r for page in listed for r in page] == newest_first
    assert [len(p) for p in listed] == [2, 2, 2, 2, 0]  # a full last page: one empty after
    acme = pages(ACME)
    assert [r for page in acme for r in page] == [mine, older[1]]
    assert [r for page in pages(VIEWER, "&thread_id=t-busy") for r in page] == busy[::-1]
    # a position the key may not see is no position: the same 404 as an unknown run
    _error(client.get(f"/api/runs?before={busy[0]}", headers=auth(ACME)), 404)
    _error(client.get("/api/runs?before=run-unknown", headers=auth(VIEWER)), 404)

    monkeypatch.setattr(api, "SCAN", 2)  # a page of the threads' read: two runs
    monkeypatch.setattr(api, "THREAD_SCAN", 20)
    threads = client.get("/api/threads?limit=3", headers=auth(VIEWER)).json()["threads"]
    assert [t["thread_id"] for t in threads] == ["acme:t-new", "t-busy", "t-second"]
    assert threads[1]["latest_run_id"] == busy[-1]
    everything = client.get("/api/threads", headers=auth(VIEWER)).json()["threads"]
    assert len(everything) == 5
    theirs = client.get("/api/threads", headers=auth(ACME)).json()["threads"]
    assert [t["thread_id"] for t in theirs] == ["acme:t-new", "acme:t-old"]
    # page after page: next is the page's last thread's latest run
    for key, limit in ((VIEWER, 2), (VIEWER, 1), (VIEWER, 3), (ACME, 1)):
        listed, after = [], None
        while True:
            url = f"/api/threads?limit={limit}" + (f"&before={after}" if after else "")
            body = client.get(url, headers=auth(key)).json()
            listed += [t["thread_id"] for t in body["threads"]]
            after = body["next"]
            if after is None:
                break
            assert after == body["threads"][-1]["latest_run_id"]
        whole = client.get("/api/threads", headers=auth(key)).json()["threads"]
        assert listed == [t["thread_id"] for t in whole], (key, limit)
    _error(client.get(f"/api/threads?before={busy[0]}", headers=auth(ACME)), 404)
    monkeypatch.setattr(api, "THREAD_SCAN", 4)  # the read's bound: the newest 4 runs
    bounded = client.get("/api/threads", headers=auth(VIEWER)).json()
    assert [t["thread_id"] for t in bounded["threads"]] == ["acme:t-new", "t-busy"]
    # not the last page: next goes on where the read stopped (the 4th newest run)
    assert bounded["next"] == busy[1]
    rest = client.get(f"/api/threads?before={busy[1]}", headers=auth(VIEWER)).json()
    assert [t["thread_id"] for t in rest["threads"]] == ["t-second", "acme:t-old", "t-first"]
    # its read ended on a full read of runs: whether more are left, the next page tells
    assert rest["next"] == older[0]
    last = client.get(f"/api/threads?before={older[0]}", headers=auth(VIEWER)).json()
    assert last == {"threads": [], "next": None}
