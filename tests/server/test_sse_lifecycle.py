"""Event streams never leave a client waiting on a silent connection: both kinds (a
run this server executes, from its buffer; any other, from its checkpoints) send a
comment line while the run is in a long step, and end when the run ends: completed,
abandoned (the run taken from this server), or taken over by the recovery pass after
the process that ran it died. Over a real uvicorn, on every store."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from gated import Gate, serve_gated
from shop import OPERATOR, USER, VIEWER, Shop, auth

from conftest import start_live, stop_live
from oncegraph import FaultPlan
from oncegraph.errors import _CrashSignal
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import RunStatus

KEEPALIVE = 0.2


@pytest.fixture
def gated(kept: Checkpointer) -> Iterator[tuple[Gate, str]]:
    with serve_gated(kept, keepalive=KEEPALIVE) as found:
        yield found


def follow(url: str, path: str, until_keepalive: threading.Event | None = None) -> Iterator[Any]:
    """The stream's items as they come: ``"keep-alive"`` for a comment line, else
    ``(event, data)``. A read that waits 20 s for a line fails the test."""
    with (
        httpx.Client(base_url=url, timeout=httpx.Timeout(20.0)) as client,
        client.stream("GET", path, headers=auth(VIEWER)) as response,
    ):
        assert response.status_code == 200
        event = None
        for line in response.iter_lines():
            if line.startswith(": keep-alive"):
                yield "keep-alive"
            elif line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                yield (event, orjson.loads(line[6:]))


def test_a_derived_stream_keeps_alive_in_a_long_step_and_ends_with_its_run(
    gated: tuple[Gate, str],
) -> None:
    gate, url = gated
    # a run this server does not execute (a worker's, another process's): derived
    runner = threading.Thread(
        target=lambda: gate.app.invoke({"done": 0}, {"thread_id": "t-derived-ka"})
    )
    runner.start()
    try:
        assert gate.entered.wait(30)
        (run,) = gate.app.runs(thread_id="t-derived-ka")
        seen: list[Any] = []
        for item in follow(url, f"/api/runs/{run.run_id}/events"):
            seen.append(item)
            if item == "keep-alive" and not gate.opened.is_set():
                gate.opened.set()  # the step ends once the stream proved it is alive
        assert seen[0][0] == "metadata" and seen[0][1]["derived"] is True
        assert "keep-alive" in seen
        assert seen[-1] == ("end", {"run_id": run.run_id, "status": "completed"})
    finally:
        gate.opened.set()
        runner.join(60)


def test_a_buffered_stream_keeps_alive_and_ends_with_its_run(gated: tuple[Gate, str]) -> None:
    gate, url = gated
    with httpx.Client(base_url=url, timeout=30) as client:
        started = client.post(
            "/api/threads/t-buffer-ka/runs", headers=auth(OPERATOR), json={"input": {"done": 0}}
        )
    assert started.status_code == 202, started.text
    seen: list[Any] = []
    for item in follow(url, started.json()["events_url"]):
        seen.append(item)
        if item == "keep-alive":
            gate.opened.set()
    assert "keep-alive" in seen
    assert seen[-1][0] == "end" and seen[-1][1]["status"] == "completed"


def test_a_stream_ends_when_its_run_is_taken_from_this_server(gated: tuple[Gate, str]) -> None:
    gate, url = gated
    with httpx.Client(base_url=url, timeout=30) as client:
        started = client.post(
            "/api/threads/t-taken/runs", headers=auth(OPERATOR), json={"input": {"done": 0}}
        )
        assert started.status_code == 202, started.text
        run_id = started.json()["run_id"]
        assert gate.entered.wait(30)
        gone = client.post(
            f"/api/runs/{run_id}/abandon", headers=auth(OPERATOR), json={"reason": "stop"}
        )
        assert gone.status_code == 200, gone.text
    seen: list[Any] = []
    for item in follow(url, f"/api/runs/{run_id}/events"):
        seen.append(item)
        gate.opened.set()  # the step ends; its commit finds the run is not this server's
    events = [i for i in seen if i != "keep-alive"]
    assert events[-2][0] == "error" and events[-2][1]["code"] == "run_taken_over"
    assert events[-1] == ("end", {"run_id": run_id, "status": "abandoned"})
    assert gate.app.get_run(run_id).status is RunStatus.ABANDONED


def test_the_stream_of_a_run_left_running_ends_once_the_server_takes_it_over(
    kshop: Shop,
) -> None:
    with pytest.raises(_CrashSignal):
        kshop.app.invoke(
            USER, {"thread_id": "t-orphan", "fault_plan": FaultPlan("before_checkpoint")}
        )
    (run,) = kshop.app.runs(thread_id="t-orphan")
    assert run.status is RunStatus.RUNNING
    live = start_live(kshop, keepalive=KEEPALIVE)
    try:
        seen = list(follow(live.url, f"/api/runs/{run.run_id}/events"))
    finally:
        stop_live(live)
    assert seen[-1] == ("end", {"run_id": run.run_id, "status": "completed"})
    assert kshop.performed() == 1
