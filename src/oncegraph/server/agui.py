"""The streaming endpoint in the AG-UI protocol (``POST /api/agui``), so agent front
ends that speak it can run this app.

The body is AG-UI's ``RunAgentInput`` (``threadId``, ``runId``, ``messages``, ...); the
messages the thread does not hold yet (by id) are the run's input. The run is started
like any other (:mod:`oncegraph.server.hub`: same role, tenancy and event buffer, so it
can be re-read at ``/api/runs/{id}/events``), and its stream is translated:
``RUN_STARTED``; ``STEP_STARTED`` / ``STEP_FINISHED`` per node; ``TEXT_MESSAGE_*`` for
assistant text; ``TOOL_CALL_START`` / ``ARGS`` / ``END`` for the calls a model made and
``TOOL_CALL_RESULT`` for their results; a ``CUSTOM`` ``oncegraph.interrupt`` event when
the run pauses for an answer; then ``STATE_SNAPSHOT`` (masked as for the caller) and
``RUN_FINISHED``, or ``RUN_ERROR``. Event ids are the buffer's, so ``Last-Event-ID``
works on the run's own stream. Front-end tools and ``resume`` are not supported: an
interrupt is answered with Continue.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from oncegraph.server import bodies, idempotency, operations, schemas, sse
from oncegraph.server.auth import Role
from oncegraph.server.context import graph, need, served, shown, visible_thread
from oncegraph.server.encode import Shown
from oncegraph.server.hub import Event, RunStream
from oncegraph.server.problems import bad_request

_ROLES = ("user", "system", "developer")


def _data(payload: dict[str, Any], id: str | None = None) -> bytes:
    head = f"id: {id}\n" if id is not None else ""
    return f"{head}data: {orjson.dumps(payload).decode()}\n\n".encode()


def _input_messages(body: Mapping[str, Any], known: set[str]) -> list[dict[str, Any]]:
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise bad_request("'messages' must be a list of AG-UI messages")
    new = []
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("id"), str):
            raise bad_request("each message needs an 'id' (string) and a 'role'")
        if m["id"] in known:
            continue
        role = m.get("role")
        if role in ("assistant", "tool"):
            continue  # the thread's own history is the record; the client's copy is not
        if role not in _ROLES:
            raise bad_request(f"message role {role!r} is not supported here; use user")
        content = m.get("content")
        if not isinstance(content, str):
            raise bad_request("only text message content is supported here")
        new.append(
            {"role": "system" if role == "developer" else role, "content": content, "id": m["id"]}
        )
    return new


class Translate:
    """oncegraph stream events to AG-UI events, for one run."""

    def __init__(self, thread_id: str, run_id: str, view: Shown) -> None:
        self.thread_id = thread_id
        self.run_id = run_id
        self.view = view

    def _run_event(self, kind: str, **fields: Any) -> dict[str, Any]:
        """An event of the whole run: its kind, the client's thread and run ids, ``fields``."""
        return {"type": kind, "threadId": self.thread_id, "runId": self.run_id, **fields}

    def started(self, oncegraph_run_id: str | None) -> dict[str, Any]:
        return self._run_event("RUN_STARTED", metadata={"oncegraph_run_id": oncegraph_run_id})

    def events(self, event: Event) -> list[dict[str, Any]]:
        data = self.view.value(event.data)
        if event.event == "events" and isinstance(data, dict):
            if data.get("event") == "node_start" and "ns" not in data:
                return [{"type": "STEP_STARTED", "stepName": str(data.get("node"))}]
            if data.get("event") == "node_end" and "ns" not in data:
                return [{"type": "STEP_FINISHED", "stepName": str(data.get("node"))}]
            return []
        if event.event == "updates" and isinstance(data, dict):
            out: list[dict[str, Any]] = []
            for node, update in data.items():
                if node == "__interrupt__":
                    if update:
                        out.append(
                            {"type": "CUSTOM", "name": "oncegraph.interrupt", "value": update}
                        )
                elif isinstance(update, dict):
                    for message in update.get("messages") or ():
                        if isinstance(message, dict):
                            out.extend(self._message(message))
            return out
        if event.event == "custom":
            return [{"type": "CUSTOM", "name": "oncegraph.custom", "value": data}]
        return []

    def _message(self, m: dict[str, Any]) -> list[dict[str, Any]]:
        mid = str(m.get("id") or "")
        role = m.get("role")
        out: list[dict[str, Any]] = []
        if role == "assistant":
            content = m.get("content")
            if isinstance(content, str) and content:
                out += [
                    {"type": "TEXT_MESSAGE_START", "messageId": mid, "role": "assistant"},
                    {"type": "TEXT_MESSAGE_CONTENT", "messageId": mid, "delta": content},
                    {"type": "TEXT_MESSAGE_END", "messageId": mid},
                ]
            for call in m.get("tool_calls") or ():
                cid = str(call.get("id"))
                out += [
                    {
                        "type": "TOOL_CALL_START",
                        "toolCallId": cid,
                        "toolCallName": str(call.get("name")),
                        "parentMessageId": mid,
                    },
                    {
                        "type": "TOOL_CALL_ARGS",
                        "toolCallId": cid,
                        "delta": orjson.dumps(call.get("args") or {}).decode(),
                    },
                    {"type": "TOOL_CALL_END", "toolCallId": cid},
                ]
        elif role == "tool":
            content = m.get("content")
            out.append(
                {
                    "type": "TOOL_CALL_RESULT",
                    "messageId": mid,
                    "toolCallId": str(m.get("tool_call_id")),
                    "content": content
                    if isinstance(content, str)
                    else orjson.dumps(content).decode(),
                    "role": "tool",
                }
            )
        return out

    def finished(self, status: str | None) -> dict[str, Any]:
        return self._run_event("RUN_FINISHED", result={"status": status})


