"""The AG-UI endpoint: a RunAgentInput in, AG-UI events out, each one valid by the
protocol's own models (the ``ag-ui-protocol`` package)."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pydantic
from ag_ui.core import Event
from shop import CARD, OPERATOR, VIEWER, auth

from conftest import Live

EVENTS: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(Event)


def agui(live: Live, key: str, body: dict[str, Any]) -> httpx.Response:
    with httpx.Client(base_url=live.url, timeout=60) as client:
        return client.post("/api/agui", headers=auth(key), json=body)


def parsed(response: httpx.Response) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.text
    found = []
    for line in response.text.splitlines():
        if line.startswith("data: "):
            event = orjson.loads(line[6:])
            EVENTS.validate_python(event)  # raises if it is not an AG-UI event
            found.append(event)
    return found


def _input(*messages: dict[str, Any]) -> dict[str, Any]:
    return {
        "threadId": "t-agui",
        "runId": "client-run-1",
        "messages": list(messages),
        "state": {},
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }


ASK = {"id": "u1", "role": "user", "content": "refund order 1042"}


def test_a_run_streams_as_agui_events(live: Live) -> None:
    events = parsed(agui(live, OPERATOR, _input(ASK)))
    types = [e["type"] for e in events]
    assert types[0] == "RUN_STARTED" and types[-1] == "RUN_FINISHED"
    assert events[0]["runId"] == "client-run-1" and events[0]["threadId"] == "t-agui"
    run_id = events[0]["metadata"]["oncegraph_run_id"]
    assert run_id.startswith("run_")
    assert types.count("STEP_STARTED") == types.count("STEP_FINISHED") >= 3
    (start,) = [e for e in events if e["type"] == "TOOL_CALL_START"]
    assert start["toolCallName"] == "refund"
    (args,) = [e for e in events if e["type"] == "TOOL_CALL_ARGS"]
    assert orjson.loads(args["delta"]) == {"order_id": "1042", "card": "***"}  # masked
    (result,) = [e for e in events if e["type"] == "TOOL_CALL_RESULT"]
    assert result["toolCallId"] == start["toolCallId"]
    text = [e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT"]
    assert text == ["Refunded."]
    (snapshot,) = [e for e in events if e["type"] == "STATE_SNAPSHOT"]
    assert snapshot["snapshot"]["messages"][-1]["content"] == "Refunded."
    assert CARD not in str(events)
    assert events[-1]["result"] == {"status": "completed"}

    # the same messages again: nothing new to run
    again = agui(live, OPERATOR, _input(ASK))
    assert again.status_code == 400 and "no new message" in again.json()["error"]["message"]
    # a new message goes on the same thread; the scripted model has no answer for it
    more = parsed(agui(live, OPERATOR, _input(ASK, {"id": "u2", "role": "user", "content": "?"})))
    assert more[-1]["type"] == "RUN_ERROR" and more[-1]["message"]


def test_agui_needs_an_operator_and_a_valid_input(live: Live) -> None:
    assert agui(live, VIEWER, _input(ASK)).status_code == 403
    assert agui(live, OPERATOR, {"threadId": "t", "runId": "r"}).status_code == 400
    bad = _input({"id": "u1", "role": "user", "content": [{"type": "binary"}]})
    assert agui(live, OPERATOR, bad).status_code == 400
    assert agui(live, OPERATOR, _input({"role": "user", "content": "x"})).status_code == 400
