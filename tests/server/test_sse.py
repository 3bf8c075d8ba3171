"""Server-Sent Events over a real uvicorn: a run's events, resumed with Last-Event-ID.

A run started over HTTP is streamed from the server's buffer (ids 1, 2, 3 ...); any
other run (one started in-process here, as a worker would) is re-derived from its
checkpoints (ids ``cp.<n>``). Either way a client that reconnects with the last id it
saw gets exactly the events after it.
"""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest
from shop import ADMIN, CARD, OPERATOR, USER, VIEWER, Shop, auth

from conftest import Live, start_live, stop_live


def events(response: httpx.Response) -> list[dict[str, Any]]:
    """Parse an event stream into ``{"id", "event", "data"}`` dicts."""
    found = []
    for block in response.text.split("\n\n"):
        item: dict[str, Any] = {}
        for line in block.splitlines():
            if line.startswith(":"):
                continue
            name, _, value = line.partition(": ")
            if name == "data":
                item["data"] = orjson.loads(value)
            elif name in ("id", "event"):
                item[name] = value
        if item:
            found.append(item)
    return found


def read(live: Live, url: str, key: str, last: str | None = None) -> list[dict[str, Any]]:
    headers = auth(key)
    if last is not None:
        headers["Last-Event-ID"] = last
    with httpx.Client(base_url=live.url, timeout=60) as client:
        response = client.get(url, headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    return events(response)


def test_a_started_run_streams_and_resumes_after_the_last_event_id(live: Live) -> None:
    with httpx.Client(base_url=live.url, timeout=60) as client:
        started = client.post(
            "/api/threads/t-sse/runs", headers=auth(OPERATOR), json={"input": USER, "wait": True}
        )
    assert started.status_code == 200, started.text
    run_id = started.json()["run_id"]
    full = read(live, f"/api/runs/{run_id}/events", VIEWER)
    assert full[0]["event"] == "metadata" and full[0]["data"]["run_id"] == run_id
    numbered = full[1:]
    ids = [int(e["id"]) for e in numbered]
    assert ids == list(range(1, len(ids) + 1))
    assert numbered[-1]["event"] == "end" and numbered[-1]["data"]["status"] == "completed"
    kinds = {e["event"] for e in numbered}
    assert {"updates", "events", "end"} <= kinds
    assert CARD not in str(full)  # a viewer's stream is masked
    assert CARD in str(read(live, f"/api/runs/{run_id}/events", ADMIN))

    cut = ids[len(ids) // 2]
    resumed = read(live, f"/api/runs/{run_id}/events", VIEWER, last=str(cut))
    assert [int(e["id"]) for e in resumed[1:]] == [i for i in ids if i > cut]
    assert resumed[1:] == [e for e in numbered if int(e["id"]) > cut]
    at_end = read(live, f"/api/runs/{run_id}/events", VIEWER, last=str(ids[-1]))
    assert [e["event"] for e in at_end] == ["metadata"]


def test_start_and_stream_in_one_request(live: Live) -> None:
    with (
        httpx.Client(base_url=live.url, timeout=60) as client,
        client.stream(
            "POST", "/api/threads/t-sse2/runs/stream", headers=auth(OPERATOR), json={"input": USER}
        ) as response,
    ):
        assert response.status_code == 200
        text = "".join(response.iter_text())
    got = events(httpx.Response(200, text=text))
    assert got[0]["event"] == "metadata"
    assert got[-1]["event"] == "end" and got[-1]["data"]["status"] == "completed"


def test_a_run_the_server_did_not_start_is_streamed_from_its_checkpoints(
    sqlite_shop: Shop, live: Live
) -> None:
    run_id, _ = sqlite_shop.parked("t-derived")
    full = read(live, f"/api/runs/{run_id}/events", VIEWER)
    assert full[0]["data"] == {"run_id": run_id, "thread_id": "t-derived", "derived": True}
    checkpoints = [e for e in full if e["event"] == "checkpoint"]
    assert [e["id"] for e in checkpoints] == [f"cp.{n}" for n in range(len(checkpoints))]
    assert all(e["data"]["run_id"] == run_id for e in checkpoints)
    assert full[-1] == {"event": "end", "data": {"run_id": run_id, "status": "needs_review"}}
    assert CARD not in str(full)
    resumed = read(live, f"/api/runs/{run_id}/events", VIEWER, last="cp.1")
    assert [e["id"] for e in resumed if e["event"] == "checkpoint"] == [
        e["id"] for e in checkpoints[2:]
    ]


def test_events_that_fell_out_of_the_buffer_are_announced(sqlite_shop: Shop) -> None:
    live = start_live(sqlite_shop, max_events=3)
    try:
        with httpx.Client(base_url=live.url, timeout=60) as client:
            started = client.post(
                "/api/threads/t-gap/runs",
                headers=auth(OPERATOR),
                json={"input": USER, "wait": True},
            )
        run_id = started.json()["run_id"]
        got = read(live, f"/api/runs/{run_id}/events", VIEWER, last="1")
        assert got[1]["event"] == "gap" and got[1]["data"]["first_kept"] > 2
        assert len([e for e in got if "id" in e]) == 3 and got[-1]["event"] == "end"
    finally:
        stop_live(live)


@pytest.mark.parametrize("last", ["abc", "-1", "cp.x", "9" * 40])
def test_a_bad_last_event_id_is_400(sqlite_shop: Shop, live: Live, last: str) -> None:
    run_id = sqlite_shop.completed("t-bad-id")
    with httpx.Client(base_url=live.url, timeout=60) as client:
        got = client.get(
            f"/api/runs/{run_id}/events", headers={**auth(VIEWER), "Last-Event-ID": last}
        )
    assert got.status_code == 400 and "Last-Event-ID" in got.json()["error"]["message"]


def test_a_run_that_fails_ends_its_stream_with_the_error(live: Live) -> None:
    with httpx.Client(base_url=live.url, timeout=60, headers=auth(OPERATOR)) as client:
        first = client.post("/api/threads/t-fail/runs", json={"input": USER, "wait": True})
        assert first.json()["run"]["status"] == "completed"
        # the scripted model has no third turn: the second run's model node fails
        again = client.post("/api/threads/t-fail/runs", json={"input": USER, "wait": True})
    assert again.status_code == 200, again.text
    body = again.json()
    assert body["run"]["status"] == "failed" and body["error"]["message"]
    got = read(live, body["events_url"], VIEWER)
    assert [e["event"] for e in got[-2:]] == ["error", "end"]
    assert got[-1]["data"]["status"] == "failed"