async def _stream(
    request: Request, stream: RunStream, client_run_id: str, view: Shown
) -> AsyncIterator[bytes]:
    t = Translate(stream.thread_id, client_run_id, view)
    yield _data(t.started(stream.run_id))
    status = None
    known = stream.last_id  # events made since: their effects may be new to the masker
    async for item in stream.follow(0, served(request).hub.keepalive):
        if isinstance(item, int):
            if item < 0:
                yield b": keep-alive\n\n"
            continue
        if item.id > known and item.event in sse.LEARNING:
            await view.relearn()
        if item.event == "error":
            yield _data(
                {
                    "type": "RUN_ERROR",
                    "message": view.text(str(item.data.get("message"))),
                    "code": str(item.data.get("code")),
                },
                str(item.id),
            )
            return
        if item.event == "end":
            status = item.data.get("status")
            break
        for event in t.events(item):
            yield _data(event, str(item.id))
    state = await graph(request).aget_state({"thread_id": stream.thread_id})
    yield _data({"type": "STATE_SNAPSHOT", "snapshot": view.value(state.values)})
    yield _data(t.finished(status))


async def run(request: Request) -> Response:
    """``POST /api/agui``: run the app for an AG-UI client."""
    body = await bodies.json_object(request)
    ids = bodies.model(schemas.AguiRun, body)
    thread_id, client_run_id = ids.threadId, ids.runId
    principal = need(request, Role.OPERATOR)
    thread_id = visible_thread(principal, thread_id, acting=True)
    bound = idempotency.bound_run(request)
    made = await operations.stored_run(request, bound) if bound is not None else None
    if made is not None:  # sent before with its Idempotency-Key: that run again
        stream = await operations.join(request, principal, made)
        return StreamingResponse(
            _stream(request, stream, client_run_id, await shown(request, principal, thread_id)),
            media_type=sse.MEDIA_TYPE,
            headers=sse.HEADERS,
        )
    # the thread's messages so far: what the client sends again is not new input
    state = await graph(request).aget_state({"thread_id": thread_id})
    known = {
        str(m.get("id"))
        for m in (state.values.get("messages") or ())
        if isinstance(m, dict) and m.get("id")
    }
    messages = _input_messages(body, known)
    if not messages:
        raise bad_request("no new message to run: send the user's message with a new id")
    principal, stream, _ = await operations.launch(
        request, thread_id, {"input": {"messages": messages}}
    )
    return StreamingResponse(
        _stream(request, stream, client_run_id, await shown(request, principal, thread_id)),
        media_type=sse.MEDIA_TYPE,
        headers=sse.HEADERS,
    )


__all__ = ["Translate", "run"]
