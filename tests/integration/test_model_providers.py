"""Provider adapters driven by the REAL SDKs against REAL local HTTP servers.

Only the paid API is doubled: a stdlib ``ThreadingHTTPServer`` on 127.0.0.1
(:mod:`wire`) speaks each provider's wire format (OpenAI ``/v1/chat/completions``,
Anthropic ``/v1/messages``, Gemini ``models/<model>:generateContent`` and
``:streamGenerateContent``, the streams as server-sent events), records every request,
and answers from a queue. The official SDK client is pointed at it through
``base_url``. Each test checks what went over the wire (system prompt placement,
declared tools, tool results with their call ids) and what came back (tool calls with
ids and parsed args, content). Streaming tests hold the stream back after its first
delta until the caller has received it, so they prove delivery while the answer is
still being written, without timing anything.

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
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import pytest
from wire import (
    WireServer,
    anthropic_message,
    anthropic_stream,
    gemini_response,
    gemini_stream,
    openai_completion,
    openai_stream,
)

from oncegraph.errors import ConfigError, OnceGraphError
from oncegraph.messages import Message, ToolCall, ToolSpec
from oncegraph.prebuilt.models import ModelResponse, resolve_model


def _sdk(module: str, extra: str) -> ModuleType:
    if os.environ.get("CI") == "true":
        return importlib.import_module(module)
    found: ModuleType = pytest.importorskip(
        module, reason=f'needs the SDK: pip install "oncegraph[{extra}]"'
    )
    return found


@pytest.fixture
def server() -> Iterator[WireServer]:
    running = WireServer()
    try:
        yield running
    finally:
        running.close()


MakeModel = Callable[..., Any]


@pytest.fixture
async def make_model(server: WireServer) -> AsyncIterator[MakeModel]:
    """``make(model_id, provider, **options)``: an adapter built by ``resolve_model``
    against ``server`` (skipped without its SDK), closed with ``aclose()`` after the
    test on the test's own loop."""
    built: list[Any] = []

    def make(model_id: str, provider: str | None, **options: Any) -> Any:
        spec = PROVIDERS[provider or model_id.partition("/")[0]]
        _sdk(spec.sdk, spec.extra)
        model = resolve_model(model_id, provider, base_url=server.url + spec.path, **options)
        built.append(model)
        return model

    yield make
    for model in built:
        await model.aclose()


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


LOOKUP_ARGS = {"order_id": "1042"}
REFUND_ARGS = {"order_id": "1042", "amount": 59.0}


def _two_calls(lookup_id: str, refund_id: str) -> tuple[ToolCall, ToolCall]:
    """The two tool calls every round trip expects back, under the provider's ids."""
    return (
        {"id": lookup_id, "name": "lookup_order", "args": LOOKUP_ARGS},
        {"id": refund_id, "name": "refund_order", "args": REFUND_ARGS},
    )


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


def _openai_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


async def test_openai_tool_call_round_trip(make_model: MakeModel, server: WireServer) -> None:
    model = make_model("gpt-4o-mini", "openai", api_key="sk-test", max_retries=0)
    server.reply(
        openai_completion(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    _openai_call("call_Lk1", "lookup_order", '{"order_id":"1042"}'),
                    _openai_call(
                        "call_Rf2", "refund_order", '{"order_id": "1042", "amount": 59.0}'
                    ),
                ],
            },
            "tool_calls",
        )
    )
    first = await model.generate(_start(), tools=TOOLS)
    assert first == ModelResponse(
        content="",
        tool_calls=_two_calls("call_Lk1", "call_Rf2"),
        provider_message_id="chatcmpl-1",
        usage={"input_tokens": 30, "output_tokens": 7, "total_tokens": 37},
        raw_finish_reason="tool_calls",
        model_version="gpt-4o-mini",  # the model the provider says served it
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
        openai_completion(
            {"role": "assistant", "content": "Refund refused: card declined."}, "stop"
        )
    )
    second = await model.generate(_with_results(_start(), first), tools=TOOLS)
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
    assert json.loads(wire[2]["tool_calls"][1]["function"]["arguments"]) == REFUND_ARGS
    assert wire[3] == {
        "role": "tool",
        "tool_call_id": "call_Lk1",
        "content": '{"order_id":"1042","total":59.0}',
    }
    assert wire[4] == {"role": "tool", "tool_call_id": "call_Rf2", "content": "card declined"}


