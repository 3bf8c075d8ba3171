"""Provider adapters driven by the REAL SDKs against REAL local HTTP servers.

Only the paid API is doubled: a stdlib ``ThreadingHTTPServer`` on 127.0.0.1 speaks each
provider's wire format (OpenAI ``/v1/chat/completions``, Anthropic ``/v1/messages``,
Gemini ``models/<model>:generateContent``), records every request, and answers from a
queue. The official SDK client is pointed at it through ``base_url``. Each test checks
what went over the wire (system prompt placement, declared tools, tool results with
their call ids) and what came back (tool calls with ids and parsed args, content).

A provider whose SDK is not installed is skipped with the install command as the
reason, except under ``CI=true`` where a missing SDK fails the run.
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import importlib.util
import json
import os
import threading
import warnings
from collections import deque
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import ModuleType
from typing import Any

import pytest

from oncegraph.errors import ConfigError, OnceGraphError
from oncegraph.messages import Message, ToolSpec
from oncegraph.prebuilt.models import ModelResponse, resolve_model


def _sdk(module: str, extra: str) -> ModuleType:
    if os.environ.get("CI") == "true":
        return importlib.import_module(module)
    found: ModuleType = pytest.importorskip(
        module, reason=f'needs the SDK: pip install "oncegraph[{extra}]"'
    )
    return found


# -- the local wire server -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Recorded:
    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    body: Any


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    replies: deque[tuple[int, Any]]
    requests: list[Recorded]
    release: threading.Event


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(length)
        self.server.requests.append(
            Recorded(
                method="POST",
                path=self.path,
                headers={k.lower(): v for k, v in self.headers.items()},
                body=json.loads(raw) if raw else None,
            )
        )
        if not self.server.replies:
            self._send(500, {"error": {"message": "test server: no reply queued"}})
            return
        status, body = self.server.replies.popleft()
        if body == "HANG":  # never answer; released when the server closes
            self.server.release.wait(30)
            return
        self._send(status, body)

    def _send(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass


class WireServer:
    """A real HTTP server on 127.0.0.1 that records requests and replies from a queue."""

    def __init__(self) -> None:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.replies = deque()
        self._server.requests = []
        self._server.release = threading.Event()
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), daemon=True
        )
        self._thread.start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def requests(self) -> list[Recorded]:
        return self._server.requests

    def reply(self, body: Any, status: int = 200) -> None:
        self._server.replies.append((status, body))

    def hang(self) -> None:
        self._server.replies.append((200, "HANG"))

    def close(self) -> None:
        self._server.release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)


@pytest.fixture
def server() -> Iterator[WireServer]:
    running = WireServer()
    try:
        yield running
    finally:
        running.close()


# -- shared conversation -----------------------------------------------------------------

SYSTEM = "You are a support agent for an online shop."
TOOLS: list[ToolSpec] = [
    {
        "name": "lookup_order",
        "description": "Look up an order by id.",
        "parameters": {
            "type": "object",
            "properties": {"order_id": {"type": "string"}},
            "required": ["order_id"],
        },
    },
    {
        "name": "refund_order",
        "description": "Refund an order.",
        "parameters": {
            "type": "object",
            "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}},
            "required": ["order_id", "amount"],
        },
    },
]


def _start() -> list[Message]:
    return [
        {"role": "system", "content": SYSTEM, "id": "m-sys"},
        {"role": "user", "content": "Please refund order 1042.", "id": "m-u1"},
    ]


def _with_results(history: list[Message], response: ModelResponse) -> list[Message]:
    """The conversation after the agent ran the two requested tools (one failed)."""
    calls = response.tool_calls
    return [
        *history,
        response.to_message("m-a1"),
        {
            "role": "tool",
            "content": {"order_id": "1042", "total": 59.0},
            "tool_call_id": calls[0]["id"],
            "name": calls[0]["name"],
            "id": "m-t1",
        },
        {
            "role": "tool",
            "content": "card declined",
            "tool_call_id": calls[1]["id"],
            "status": "error",
            "id": "m-t2",
        },
    ]


# -- OpenAI ----------------------------------------------------------------------------


@pytest.fixture
async def openai_model(server: WireServer) -> AsyncIterator[Any]:
    _sdk("openai", "openai")
    model = resolve_model(
        "gpt-4o-mini", "openai", base_url=server.url + "/v1", api_key="sk-test", max_retries=0
    )
    yield model
    await model.aclose()  # type: ignore[attr-defined]


def _openai_completion(message: dict[str, Any], finish: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 30, "completion_tokens": 7, "total_tokens": 37},
    }


async def test_openai_tool_call_round_trip(openai_model: Any, server: WireServer) -> None:
    server.reply(
        _openai_completion(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_Lk1",
                        "type": "function",
                        "function": {"name": "lookup_order", "arguments": '{"order_id":"1042"}'},
                    },
                    {
                        "id": "call_Rf2",
                        "type": "function",
                        "function": {
                            "name": "refund_order",
                            "arguments": '{"order_id": "1042", "amount": 59.0}',
                        },
                    },
                ],
            },
            "tool_calls",
        )
    )
    first = await openai_model.generate(_start(), tools=TOOLS)
    assert first == ModelResponse(
        content="",
        tool_calls=(
            {"id": "call_Lk1", "name": "lookup_order", "args": {"order_id": "1042"}},
            {
                "id": "call_Rf2",
                "name": "refund_order",
                "args": {"order_id": "1042", "amount": 59.0},
            },
        ),
        provider_message_id="chatcmpl-1",
        usage={"input_tokens": 30, "output_tokens": 7, "total_tokens": 37},
        raw_finish_reason="tool_calls",
    )
    sent = server.requests[0]
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == "Bearer sk-test"
    assert sent.body["model"] == "gpt-4o-mini"
    assert sent.body["messages"] == [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Please refund order 1042."},
    ]
    assert sent.body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": t["name"],
                "description": t["description"],
                "parameters": t["parameters"],
            },
        }
        for t in TOOLS
    ]

    server.reply(
        _openai_completion(
            {"role": "assistant", "content": "Refund refused: card declined."}, "stop"
        )
    )
    second = await openai_model.generate(_with_results(_start(), first), tools=TOOLS)
    assert second.content == "Refund refused: card declined."
    assert second.tool_calls == ()
    assert second.raw_finish_reason == "stop"
    wire = server.requests[1].body["messages"]
    assert wire[2]["role"] == "assistant"
    assert wire[2]["content"] is None
    assert [(c["id"], c["type"], c["function"]["name"]) for c in wire[2]["tool_calls"]] == [
        ("call_Lk1", "function", "lookup_order"),
        ("call_Rf2", "function", "refund_order"),
    ]
    assert json.loads(wire[2]["tool_calls"][1]["function"]["arguments"]) == {
        "order_id": "1042",
        "amount": 59.0,
    }
    assert wire[3] == {
        "role": "tool",
        "tool_call_id": "call_Lk1",
        "content": '{"order_id":"1042","total":59.0}',
    }
    assert wire[4] == {"role": "tool", "tool_call_id": "call_Rf2", "content": "card declined"}


async def test_openai_without_tools_sends_no_tools_field(
    openai_model: Any, server: WireServer
) -> None:
    server.reply(_openai_completion({"role": "assistant", "content": "Hello!"}, "stop"))
    response = await openai_model.generate(_start(), tools=[])
    assert response.content == "Hello!"
    assert "tools" not in server.requests[0].body


async def test_openai_bad_tool_arguments_are_a_clear_error(
    openai_model: Any, server: WireServer
) -> None:
    server.reply(
        _openai_completion(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "refund_order", "arguments": '{"order_id": '},
                    }
                ],
            },
            "tool_calls",
        )
    )
    with pytest.raises(OnceGraphError, match=r"refund_order.*not valid JSON.*nothing was run"):
        await openai_model.generate(_start(), tools=TOOLS)


async def test_openai_provider_errors_propagate(openai_model: Any, server: WireServer) -> None:
    openai = _sdk("openai", "openai")
    server.reply({"error": {"message": "overloaded", "type": "server_error"}}, status=500)
    with pytest.raises(openai.InternalServerError):
        await openai_model.generate(_start(), tools=TOOLS)


async def test_openai_timeout_is_applied(server: WireServer) -> None:
    openai = _sdk("openai", "openai")
    model = resolve_model(
        "gpt-4o-mini",
        "openai",
        base_url=server.url + "/v1",
        api_key="k",
        timeout=0.2,
        max_retries=0,
    )
    server.hang()
    with pytest.raises(openai.APITimeoutError):
        await model.generate(_start(), tools=[])
    await model.aclose()  # type: ignore[attr-defined]


async def test_openai_key_from_env_and_gateway_model_id(
    server: WireServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    _sdk("openai", "openai")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    model = resolve_model("openai/gpt-4o-mini", None, base_url=server.url + "/v1")
    server.reply(_openai_completion({"role": "assistant", "content": "ok"}, "stop"))
    await model.generate(_start(), tools=[])
    await model.aclose()  # type: ignore[attr-defined]
    assert server.requests[0].headers["authorization"] == "Bearer sk-from-env"
    # with a base_url (a gateway) the id is sent verbatim
    assert server.requests[0].body["model"] == "openai/gpt-4o-mini"
    assert model.name == "openai/gpt-4o-mini"
    assert resolve_model("openai/gpt-4o", None).name == "openai/gpt-4o"


async def test_openai_missing_key_names_the_env_var(monkeypatch: pytest.MonkeyPatch) -> None:
    _sdk("openai", "openai")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    model = resolve_model("gpt-4o-mini", "openai")  # building needs no key...
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):  # ...calling does
        await model.generate(_start(), tools=[])


# -- Anthropic -------------------------------------------------------------------------


@pytest.fixture
async def anthropic_model(server: WireServer) -> AsyncIterator[Any]:
    _sdk("anthropic", "anthropic")
    model = resolve_model(
        "anthropic/claude-sonnet-4-6", None, base_url=server.url, api_key="ak-test", max_retries=0
    )
    yield model
    await model.aclose()  # type: ignore[attr-defined]


def _anthropic_message(content: list[dict[str, Any]], stop: str) -> dict[str, Any]:
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


def _anthropic_key(headers: dict[str, str]) -> str | None:
    """The API key as sent: ``x-api-key`` (older SDKs) or a bearer token (newer ones)."""
    if "x-api-key" in headers:
        return headers["x-api-key"]
    return headers.get("authorization", "").removeprefix("Bearer ") or None


async def test_anthropic_tool_call_round_trip(anthropic_model: Any, server: WireServer) -> None:
    assert anthropic_model.name == "anthropic/claude-sonnet-4-6"
    server.reply(
        _anthropic_message(
            [
                {"type": "text", "text": "Let me check."},
                {
                    "type": "tool_use",
                    "id": "toolu_A",
                    "name": "lookup_order",
                    "input": {"order_id": "1042"},
                },
                {
                    "type": "tool_use",
                    "id": "toolu_B",
                    "name": "refund_order",
                    "input": {"order_id": "1042", "amount": 59.0},
                },
            ],
            "tool_use",
        )
    )
    history: list[Message] = [
        *_start(),
        {"role": "system", "content": "Be brief.", "id": "m-sys2"},
    ]
    first = await anthropic_model.generate(history, tools=TOOLS)
    assert first == ModelResponse(
        content="Let me check.",
        tool_calls=(
            {"id": "toolu_A", "name": "lookup_order", "args": {"order_id": "1042"}},
            {"id": "toolu_B", "name": "refund_order", "args": {"order_id": "1042", "amount": 59.0}},
        ),
        provider_message_id="msg_01",
        usage={"input_tokens": 40, "output_tokens": 9, "total_tokens": 49},
        raw_finish_reason="tool_use",
    )
    sent = server.requests[0]
    assert sent.path == "/v1/messages"
    assert _anthropic_key(sent.headers) == "ak-test"
    assert sent.body["model"] == "claude-sonnet-4-6"
    assert sent.body["max_tokens"] == 4096
    # every system message goes to the top-level system parameter, in order
    assert sent.body["system"] == SYSTEM + "\n\nBe brief."
    assert sent.body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Please refund order 1042."}]}
    ]
    assert sent.body["tools"] == [
        {"name": t["name"], "description": t["description"], "input_schema": t["parameters"]}
        for t in TOOLS
    ]

    server.reply(
        _anthropic_message([{"type": "text", "text": "The card was declined."}], "end_turn")
    )
    conversation = _with_results(history, first)
    conversation.append({"role": "user", "content": "Why?", "id": "m-u2"})
    second = await anthropic_model.generate(conversation, tools=TOOLS)
    assert second.content == "The card was declined."
    assert second.raw_finish_reason == "end_turn"
    wire = server.requests[1].body["messages"]
    assert wire[1] == {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Let me check."},
            {
                "type": "tool_use",
                "id": "toolu_A",
                "name": "lookup_order",
                "input": {"order_id": "1042"},
            },
            {
                "type": "tool_use",
                "id": "toolu_B",
                "name": "refund_order",
                "input": {"order_id": "1042", "amount": 59.0},
            },
        ],
    }
    # both results and the next user text follow in ONE user turn, results first
    assert wire[2] == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_A",
                "content": '{"order_id":"1042","total":59.0}',
            },
            {
                "type": "tool_result",
                "tool_use_id": "toolu_B",
                "content": "card declined",
                "is_error": True,
            },
            {"type": "text", "text": "Why?"},
        ],
    }
    assert len(wire) == 3


async def test_anthropic_key_from_env(server: WireServer, monkeypatch: pytest.MonkeyPatch) -> None:
    _sdk("anthropic", "anthropic")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "ak-from-env")
    model = resolve_model("claude-haiku-4-5", "anthropic", base_url=server.url, max_tokens=256)
    server.reply(_anthropic_message([{"type": "text", "text": "hi"}], "end_turn"))
    response = await model.generate(_start(), tools=[])
    await model.aclose()  # type: ignore[attr-defined]
    assert response.content == "hi"
    assert _anthropic_key(server.requests[0].headers) == "ak-from-env"
    assert server.requests[0].body["max_tokens"] == 256
    assert "tools" not in server.requests[0].body


async def test_anthropic_timeout_is_applied(server: WireServer) -> None:
    anthropic = _sdk("anthropic", "anthropic")
    model = resolve_model(
        "claude-haiku-4-5",
        "anthropic",
        base_url=server.url,
        api_key="k",
        timeout=0.2,
        max_retries=0,
    )
    server.hang()
    with pytest.raises(anthropic.APITimeoutError):
        await model.generate(_start(), tools=[])
    await model.aclose()  # type: ignore[attr-defined]


# -- Google (Gemini) -----------------------------------------------------------------


@pytest.fixture
async def google_model(server: WireServer) -> AsyncIterator[Any]:
    _sdk("google.genai", "google")
    # the seed's spelling: provider prefix in the id AND provider=
    model = resolve_model(
        "google/gemini-2.5-flash", "google", base_url=server.url, api_key="gk-test", max_retries=0
    )
    yield model
    await model.aclose()  # type: ignore[attr-defined]


def _gemini_response(parts: list[dict[str, Any]], finish: str) -> dict[str, Any]:
    return {
        "candidates": [
            {"content": {"role": "model", "parts": parts}, "finishReason": finish, "index": 0}
        ],
        "usageMetadata": {
            "promptTokenCount": 50,
            "candidatesTokenCount": 11,
            "totalTokenCount": 61,
        },
        "responseId": "resp-g1",
    }


async def test_google_tool_call_round_trip(google_model: Any, server: WireServer) -> None:
    assert google_model.name == "google/gemini-2.5-flash"
    server.reply(
        _gemini_response(
            [
                {"thought": True, "text": "planning..."},
                {"functionCall": {"name": "lookup_order", "args": {"order_id": "1042"}}},
                {
                    "functionCall": {
                        "id": "fc-real-7",
                        "name": "refund_order",
                        "args": {"order_id": "1042", "amount": 59.0},
                    }
                },
            ],
            "STOP",
        )
    )
    first = await google_model.generate(_start(), tools=TOOLS)
    # Gemini gave no id for the first call: it gets the positional call_1
    assert first == ModelResponse(
        content="",
        tool_calls=(
            {"id": "call_1", "name": "lookup_order", "args": {"order_id": "1042"}},
            {
                "id": "fc-real-7",
                "name": "refund_order",
                "args": {"order_id": "1042", "amount": 59.0},
            },
        ),
        provider_message_id="resp-g1",
        usage={"input_tokens": 50, "output_tokens": 11, "total_tokens": 61},
        raw_finish_reason="STOP",
    )
    sent = server.requests[0]
    assert sent.path.endswith("/models/gemini-2.5-flash:generateContent")
    assert sent.headers["x-goog-api-key"] == "gk-test"
    assert sent.body["systemInstruction"]["parts"] == [{"text": SYSTEM}]
    assert sent.body["contents"] == [
        {"role": "user", "parts": [{"text": "Please refund order 1042."}]}
    ]
    declarations = sent.body["tools"][0]["functionDeclarations"]
    assert [d["name"] for d in declarations] == ["lookup_order", "refund_order"]
    schemas = [d.get("parametersJsonSchema", d.get("parameters_json_schema")) for d in declarations]
    assert schemas == [t["parameters"] for t in TOOLS]

    server.reply(_gemini_response([{"text": "The card was declined."}], "STOP"))
    second = await google_model.generate(_with_results(_start(), first), tools=TOOLS)
    assert second.content == "The card was declined."
    assert second.tool_calls == ()
    contents = server.requests[1].body["contents"]
    assert contents[1] == {
        "role": "model",
        "parts": [
            # the synthetic id is not sent back; the provider's own id is
            {"functionCall": {"name": "lookup_order", "args": {"order_id": "1042"}}},
            {
                "functionCall": {
                    "id": "fc-real-7",
                    "name": "refund_order",
                    "args": {"order_id": "1042", "amount": 59.0},
                }
            },
        ],
    }
    assert contents[2] == {
        "role": "user",
        "parts": [
            {
                "functionResponse": {
                    "name": "lookup_order",
                    "response": {"output": {"order_id": "1042", "total": 59.0}},
                }
            },
            {
                "functionResponse": {
                    "id": "fc-real-7",
                    "name": "refund_order",  # found through the assistant call's id
                    "response": {"error": "card declined"},
                }
            },
        ],
    }
    assert len(contents) == 3


async def test_google_key_from_env(server: WireServer, monkeypatch: pytest.MonkeyPatch) -> None:
    _sdk("google.genai", "google")
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    monkeypatch.setenv("GEMINI_API_KEY", "gk-from-env")
    model = resolve_model("gemini-2.5-flash", "google", base_url=server.url)
    server.reply(_gemini_response([{"text": "hi"}], "STOP"))
    response = await model.generate(_start(), tools=[])
    await model.aclose()  # type: ignore[attr-defined]
    assert response.content == "hi"
    assert server.requests[0].headers["x-goog-api-key"] == "gk-from-env"
    assert "tools" not in server.requests[0].body


async def test_google_missing_key_names_the_env_var(monkeypatch: pytest.MonkeyPatch) -> None:
    _sdk("google.genai", "google")
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    model = resolve_model("gemini-2.5-flash", "google")
    with pytest.raises(ConfigError, match="GEMINI_API_KEY"):
        await model.generate(_start(), tools=[])


async def test_google_blocked_prompt_is_a_clear_error(
    google_model: Any, server: WireServer
) -> None:
    server.reply({"promptFeedback": {"blockReason": "SAFETY"}, "responseId": "r"})
    with pytest.raises(OnceGraphError, match=r"no candidates \(prompt blocked: SAFETY\)"):
        await google_model.generate(_start(), tools=[])


async def test_google_timeout_is_applied(server: WireServer) -> None:
    _sdk("google.genai", "google")
    model = resolve_model(
        "gemini-2.5-flash", "google", base_url=server.url, api_key="k", timeout=0.2, max_retries=0
    )
    server.hang()
    with pytest.raises(Exception) as info:
        await model.generate(_start(), tools=[])
    await model.aclose()  # type: ignore[attr-defined]
    # the SDK lets its HTTP library's timeout through (httpx2 in new SDKs, httpx in old)
    timeouts = tuple(
        importlib.import_module(name).TimeoutException
        for name in ("httpx", "httpx2")
        if importlib.util.find_spec(name) is not None
    )
    assert isinstance(info.value, timeouts)


# -- resolve_model with real adapters --------------------------------------------------


def test_unknown_adapter_option_is_a_config_error() -> None:
    _sdk("openai", "openai")
    with pytest.raises(ConfigError, match="bad option for the openai model adapter"):
        resolve_model("gpt-4o", "openai", temprature=0.2)


@pytest.mark.parametrize("provider", ["openai", "anthropic", "google"])
def test_one_model_object_serves_successive_event_loops(provider: str, server: WireServer) -> None:
    # The sync facade may drive each invoke on a fresh loop: an SDK client whose pool
    # belongs to a closed loop must not be reused, and must be closed when its loop
    # ends (a leaked socket is a ResourceWarning, an error under filterwarnings=error).
    sdk, extra, model_id, base_url, reply = {
        "openai": (
            "openai",
            "openai",
            "gpt-4o-mini",
            server.url + "/v1",
            _openai_completion({"role": "assistant", "content": "ok"}, "stop"),
        ),
        "anthropic": (
            "anthropic",
            "anthropic",
            "claude-haiku-4-5",
            server.url,
            _anthropic_message([{"type": "text", "text": "ok"}], "end_turn"),
        ),
        "google": (
            "google.genai",
            "google",
            "gemini-2.5-flash",
            server.url,
            _gemini_response([{"text": "ok"}], "STOP"),
        ),
    }[provider]
    _sdk(sdk, extra)
    model = resolve_model(model_id, provider, base_url=base_url, api_key="k", max_retries=0)

    async def call() -> str:
        return (await model.generate(_start(), tools=[])).content  # no aclose()

    for _ in range(2):
        server.reply(reply)
        assert asyncio.run(call()) == "ok"
    assert len(server.requests) == 2
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gc.collect()  # a leaked client's sockets would warn here
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []
