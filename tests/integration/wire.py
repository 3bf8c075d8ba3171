"""A real local HTTP server that speaks the model providers' wire formats.

Only the paid API is doubled: a stdlib ``ThreadingHTTPServer`` on 127.0.0.1 records
every request and answers, in order, from a queue of replies; with the queue empty it
asks ``answer(request)`` (so a server can answer by conversation, for processes that
restart). A reply is a JSON body, ``HANG`` (never answered), or a :class:`Stream`: a
server-sent-event stream written chunk by chunk (``Transfer-Encoding: chunked``), as
OpenAI, Anthropic and Gemini (``alt=sse``) stream. A stream may stop after some events
until the test sets its ``gate`` (the client received the first delta), which proves
the deltas reach the caller while the answer is still being written.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

GATE_WAIT = 60.0  # a generous bound for a loaded machine, not a measurement


@dataclass(frozen=True, slots=True)
class Recorded:
    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    body: Any


@dataclass(slots=True)
class Stream:
    """An SSE reply. ``events`` are ``(event name or None, data)``; data that is not a
    string is sent as JSON. With ``gate``, the first ``gate_after`` events are sent, then
    the server waits for ``gate`` before the rest (``gate_timed_out`` tells a test that the
    client never signalled)."""

    events: Sequence[tuple[str | None, Any]]
    gate: threading.Event | None = None
    gate_after: int = 1
    gate_timed_out: bool = field(default=False)


Reply = tuple[int, Any]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    replies: deque[Reply]
    requests: list[Recorded]
    answer: Callable[[Recorded], Reply] | None
    release: threading.Event
    connections: int  # client connections open now
    changed: threading.Condition  # notified when ``connections`` changes
    lock: threading.Lock


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def setup(self) -> None:
        super().setup()
        with self.server.changed:
            self.server.connections += 1
            self.server.changed.notify_all()

    def finish(self) -> None:  # the client closed the connection (or the server did)
        try:
            super().finish()
        finally:
            with self.server.changed:
                self.server.connections -= 1
                self.server.changed.notify_all()

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(length)
        recorded = Recorded(
            method="POST",
            path=self.path,
            headers={k.lower(): v for k, v in self.headers.items()},
            body=json.loads(raw) if raw else None,
        )
        with self.server.lock:
            self.server.requests.append(recorded)
            reply = self.server.replies.popleft() if self.server.replies else None
        if reply is None and self.server.answer is not None:
            reply = self.server.answer(recorded)
        if reply is None:
            self._send(500, {"error": {"message": "test server: no reply queued"}})
            return
        status, body = reply
        if body == "HANG":  # never answer; released when the server closes
            self.server.release.wait(30)
            return
        if isinstance(body, Stream):
            self._stream(body)
            return
        self._send(status, body)

    def _send(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, stream: Stream) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for index, (name, data) in enumerate(stream.events):
            gated = stream.gate is not None and index == stream.gate_after
            if gated and stream.gate is not None and not stream.gate.wait(GATE_WAIT):
                stream.gate_timed_out = True
            text = data if isinstance(data, str) else json.dumps(data)
            event = (f"event: {name}\n" if name else "") + f"data: {text}\n\n"
            self._chunk(event.encode())
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):X}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass


class WireServer:
    """A real HTTP server on 127.0.0.1 that records requests and replies from a queue
    (then from ``answer``, when given)."""

    def __init__(self, answer: Callable[[Recorded], Reply] | None = None) -> None:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.replies = deque()
        self._server.requests = []
        self._server.answer = answer
        self._server.release = threading.Event()
        self._server.connections = 0
        self._server.changed = threading.Condition()
        self._server.lock = threading.Lock()
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), daemon=True
        )
        self._thread.start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def requests(self) -> list[Recorded]:
        with self._server.lock:
            return list(self._server.requests)

    @property
    def connections(self) -> int:
        return self._server.connections

    def wait_no_connections(self, timeout: float) -> bool:
        """True once every client connection is closed; False if one is still open
        after ``timeout`` seconds (a generous bound, not a measurement)."""
        with self._server.changed:
            return self._server.changed.wait_for(lambda: self._server.connections == 0, timeout)

    def reply(self, body: Any, status: int = 200) -> None:
        self._server.replies.append((status, body))

    def hang(self) -> None:
        self._server.replies.append((200, "HANG"))

    def close(self) -> None:
        self._server.release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)


# -- the wire formats -------------------------------------------------------------------


def openai_completion(message: dict[str, Any], finish: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 30, "completion_tokens": 7, "total_tokens": 37},
    }


def openai_stream(
    texts: Sequence[str],
    calls: Sequence[tuple[str, str, Sequence[str]]] = (),
    finish: str = "stop",
    gate: threading.Event | None = None,
) -> Stream:
    """A chat-completions stream: text deltas, then each ``(id, name, argument pieces)``
    tool call in pieces, the finish reason, the usage chunk and ``[DONE]``."""

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return {
            "id": "chatcmpl-9",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "gpt-4o-mini",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        }

    events: list[tuple[str | None, Any]] = [(None, chunk({"role": "assistant", "content": ""}))]
    events += [(None, chunk({"content": text})) for text in texts]
    for index, (call_id, name, pieces) in enumerate(calls):
        head = {"index": index, "id": call_id, "type": "function"}
        events.append(
            (None, chunk({"tool_calls": [{**head, "function": {"name": name, "arguments": ""}}]}))
        )
        for piece in pieces:
            args = {"index": index, "function": {"arguments": piece}}
            events.append((None, chunk({"tool_calls": [args]})))
    events.append((None, chunk({}, finish)))
    usage = {"prompt_tokens": 30, "completion_tokens": 7, "total_tokens": 37}
    events.append((None, {**chunk({}), "choices": [], "usage": usage}))
    events.append((None, "[DONE]"))
    return Stream(events, gate=gate, gate_after=2)


def anthropic_message(content: list[dict[str, Any]], stop: str) -> dict[str, Any]:
    return {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-6",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 40, "output_tokens": 9},
    }


def anthropic_stream(
    texts: Sequence[str],
    calls: Sequence[tuple[str, str, Sequence[str]]] = (),
    stop: str = "end_turn",
    gate: threading.Event | None = None,
) -> Stream:
    """A Messages stream: a text block in deltas, then tool_use blocks whose input
    arrives as ``input_json_delta`` pieces."""
    start = anthropic_message([], stop)
    start.update(stop_reason=None, usage={"input_tokens": 40, "output_tokens": 1})
    events: list[tuple[str | None, Any]] = [
        ("message_start", {"type": "message_start", "message": start}),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
    ]
    for text in texts:
        delta = {"type": "text_delta", "text": text}
        events.append(
            ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})
        )
    events.append(("content_block_stop", {"type": "content_block_stop", "index": 0}))
    for offset, (call_id, name, pieces) in enumerate(calls, 1):
        block = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
        events.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": offset, "content_block": block},
            )
        )
        for piece in pieces:
            delta = {"type": "input_json_delta", "partial_json": piece}
            events.append(
                (
                    "content_block_delta",
                    {"type": "content_block_delta", "index": offset, "delta": delta},
                )
            )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": offset}))
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": 9},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return Stream(events, gate=gate, gate_after=3)


def gemini_response(parts: list[dict[str, Any]], finish: str | None) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish is not None:
        candidate["finishReason"] = finish
    return {
        "candidates": [candidate],
        "usageMetadata": {
            "promptTokenCount": 50,
            "candidatesTokenCount": 11,
            "totalTokenCount": 61,
        },
        "responseId": "resp-g1",
        "modelVersion": "gemini-2.5-flash-001",  # the model that served it, as Gemini says
    }


def gemini_stream(
    texts: Sequence[str],
    calls: Sequence[dict[str, Any]] = (),
    gate: threading.Event | None = None,
) -> Stream:
    """``streamGenerateContent?alt=sse``: one response chunk per text piece, then the
    function-call parts with the finish reason and the usage."""
    events: list[tuple[str | None, Any]] = [
        (None, gemini_response([{"text": text}], None)) for text in texts
    ]
    events.append((None, gemini_response([{"functionCall": c} for c in calls], "STOP")))
    return Stream(events, gate=gate, gate_after=1)