async def test_openai_bad_tool_arguments_are_a_clear_error(
    make_model: MakeModel, server: WireServer
) -> None:
    model = make_model("gpt-4o-mini", "openai", api_key="sk-test", max_retries=0)
    server.reply(
        openai_completion(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [_openai_call("call_1", "refund_order", '{"order_id": ')],
            },
            "tool_calls",
        )
    )
    with pytest.raises(OnceGraphError, match=r"refund_order.*not valid JSON.*nothing was run"):
        await model.generate(_start(), tools=TOOLS)


async def test_openai_provider_errors_propagate(make_model: MakeModel, server: WireServer) -> None:
    model = make_model("gpt-4o-mini", "openai", api_key="sk-test", max_retries=0)
    openai = _sdk("openai", "openai")
    server.reply({"error": {"message": "overloaded", "type": "server_error"}}, status=500)
    with pytest.raises(openai.InternalServerError):
        await model.generate(_start(), tools=TOOLS)


def test_openai_prefix_is_stripped_without_a_gateway() -> None:
    _sdk("openai", "openai")
    model = resolve_model("openai/gpt-4o", None)
    assert (model.model, model.name) == ("gpt-4o", "openai/gpt-4o")  # type: ignore[attr-defined]


# -- Anthropic -------------------------------------------------------------------------


def _anthropic_tool_uses() -> list[dict[str, Any]]:
    """The two ``tool_use`` blocks, as the API returns them and as they are sent back."""
    return [
        {"type": "tool_use", "id": "toolu_A", "name": "lookup_order", "input": LOOKUP_ARGS},
        {"type": "tool_use", "id": "toolu_B", "name": "refund_order", "input": REFUND_ARGS},
    ]


def _anthropic_key(headers: dict[str, str]) -> str | None:
    """The API key as sent: ``x-api-key`` (older SDKs) or a bearer token (newer ones)."""
    if "x-api-key" in headers:
        return headers["x-api-key"]
    return headers.get("authorization", "").removeprefix("Bearer ") or None


async def test_anthropic_tool_call_round_trip(make_model: MakeModel, server: WireServer) -> None:
    model = make_model("anthropic/claude-sonnet-4-6", None, api_key="ak-test", max_retries=0)
    assert model.name == "anthropic/claude-sonnet-4-6"
    server.reply(
        anthropic_message(
            [{"type": "text", "text": "Let me check."}, *_anthropic_tool_uses()], "tool_use"
        )
    )
    history: list[Message] = [
        *_start(),
        {"role": "system", "content": "Be brief.", "id": "m-sys2"},
    ]
    first = await model.generate(history, tools=TOOLS)
    assert first == ModelResponse(
        content="Let me check.",
        tool_calls=_two_calls("toolu_A", "toolu_B"),
        provider_message_id="msg_01",
        usage={"input_tokens": 40, "output_tokens": 9, "total_tokens": 49},
        raw_finish_reason="tool_use",
        model_version="claude-sonnet-4-6",
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
        anthropic_message([{"type": "text", "text": "The card was declined."}], "end_turn")
    )
    conversation = _with_results(history, first)
    conversation.append({"role": "user", "content": "Why?", "id": "m-u2"})
    second = await model.generate(conversation, tools=TOOLS)
    assert second.content == "The card was declined."
    assert second.raw_finish_reason == "end_turn"
    wire = server.requests[1].body["messages"]
    assert wire[1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "Let me check."}, *_anthropic_tool_uses()],
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


# -- Google (Gemini) -----------------------------------------------------------------


def _gemini_calls() -> list[dict[str, Any]]:
    """The two ``functionCall`` parts: the first without an id (Gemini may omit it)."""
    return [
        {"functionCall": {"name": "lookup_order", "args": LOOKUP_ARGS}},
        {"functionCall": {"id": "fc-real-7", "name": "refund_order", "args": REFUND_ARGS}},
    ]


