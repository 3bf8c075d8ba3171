"""``Idempotency-Key`` on every state-changing request, on every store (memory, SQLite,
PostgreSQL): the same key and body answer with the first request's result (the same
run, one effect at the provider), another body is 422, a request in flight is 409, the
key belongs to its caller and lasts its window, a refused request gives its key back,
and a first request whose process died is taken over by its retry (its bound run is
started, or gone on with, never doubled)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from gated import Gate, serve_gated
from shop import ADMIN, KEYS, OPERATOR, USER, VIEWER, Shop, auth
from starlette.requests import Request
from starlette.testclient import TestClient

from conftest import client_for
from oncegraph import FaultPlan
from oncegraph.errors import ConfigError, _CrashSignal
from oncegraph.ids import new_run_id
from oncegraph.runs.launch import Launch
from oncegraph.runtime.portal import run_sync
from oncegraph.server import create_app
from oncegraph.server.idempotency import REPLAYED, _fingerprint
from oncegraph.server.operations import RETRIED
from oncegraph.storage.protocols import Checkpointer, IdempotencyStore
from oncegraph.storage.records import now
from oncegraph.storage.requests import IdempotencyRecord


def keyed(key: str, who: str = OPERATOR) -> dict[str, str]:
    return {**auth(who), "Idempotency-Key": key}


def runs_of(shop: Shop, thread: str) -> list[Any]:
    return list(shop.app.runs(thread_id=thread))


def audit_of(client: TestClient, run_id: str) -> list[tuple[str, str]]:
    found = client.get(f"/api/runs/{run_id}/audit", headers=auth(VIEWER)).json()["audit"]
    return [(a["action"], a["actor"]) for a in reversed(found)]


# -- the same request again ------------------------------------------------------------------


def test_a_start_sent_again_gets_the_same_run_and_makes_one_effect(
    kshop: Shop, kclient: TestClient
) -> None:
    first = kclient.post(
        "/api/threads/t-again/runs", headers=keyed("k-1"), json={"input": USER, "wait": True}
    )
    assert first.status_code == 200, first.text
    assert first.json()["run"]["status"] == "completed" and REPLAYED not in first.headers
    # the same request, its JSON spelled otherwise: the first answer, nothing started
    again = kclient.post(
        "/api/threads/t-again/runs",
        headers={**keyed("k-1"), "content-type": "application/json"},
        content=b'{ "wait": true,  "input": {"messages": [{"content": "refund order 1042", '
        b'"role": "user"}]} }',
    )
    assert again.status_code == 200, again.text
    assert again.headers[REPLAYED] == "true"
    assert again.json() == first.json()
    assert [r.run_id for r in runs_of(kshop, "t-again")] == [first.json()["run_id"]]
    assert kshop.performed() == 1

    # a start without wait: 202, and 202 again with the same body
    started = kclient.post("/api/threads/t-202/runs", headers=keyed("k-2"), json={"input": USER})
    assert started.status_code == 202, started.text
    twice = kclient.post("/api/threads/t-202/runs", headers=keyed("k-2"), json={"input": USER})
    assert (twice.status_code, twice.json()) == (202, started.json())
    assert len(runs_of(kshop, "t-202")) == 1


def test_another_request_under_a_used_key_is_422_and_starts_nothing(
    kshop: Shop, kclient: TestClient
) -> None:
    first = kclient.post(
        "/api/threads/t-422/runs", headers=keyed("k-used"), json={"input": USER, "wait": True}
    )
    assert first.status_code == 200, first.text
    other_body = {"input": {"messages": [{"role": "user", "content": "refund order 7"}]}}
    for path, body in [
        ("/api/threads/t-422/runs", {**other_body, "wait": True}),
        ("/api/threads/t-422-other/runs", {"input": USER, "wait": True}),
    ]:
        refused = kclient.post(path, headers=keyed("k-used"), json=body)
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"]["code"] == "idempotency_key_reused"
        assert "new key" in refused.json()["error"]["message"]
    assert len(runs_of(kshop, "t-422")) == 1 and runs_of(kshop, "t-422-other") == []
    assert kshop.performed() == 1


def test_a_key_belongs_to_its_caller(kshop: Shop, kclient: TestClient) -> None:
    body = {"input": USER, "wait": True}
    otto = kclient.post("/api/threads/t-scope/runs", headers=keyed("shared"), json=body)
    assert otto.status_code == 200, otto.text
    # another key's caller with the same key and body: a request of its own, not otto's
    ada = kclient.post("/api/threads/t-scope/runs", headers=keyed("shared", ADMIN), json=body)
    assert ada.status_code == 200, ada.text
    assert REPLAYED not in ada.headers and ada.json()["run_id"] != otto.json()["run_id"]
    assert {r.run_id for r in runs_of(kshop, "t-scope")} == {
        otto.json()["run_id"],
        ada.json()["run_id"],
    }
    # and each still gets its own answer again
    again = kclient.post("/api/threads/t-scope/runs", headers=keyed("shared"), json=body)
    assert again.json()["run_id"] == otto.json()["run_id"]


def test_a_key_lasts_its_window(kshop: Shop) -> None:
    with client_for(kshop, recover=False, idempotency_window=0.001) as client:
        body = {"input": USER, "wait": True}
        first = client.post("/api/threads/t-window/runs", headers=keyed("k-w"), json=body)
        assert first.status_code == 200, first.text
        # the window ended: the same key is a new request, and its old record is replaced
        later = client.post("/api/threads/t-window/runs", headers=keyed("k-w"), json=body)
        assert later.status_code == 200, later.text
        assert REPLAYED not in later.headers and later.json()["run_id"] != first.json()["run_id"]
    store = kshop.app.store
    assert isinstance(store, IdempotencyStore)
    pruned = run_sync(store.prune_requests(before=now() + 1), "prune")
    assert pruned == 1
    with pytest.raises(ConfigError, match="idempotency_window"):
        create_app(kshop.app, keys=KEYS, idempotency_window=0)


def test_a_refused_request_gives_its_key_back(kshop: Shop, kclient: TestClient) -> None:
    run_id, _ = kshop.parked("t-refused")  # an unfinished run: new input is refused
    body = {"input": USER, "wait": True}
    refused = kclient.post("/api/threads/t-refused/runs", headers=keyed("k-r"), json=body)
    assert refused.status_code == 409, refused.text
    assert [r.run_id for r in runs_of(kshop, "t-refused")] == [run_id]
    gone = kclient.post(
        f"/api/runs/{run_id}/abandon", headers=auth(OPERATOR), json={"reason": "give up"}
    )
    assert gone.status_code == 200, gone.text
    # fixed: the same key and body now start the run (the refusal was not kept)
    started = kclient.post("/api/threads/t-refused/runs", headers=keyed("k-r"), json=body)
    assert started.status_code == 200, started.text
    assert REPLAYED not in started.headers and started.json()["run"]["status"] == "completed"


def test_a_bad_key_is_400_naming_the_rule(kclient: TestClient) -> None:
    for bad in ["x" * 256, "tab\there"]:
        got = kclient.post("/api/threads/t-bad/runs", headers=keyed(bad), json={"input": USER})
        assert got.status_code == 400, got.text
        assert "printable ASCII" in got.json()["error"]["message"]


# -- a first request whose process died ----------------------------------------------------


def _in_flight(shop: Shop, key: str, path: str, body: dict[str, Any], run_id: str) -> None:
    """What a server SIGKILLed after claiming ``key`` leaves: the key in flight, bound to
    ``run_id``, and nobody holding it (its lock died with the process)."""
    store = shop.app.store
    assert isinstance(store, IdempotencyStore)
    record = IdempotencyRecord(
        scope=json.dumps([shop.app.app_id, None, "otto", "operator"]),
        key=key,
        request_hash=_hash_for(path, body),
        created_at=now(),
        expires_at=now() + 3600,
        run_id=run_id,
    )
    _, created = run_sync(store.claim_request(record), "claim")
    assert created


def test_a_retry_after_a_crash_before_the_run_started_starts_it_under_its_bound_id(
    kshop: Shop, kclient: TestClient
) -> None:
    body = {"input": USER, "wait": True}
    bound = new_run_id()
    _in_flight(kshop, "k-dead-1", "/api/threads/t-dead-1/runs", body, bound)
    retry = kclient.post("/api/threads/t-dead-1/runs", headers=keyed("k-dead-1"), json=body)
    assert retry.status_code == 200, retry.text
    assert retry.json()["run_id"] == bound and retry.json()["run"]["status"] == "completed"
    assert [r.run_id for r in runs_of(kshop, "t-dead-1")] == [bound]
    assert kshop.performed() == 1
    again = kclient.post("/api/threads/t-dead-1/runs", headers=keyed("k-dead-1"), json=body)
    assert again.headers[REPLAYED] == "true" and again.json()["run_id"] == bound
    assert kshop.performed() == 1


def test_a_retry_after_a_crash_mid_run_goes_on_with_that_run(
    kshop: Shop, kclient: TestClient
) -> None:
    body = {"input": USER, "wait": True}
    bound = new_run_id()
    # the dead server had started the run under the bound id; it crashed mid-run
    with pytest.raises(_CrashSignal):
        kshop.app.invoke(
            USER,
            {"thread_id": "t-dead-2", "fault_plan": FaultPlan("before_checkpoint")},
            launch=Launch("api:otto", run_id=bound, request_key="k-dead-2"),
        )
    assert runs_of(kshop, "t-dead-2")[0].status == "running"
    _in_flight(kshop, "k-dead-2", "/api/threads/t-dead-2/runs", body, bound)
    retry = kclient.post("/api/threads/t-dead-2/runs", headers=keyed("k-dead-2"), json=body)
    assert retry.status_code == 200, retry.text
    assert retry.json()["run_id"] == bound and retry.json()["run"]["status"] == "completed"
    assert [r.run_id for r in runs_of(kshop, "t-dead-2")] == [bound]
    assert kshop.performed() == 1
    found = kclient.get(f"/api/runs/{bound}/audit", headers=auth(VIEWER)).json()["audit"]
    assert [(a["action"], a["actor"]) for a in reversed(found)] == [
        ("start", "api:otto"),
        ("continue", "api:otto"),
    ]
    assert found[0]["reason"] == RETRIED


def _hash_for(path: str, body: dict[str, Any]) -> str:
    """The fingerprint the server gives ``POST path`` with ``body`` (its own function)."""
    scope = {
        "type": "http",
        "method": "POST",
        "path": path,
        "query_string": b"",
        "headers": [],
        "server": ("testserver", 80),
        "scheme": "http",
    }
    return _fingerprint(Request(scope), orjson.dumps(body), None)


# -- in flight ---------------------------------------------------------------------------------


@pytest.fixture
def gated(kept: Checkpointer) -> Iterator[tuple[Gate, str]]:
    with serve_gated(kept) as found:
        yield found


def test_a_key_whose_first_request_is_in_flight_is_409(gated: tuple[Gate, str]) -> None:
    gate, url = gated
    body = {"input": {"done": 0}, "wait": True}
    answers: list[httpx.Response] = []

    def first() -> None:
        with httpx.Client(base_url=url, timeout=60) as c:
            answers.append(c.post("/api/threads/t-409/runs", headers=keyed("k-409"), json=body))

    sender = threading.Thread(target=first)
    sender.start()
    assert gate.entered.wait(30), "the first request's run never started"
    with httpx.Client(base_url=url, timeout=60) as c:
        busy = c.post("/api/threads/t-409/runs", headers=keyed("k-409"), json=body)
        assert busy.status_code == 409, busy.text
        assert busy.json()["error"]["code"] == "request_in_flight"
        assert busy.headers["retry-after"] == "1"
        # another body under the key while it is in flight: 422 all the same
        other = c.post(
            "/api/threads/t-409/runs", headers=keyed("k-409"), json={"input": {"done": 5}}
        )
        assert other.status_code == 422, other.text
        gate.opened.set()
        sender.join(60)
        (done,) = answers
        assert done.status_code == 200, done.text
        again = c.post("/api/threads/t-409/runs", headers=keyed("k-409"), json=body)
        assert again.status_code == 200 and again.json() == done.json()
        assert again.headers[REPLAYED] == "true"
    assert len(list(gate.app.runs(thread_id="t-409"))) == 1


# -- commands and streams ----------------------------------------------------------------------


def test_commands_sent_again_act_once(kshop: Shop, kclient: TestClient) -> None:
    run_id, _ = kshop.parked("t-cmd")
    first = kclient.post(
        f"/api/runs/{run_id}/continue", headers=keyed("c-1"), json={"reason": "look again"}
    )
    assert first.status_code == 200, first.text
    again = kclient.post(
        f"/api/runs/{run_id}/continue", headers=keyed("c-1"), json={"reason": "look again"}
    )
    assert again.json() == first.json() and again.headers[REPLAYED] == "true"
    assert [a for a in audit_of(kclient, run_id) if a[0] == "continue"] == [
        ("continue", "api:otto")
    ]
    replay = {"mode": "evidence", "reason": "what happened"}
    made = kclient.post(f"/api/runs/{run_id}/replay", headers=keyed("c-2"), json=replay)
    assert made.status_code == 201, made.text
    made_again = kclient.post(f"/api/runs/{run_id}/replay", headers=keyed("c-2"), json=replay)
    assert made_again.status_code == 201 and made_again.json() == made.json()
    children = kclient.get(f"/api/runs/{run_id}", headers=auth(VIEWER)).json()["lineage"]
    assert [c["run_id"] for c in children["children"]] == [made.json()["run"]["run_id"]]
    gone = kclient.post(f"/api/runs/{run_id}/abandon", headers=keyed("c-3"), json={"reason": "x"})
    assert gone.status_code == 200, gone.text
    gone_again = kclient.post(
        f"/api/runs/{run_id}/abandon", headers=keyed("c-3"), json={"reason": "x"}
    )
    assert gone_again.json() == gone.json() and gone_again.headers[REPLAYED] == "true"
    assert [a for a in audit_of(kclient, run_id) if a[0] == "abandon"] == [("abandon", "api:otto")]


def test_a_streamed_start_sent_again_streams_the_same_run(kshop: Shop, kclient: TestClient) -> None:
    body = {"input": USER}
    first = kclient.post("/api/threads/t-stream/runs/stream", headers=keyed("s-1"), json=body)
    assert first.status_code == 200, first.text
    assert '"status":"completed"' in first.text
    again = kclient.post("/api/threads/t-stream/runs/stream", headers=keyed("s-1"), json=body)
    assert again.status_code == 200, again.text
    (run,) = runs_of(kshop, "t-stream")
    for answer in (first, again):
        head = answer.text.split("\n\n", 1)[0]
        assert run.run_id in head and "event: metadata" in head
        assert "event: end" in answer.text
    assert kshop.performed() == 1


def test_the_ui_gives_each_form_its_key_and_a_form_posted_twice_acts_once(
    kshop: Shop, kclient: TestClient
) -> None:
    from test_ui import login

    run_id, _ = kshop.parked("t-ui-key")
    csrf = login(kclient, OPERATOR)
    page = kclient.get(f"/ui/runs/{run_id}").text
    keys = [part.split('"', 1)[0] for part in page.split('name="idempotency_key" value="')[1:]]
    assert len(keys) >= 4 and len(set(keys)) == len(keys)  # one per form, each its own
    form = {"reason": "stop here", "idempotency_key": keys[0], "csrf": csrf}
    first = kclient.post(f"/ui/runs/{run_id}/abandon", data=form, follow_redirects=False)
    assert first.status_code == 303, first.text
    again = kclient.post(f"/ui/runs/{run_id}/abandon", data=form, follow_redirects=False)
    assert again.status_code == 303 and again.headers["location"] == first.headers["location"]
    assert [a for a in audit_of(kclient, run_id) if a[0] == "abandon"] == [("abandon", "api:otto")]


def test_an_agui_run_sent_again_streams_the_same_run(kshop: Shop, kclient: TestClient) -> None:
    body = {
        "threadId": "t-agui-key",
        "runId": "client-run-1",
        "messages": [{"id": "u1", "role": "user", "content": "refund order 1042"}],
        "state": {},
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }
    answers = [kclient.post("/api/agui", headers=keyed("a-1"), json=body) for _ in range(2)]
    (run,) = runs_of(kshop, "t-agui-key")
    for answer in answers:
        assert answer.status_code == 200, answer.text
        started = orjson.loads(answer.text.split("data: ", 1)[1].split("\n", 1)[0])
        assert started["type"] == "RUN_STARTED"
        assert started["metadata"]["oncegraph_run_id"] == run.run_id
        assert "RUN_FINISHED" in answer.text
    assert kshop.performed() == 1


def test_a_replay_or_branch_whose_server_died_is_not_made_twice(
    kshop: Shop, kclient: TestClient
) -> None:
    parent = kshop.completed("t-made")
    service = kshop.app.service
    # a replay the dead server had made (and run to its end) before it could answer
    replay = {"mode": "evidence", "reason": "what happened"}
    bound = new_run_id()
    run_sync(
        service.replay(
            parent, mode="evidence", reason="what happened", actor="api:otto", new_run_id=bound
        ),
        "replay",
    )
    path = f"/api/runs/{parent}/replay"
    _in_flight(kshop, "m-1", path, replay, bound)
    again = kclient.post(path, headers=keyed("m-1"), json=replay)
    assert again.status_code == 201, again.text
    assert again.json()["run"]["run_id"] == bound and again.json()["run"]["status"] == "completed"
    assert "output" in again.json()
    # a branch likewise: the one it made, with what differs from where it was made
    patch = {"patch": {"messages": [{"role": "user", "content": "and order 7"}]}, "reason": "x"}
    branched = new_run_id()
    run_sync(
        service.branch(
            parent, None, patch=patch["patch"], reason="x", actor="api:otto", new_run_id=branched
        ),
        "branch",
    )
    path = f"/api/runs/{parent}/branch"
    _in_flight(kshop, "m-2", path, patch, branched)
    made = kclient.post(path, headers=keyed("m-2"), json=patch)
    assert made.status_code == 201, made.text
    assert made.json()["run"]["run_id"] == branched and made.json()["checkpoint_id"]
    assert [d["channel"] for d in made.json()["diff"]] == ["messages"]
    children = kclient.get(f"/api/runs/{parent}", headers=auth(VIEWER)).json()["lineage"]
    assert {c["run_id"] for c in children["children"]} == {bound, branched}
    assert kshop.performed() == 1
