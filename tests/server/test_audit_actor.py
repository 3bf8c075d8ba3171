"""Every state-changing path over HTTP leaves an audit record with its actor, on every
store: a Continue sent as a start with ``input: null`` is the audited Continue (it wrote
no record), and a run an API key starts carries that key's actor (on the run and in a
start record), whether started by REST, ``runs/stream`` or AG-UI."""

from __future__ import annotations

from typing import Any

import pytest
from shop import OPERATOR, USER, VIEWER, Shop, auth
from starlette.testclient import TestClient

from oncegraph import FaultPlan
from oncegraph.errors import _CrashSignal
from oncegraph.runs.launch import started_by


def audit(client: TestClient, run_id: str) -> list[dict[str, Any]]:
    found = client.get(f"/api/runs/{run_id}/audit", headers=auth(VIEWER)).json()["audit"]
    return list(reversed(found))  # oldest first


def crashed(shop: Shop, thread: str) -> str:
    """A run left ``running`` by a crash in its process (before its first step)."""
    with pytest.raises(_CrashSignal):
        shop.app.invoke(USER, {"thread_id": thread, "fault_plan": FaultPlan("before_checkpoint")})
    (run,) = shop.app.runs(thread_id=thread)
    assert run.status == "running"
    return run.run_id


def test_a_continue_sent_as_a_start_with_null_input_is_audited(
    kshop: Shop, kclient: TestClient
) -> None:
    run_id = crashed(kshop, "t-null")
    assert audit(kclient, run_id) == []
    went_on = kclient.post(
        "/api/threads/t-null/runs", headers=auth(OPERATOR), json={"input": None, "wait": True}
    )
    assert went_on.status_code == 200, went_on.text
    assert went_on.json()["run_id"] == run_id
    assert went_on.json()["run"]["status"] == "completed"
    (record,) = audit(kclient, run_id)
    assert (record["action"], record["actor"]) == ("continue", "api:otto")
    assert record["details"]["before"] == "running"
    assert "input null" in record["reason"]
    # a thread with nothing to continue: refused, nothing recorded
    none = kclient.post(
        "/api/threads/t-null-none/runs", headers=auth(OPERATOR), json={"input": None}
    )
    assert none.status_code == 409, none.text
    done = kclient.post("/api/threads/t-null/runs", headers=auth(OPERATOR), json={"input": None})
    assert done.status_code == 409 and "unfinished" in done.json()["error"]["message"]
    assert len(audit(kclient, run_id)) == 1


def _started_by_otto(shop: Shop, client: TestClient, run_id: str) -> None:
    run = shop.app.get_run(run_id)
    assert started_by(run.config) == "api:otto"  # on the run record itself
    view = client.get(f"/api/runs/{run_id}", headers=auth(VIEWER)).json()["run"]
    assert view["started_by"] == "api:otto"
    (record,) = [a for a in audit(client, run_id) if a["action"] == "start"]
    assert record["actor"] == "api:otto" and record["target_id"] == run_id


def test_a_run_a_key_starts_carries_its_actor_by_rest_stream_and_agui(
    kshop: Shop, kclient: TestClient
) -> None:
    rest = kclient.post(
        "/api/threads/t-by-rest/runs", headers=auth(OPERATOR), json={"input": USER, "wait": True}
    )
    assert rest.status_code == 200, rest.text
    _started_by_otto(kshop, kclient, rest.json()["run_id"])

    streamed = kclient.post(
        "/api/threads/t-by-stream/runs/stream", headers=auth(OPERATOR), json={"input": USER}
    )
    assert streamed.status_code == 200 and "event: end" in streamed.text
    (run,) = kshop.app.runs(thread_id="t-by-stream")
    _started_by_otto(kshop, kclient, run.run_id)

    agui = kclient.post(
        "/api/agui",
        headers=auth(OPERATOR),
        json={
            "threadId": "t-by-agui",
            "runId": "client-run-1",
            "messages": [{"id": "u1", "role": "user", "content": "refund order 1042"}],
            "state": {},
            "tools": [],
            "context": [],
            "forwardedProps": {},
        },
    )
    assert agui.status_code == 200 and "RUN_FINISHED" in agui.text, agui.text
    (run,) = kshop.app.runs(thread_id="t-by-agui")
    _started_by_otto(kshop, kclient, run.run_id)

    # a run a program starts in its own process carries no actor
    kshop.app.invoke(USER, {"thread_id": "t-by-program"})
    (run,) = kshop.app.runs(thread_id="t-by-program")
    assert started_by(run.config) is None and audit(kclient, run.run_id) == []