async def test_google_tool_call_round_trip(make_model: MakeModel, server: WireServer) -> None:
    # the seed's spelling: provider prefix in the id AND provider=
    model = make_model("google/gemini-2.5-flash", "google", api_key="gk-test", max_retries=0)
    assert model.name == "google/gemini-2.5-flash"
    server.reply(
        gemini_response([{"thought": True, "text": "planning..."}, *_gemini_calls()], "STOP")
    )
    first = await model.generate(_start(), tools=TOOLS)
    # Gemini gave no id for the first call: it gets the positional call_1
    assert first == ModelResponse(
        content="",
        tool_calls=_two_calls("call_1", "fc-real-7"),
        provider_message_id="resp-g1",
        usage={"input_tokens": 50, "output_tokens": 11, "total_tokens": 61},
        raw_finish_reason="STOP",
        model_version="gemini-2.5-flash-001",
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

    server.reply(gemini_response([{"text": "The card was declined."}], "STOP"))
    second = await model.generate(_with_results(_start(), first), tools=TOOLS)
    assert second.content == "The card was declined."
    assert second.tool_calls == ()
    contents = server.requests[1].body["contents"]
    # the synthetic id is not sent back; the provider's own id is
    assert contents[1] == {"role": "model", "parts": _gemini_calls()}
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


async def test_google_blocked_prompt_is_a_clear_error(
    make_model: MakeModel, server: WireServer
) -> None:
    model = make_model("gemini-2.5-flash", "google", api_key="gk-test", max_retries=0)
    server.reply({"promptFeedback": {"blockReason": "SAFETY"}, "responseId": "r"})
    with pytest.raises(OnceGraphError, match=r"no candidates \(prompt blocked: SAFETY\)"):
        await model.generate(_start(), tools=[])


# -- every provider --------------------------------------------------------------------


def _sdk_timeout(sdk: ModuleType) -> tuple[type[BaseException], ...]:
    return (sdk.APITimeoutError,)


def _http_timeouts(sdk: ModuleType) -> tuple[type[BaseException], ...]:
    # google-genai lets its HTTP library's timeout through (httpx2 in new SDKs, httpx in old)
    return tuple(
        importlib.import_module(name).TimeoutException
        for name in ("httpx", "httpx2")
        if importlib.util.find_spec(name) is not None
    )


def _bearer(headers: dict[str, str]) -> str | None:
    scheme, _, token = headers.get("authorization", "").partition(" ")
    return token if scheme == "Bearer" else None


@dataclass(frozen=True, slots=True)
class Provider:
    """What the provider-generic tests need to know about one adapter."""

    sdk: str  # the module to import
    extra: str  # the oncegraph extra that installs it
    model_id: str
    path: str  # appended to the server url to make base_url
    key_envs: tuple[str, ...]  # where the SDK reads the API key, the one we name first
    sent_key: Callable[[dict[str, str]], str | None]  # the key as it went over the wire
    text_reply: Callable[[str], dict[str, Any]]  # a plain text answer in the wire format
    timeouts: Callable[[ModuleType], tuple[type[BaseException], ...]]


PROVIDERS: dict[str, Provider] = {
    "openai": Provider(
        sdk="openai",
        extra="openai",
        model_id="gpt-4o-mini",
        path="/v1",
        key_envs=("OPENAI_API_KEY",),
        sent_key=_bearer,
        text_reply=lambda text: openai_completion({"role": "assistant", "content": text}, "stop"),
        timeouts=_sdk_timeout,
    ),
    "anthropic": Provider(
        sdk="anthropic",
        extra="anthropic",
        model_id="claude-haiku-4-5",
        path="",
        key_envs=("ANTHROPIC_API_KEY",),
        sent_key=_anthropic_key,
        text_reply=lambda text: anthropic_message([{"type": "text", "text": text}], "end_turn"),
        timeouts=_sdk_timeout,
    ),
    "google": Provider(
        sdk="google.genai",
        extra="google",
        model_id="gemini-2.5-flash",
        path="",
        key_envs=("GEMINI_API_KEY", "GOOGLE_API_KEY"),
        sent_key=lambda headers: headers["x-goog-api-key"],
        text_reply=lambda text: gemini_response([{"text": text}], "STOP"),
        timeouts=_http_timeouts,
    ),
}


@pytest.mark.parametrize(
    ("model_id", "provider", "options", "body", "name"),
    [
        # with a base_url (a gateway) the OpenAI id is sent verbatim
        ("openai/gpt-4o-mini", None, {}, {"model": "openai/gpt-4o-mini"}, "openai/gpt-4o-mini"),
        (
            "claude-haiku-4-5",
            "anthropic",
            {"max_tokens": 256},
            {"model": "claude-haiku-4-5", "max_tokens": 256},
            "anthropic/claude-haiku-4-5",
        ),
        ("gemini-2.5-flash", "google", {}, {}, "google/gemini-2.5-flash"),
    ],
    ids=["openai", "anthropic", "google"],
)
async def test_key_from_env(
    model_id: str,
    provider: str | None,
    options: dict[str, Any],
    body: dict[str, Any],
    name: str,
    make_model: MakeModel,
    server: WireServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = PROVIDERS[provider or model_id.partition("/")[0]]
    for variable in spec.key_envs:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv(spec.key_envs[0], "key-from-env")
    model = make_model(model_id, provider, **options)
    server.reply(spec.text_reply("hi"))
    response = await model.generate(_start(), tools=[])
    assert response.content == "hi"
    assert model.name == name
    sent = server.requests[0]
    assert spec.sent_key(sent.headers) == "key-from-env"
    assert "tools" not in sent.body
    assert {key: sent.body[key] for key in body} == body


@pytest.mark.parametrize("provider", ["openai", "google"])
async def test_missing_key_names_the_env_var(
    provider: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = PROVIDERS[provider]
    _sdk(spec.sdk, spec.extra)
    for variable in spec.key_envs:
        monkeypatch.delenv(variable, raising=False)
    model = resolve_model(spec.model_id, provider)  # building needs no key...
    with pytest.raises(ConfigError, match=spec.key_envs[0]):  # ...calling does
        await model.generate(_start(), tools=[])


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
async def test_timeout_is_applied(provider: str, make_model: MakeModel, server: WireServer) -> None:
    spec = PROVIDERS[provider]
    model = make_model(spec.model_id, provider, api_key="k", timeout=0.2, max_retries=0)
    server.hang()
    with pytest.raises(spec.timeouts(_sdk(spec.sdk, spec.extra))):
        await model.generate(_start(), tools=[])


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
async def test_aclose_closes_the_connection_now_and_the_model_still_works(
    provider: str, make_model: MakeModel, server: WireServer
) -> None:
    spec = PROVIDERS[provider]
    model = make_model(spec.model_id, provider, api_key="k", max_retries=0)
    server.reply(spec.text_reply("ok"))
    assert (await model.generate(_start(), tools=[])).content == "ok"
    assert server.connections == 1  # kept alive in the client's pool
    await model.aclose()
    # on this loop, still running: not left for the loop's end
    assert await asyncio.to_thread(server.wait_no_connections, 10)
    server.reply(spec.text_reply("again"))  # a new client is opened on demand
    assert (await model.generate(_start(), tools=[])).content == "again"


async def test_aclose_leaves_the_callers_own_client_open(server: WireServer) -> None:
    openai = _sdk("openai", "openai")
    client = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0)
    model = resolve_model("gpt-4o-mini", "openai", client=client)
    server.reply(PROVIDERS["openai"].text_reply("ok"))
    assert (await model.generate(_start(), tools=[])).content == "ok"
    await model.aclose()  # type: ignore[attr-defined]
    assert not client.is_closed()
    await client.close()
    assert await asyncio.to_thread(server.wait_no_connections, 10)


def test_unknown_adapter_option_is_a_config_error() -> None:
    _sdk("openai", "openai")
    with pytest.raises(ConfigError, match="bad option for the openai model adapter"):
        resolve_model("gpt-4o", "openai", temprature=0.2)


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_one_model_object_serves_successive_event_loops(provider: str, server: WireServer) -> None:
    # The sync facade may drive each invoke on a fresh loop: an SDK client whose pool
    # belongs to a closed loop must not be reused, and must be closed when its loop
    # ends (a leaked socket is a ResourceWarning, an error under filterwarnings=error).
    spec = PROVIDERS[provider]
    _sdk(spec.sdk, spec.extra)
    model = resolve_model(
        spec.model_id, provider, base_url=server.url + spec.path, api_key="k", max_retries=0
    )

    async def call() -> str:
        return (await model.generate(_start(), tools=[])).content  # no aclose()

    for _ in range(2):
        server.reply(spec.text_reply("ok"))
        assert asyncio.run(call()) == "ok"
    assert len(server.requests) == 2
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gc.collect()  # a leaked client's sockets would warn here
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []


# -- streaming ---------------------------------------------------------------------------


class Deltas:
    """``on_text`` for a streamed call: keeps the deltas and opens the server's gate at
    the first one (the server holds the rest of the stream until then)."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.seen: list[str] = []

    def __call__(self, text: str) -> None:
        self.seen.append(text)
        self.gate.set()


def _streamed_reply(provider: str, deltas: Deltas, texts: list[str]) -> Any:
    """A streamed answer with ``texts`` and the two tool calls, in ``provider``'s format."""
    lookup = ('{"order_', 'id": "1042"}')
    refund = ('{"order_id": "1042", ', '"amount": 59.0}')
    if provider == "openai":
        calls = [("call_Lk1", "lookup_order", lookup), ("call_Rf2", "refund_order", refund)]
        return openai_stream(texts, calls, "tool_calls", gate=deltas.gate)
    if provider == "anthropic":
        calls = [("toolu_A", "lookup_order", lookup), ("toolu_B", "refund_order", refund)]
        return anthropic_stream(texts, calls, "tool_use", gate=deltas.gate)
    return gemini_stream(texts, [part["functionCall"] for part in _gemini_calls()], deltas.gate)


STREAMED: dict[str, ModelResponse] = {
    "openai": ModelResponse(
        content="Let me check that.",
        tool_calls=_two_calls("call_Lk1", "call_Rf2"),
        provider_message_id="chatcmpl-9",
        usage={"input_tokens": 30, "output_tokens": 7, "total_tokens": 37},
        raw_finish_reason="tool_calls",
        model_version="gpt-4o-mini",  # as the stream's chunks name it
    ),
    "anthropic": ModelResponse(
        content="Let me check that.",
        tool_calls=_two_calls("toolu_A", "toolu_B"),
        provider_message_id="msg_01",
        usage={"input_tokens": 40, "output_tokens": 9, "total_tokens": 49},
        raw_finish_reason="tool_use",
        model_version="claude-sonnet-4-6",
    ),
    "google": ModelResponse(
        content="Let me check that.",
        tool_calls=_two_calls("call_1", "fc-real-7"),
        provider_message_id="resp-g1",
        usage={"input_tokens": 50, "output_tokens": 11, "total_tokens": 61},
        raw_finish_reason="STOP",
        model_version="gemini-2.5-flash-001",
    ),
}


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
async def test_streaming_hands_over_deltas_and_returns_the_whole_response(
    provider: str, make_model: MakeModel, server: WireServer
) -> None:
    spec = PROVIDERS[provider]
    model = make_model(spec.model_id, provider, api_key="k")
    deltas = Deltas()
    texts = ["Let me ", "check ", "that."]
    stream = _streamed_reply(provider, deltas, texts)
    server.reply(stream)
    response = await model.generate_stream(_start(), tools=TOOLS, on_text=deltas)
    assert not stream.gate_timed_out, "the first delta reached the caller mid-stream"
    assert deltas.seen == texts
    assert response == STREAMED[provider], "the whole message, as generate returns it"
    sent = server.requests[0]
    if provider == "openai":
        assert sent.body["stream"] is True
        assert sent.body["stream_options"] == {"include_usage": True}
        assert len(sent.body["tools"]) == 2
    elif provider == "anthropic":
        assert sent.body["stream"] is True and sent.body["system"] == SYSTEM
    else:
        assert sent.path.endswith("/models/gemini-2.5-flash:streamGenerateContent?alt=sse")
        assert sent.body["systemInstruction"]["parts"] == [{"text": SYSTEM}]


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
async def test_a_streamed_text_answer_matches_generate(
    provider: str, make_model: MakeModel, server: WireServer
) -> None:
    spec = PROVIDERS[provider]
    model = make_model(spec.model_id, provider, api_key="k")
    texts = ["The card ", "was declined."]
    if provider == "openai":
        server.reply(openai_stream(texts))
    elif provider == "anthropic":
        server.reply(anthropic_stream(texts))
    else:
        server.reply(gemini_stream(texts))
    seen: list[str] = []
    response = await model.generate_stream(_start(), tools=[], on_text=seen.append)
    assert "".join(seen) == response.content == "The card was declined."
    assert response.tool_calls == ()


# -- one retry layer: the SDKs' own retries are off ----------------------------------------


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
@pytest.mark.parametrize("streaming", [False, True], ids=["generate", "stream"])
async def test_sdk_retries_are_off_by_default(
    provider: str, streaming: bool, make_model: MakeModel, server: WireServer
) -> None:
    spec = PROVIDERS[provider]
    model = make_model(spec.model_id, provider, api_key="k")  # no max_retries given
    server.reply({"error": {"message": "overloaded", "type": "server_error"}}, status=503)
    server.reply(spec.text_reply("too late"))  # an SDK retry would get this
    with pytest.raises(Exception) as caught:
        if streaming:
            await model.generate_stream(_start(), tools=[], on_text=lambda text: None)
        else:
            await model.generate(_start(), tools=[])
    assert "503" in str(caught.value) or "overloaded" in str(caught.value)
    assert len(server.requests) == 1, "the ledger retries model calls; the SDK must not"


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
async def test_sdk_retries_can_be_turned_back_on(
    provider: str, make_model: MakeModel, server: WireServer
) -> None:
    spec = PROVIDERS[provider]
    model = make_model(spec.model_id, provider, api_key="k", max_retries=1)
    server.reply({"error": {"message": "overloaded", "type": "server_error"}}, status=503)
    server.reply(spec.text_reply("second try"))
    response = await model.generate(_start(), tools=[])
    assert response.content == "second try" and len(server.requests) == 2
