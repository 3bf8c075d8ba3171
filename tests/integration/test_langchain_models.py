"""LangChain chat models as the agent's model: REAL LangChain classes, no paid API.

``ToolCallingFake`` is a small ``BaseChatModel`` of LangChain's own kind (``bind_tools``,
``_generate``, ``_stream``) standing in for a paid API: it answers by the conversation
it is sent (the ``AIMessage``\\ s already in it), so a fresh process gets the same
answers, and appends one JSON line per call to a log file, which a test reads to count
the calls of every process. ``ChatOpenAI`` (``langchain-openai``) is driven against a
real local HTTP server speaking OpenAI's wire format (:mod:`wire`), as by
``ReactAgent("openai:gpt-4o-mini", base_url=...)`` through LangChain's
``init_chat_model``.

This file is also the child program of the crash test: it runs (or resumes) a thread on
a SQLite file with the fake model and prints the messages as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

pytest.importorskip("langchain_core")

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool

from oncegraph import tool
from oncegraph.errors import ConfigError, OnceGraphError, _CrashSignal
from oncegraph.prebuilt.agent import ReactAgent
from oncegraph.prebuilt.models import ModelResponse, resolve_model
from oncegraph.prebuilt.models.langchain import LangChainChatModel
from oncegraph.storage.checkpointer import InMemoryCheckpointer, SqliteCheckpointer
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import EffectClass
from oncegraph.tools import EffectRetry

SYSTEM = "You are a support agent for an online shop."
USER = {"messages": [{"role": "user", "content": "Where is order 1042?"}]}
LOOKING = "Let me look it up."
ANSWER = "Order 1042 is delivered; its total is 59.00."
USAGE = {"input_tokens": 12, "output_tokens": 7, "total_tokens": 19}


def _script() -> list[AIMessage]:
    """The fake's answers by turn: ask for the lookup, then answer."""
    return [
        AIMessage(
            content=LOOKING,
            id="fake-msg-1",
            tool_calls=[
                {"id": "call_lookup", "name": "lookup_order", "args": {"order_id": "1042"}}
            ],
            usage_metadata={**USAGE},
            response_metadata={"finish_reason": "tool_calls"},
        ),
        AIMessage(
            content=ANSWER,
            id="fake-msg-2",
            usage_metadata={**USAGE},
            response_metadata={"finish_reason": "stop"},
        ),
    ]


class ToolCallingFake(BaseChatModel):
    """A LangChain chat model that calls tools, answering by turn, logging each call."""

    model_name: str = "fake-tools-1"
    log_path: str

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _answer(self, messages: list[BaseMessage], streamed: bool, **kwargs: Any) -> AIMessage:
        turn = sum(1 for m in messages if m.type == "ai")
        entry = {
            "turn": turn,
            "streamed": streamed,
            "types": [m.type for m in messages],
            "system": [m.content for m in messages if m.type == "system"],
            "tool_call_ids": [
                getattr(m, "tool_call_id", None) for m in messages if m.type == "tool"
            ],
            "tool_results": [m.content for m in messages if m.type == "tool"],
            "tools": kwargs.get("tools") or [],
            "pid": os.getpid(),
        }
        with open(self.log_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")
        return _script()[turn]

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        message = self._answer(messages, False, **kwargs)
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        message = self._answer(messages, True, **kwargs)
        assert isinstance(message.content, str)
        for word in re.findall(r"\S+\s*", message.content):
            yield ChatGenerationChunk(message=AIMessageChunk(content=word, id=message.id))
        for index, call in enumerate(message.tool_calls):
            args = json.dumps(call["args"])
            half = len(args) // 2
            pieces = [(call["name"], args[:half], call["id"]), (None, args[half:], None)]
            for name, part, call_id in pieces:
                chunk = {"name": name, "args": part, "id": call_id, "index": index}
                yield ChatGenerationChunk(
                    message=AIMessageChunk(content="", tool_call_chunks=[chunk])  # type: ignore[list-item]
                )
        yield ChatGenerationChunk(
            message=AIMessageChunk(
                content="",
                usage_metadata=message.usage_metadata,
                response_metadata=message.response_metadata,
                chunk_position="last",
            )
        )

    @property
    def _llm_type(self) -> str:
        return "tool-calling-fake"


def _calls(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]


def _lookup_tool(ran: list[str] | None = None) -> Any:
    @tool(effect="read")
    def lookup_order(order_id: str) -> dict[str, Any]:
        """Look up an order by id."""
        if ran is not None:
            ran.append(order_id)
        return {"order_id": order_id, "status": "delivered", "total": 59.0}

    return lookup_order


def _no_retry() -> EffectRetry:
    return EffectRetry(max_attempts=1, initial_delay=0.0, jitter=0.0)


# -- the agent loop --------------------------------------------------------------------


def test_a_langchain_model_drives_the_agent_loop_with_tools(
    checkpointer: Checkpointer, tmp_path: Path
) -> None:
    log = tmp_path / "calls.jsonl"
    ran: list[str] = []
    agent = ReactAgent(
        ToolCallingFake(log_path=str(log)), system_prompt=SYSTEM, tools=[_lookup_tool(ran)]
    )
    assert isinstance(agent.model, LangChainChatModel)
    assert agent.model.name == "langchain/ToolCallingFake:fake-tools-1"
    app = agent.compile(checkpointer=checkpointer)
    out = app.invoke(USER, {"thread_id": "t"})

    roles = [m["role"] for m in out["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant"]
    asked, answered, final = out["messages"][1:]
    assert asked["content"] == LOOKING
    assert asked["tool_calls"] == [
        {"id": "call_lookup", "name": "lookup_order", "args": {"order_id": "1042"}}
    ]
    assert answered["tool_call_id"] == "call_lookup"
    assert final["content"] == ANSWER
    assert ran == ["1042"]

    first, second = _calls(log)
    assert first["types"] == ["system", "human"] and first["system"] == [SYSTEM]
    (bound,) = first["tools"]
    assert bound["function"]["name"] == "lookup_order"
    assert bound["function"]["description"] == "Look up an order by id."
    assert "order_id" in bound["function"]["parameters"]["properties"]
    assert second["types"] == ["system", "human", "ai", "tool"]
    assert second["tool_call_ids"] == ["call_lookup"]
    assert "delivered" in second["tool_results"][0]

    records = [e for e in app.effects(thread_id="t") if e.effect_class is EffectClass.MODEL]
    assert [r.effect_type for r in records] == ["model:langchain/ToolCallingFake:fake-tools-1"] * 2
    responses = [ModelResponse.from_json(r.result) for r in records]
    assert [r.usage for r in responses] == [USAGE, USAGE]
    assert [r.raw_finish_reason for r in responses] == ["tool_calls", "stop"]
    assert [r.provider_message_id for r in responses] == ["fake-msg-1", "fake-msg-2"]


def test_streamed_tokens_come_from_astream_and_the_whole_answer_is_recorded(
    tmp_path: Path,
) -> None:
    log = tmp_path / "calls.jsonl"
    agent = ReactAgent(ToolCallingFake(log_path=str(log)), tools=[_lookup_tool()])
    app = agent.compile(checkpointer=SqliteCheckpointer(tmp_path / "runs.db"))
    chunks = [
        chunk
        for chunk, meta in app.stream(USER, {"thread_id": "t"}, stream_mode="messages")
        if meta.get("langgraph_node") == "agent"
    ]
    assert [c["streamed"] for c in _calls(log)] == [True, True]
    state = app.get_state({"thread_id": "t"}).values
    asked, final = (m for m in state["messages"] if m["role"] == "assistant")
    first = [c for c in chunks if c["id"] == asked["id"]]
    assert len(first) == 5, "one delta per word, as the model streamed them"
    assert "".join(c["content"] for c in first) == LOOKING == asked["content"]
    # the tool call was streamed in two pieces and joined back whole
    assert asked["tool_calls"] == [
        {"id": "call_lookup", "name": "lookup_order", "args": {"order_id": "1042"}}
    ]
    assert "".join(c["content"] for c in chunks if c["id"] == final["id"]) == ANSWER
    (record, _) = [e for e in app.effects(thread_id="t") if e.effect_class is EffectClass.MODEL]
    assert ModelResponse.from_json(record.result).usage == USAGE


def test_langchains_generic_fake_chat_model_answers_an_agent_without_tools() -> None:
    fake = GenericFakeChatModel(messages=iter(["Hello from LangChain."]))
    agent = ReactAgent(fake)
    assert agent.model.name == "langchain/GenericFakeChatModel"
    out = agent.compile().invoke(USER, {"thread_id": "t"})
    assert out["messages"][-1]["content"] == "Hello from LangChain."


def test_a_langchain_model_that_cannot_call_tools_is_told_apart() -> None:
    fake = GenericFakeChatModel(messages=iter(["never"]))
    app = ReactAgent(fake, tools=[_lookup_tool()], model_retry=_no_retry()).compile()
    with pytest.raises(ConfigError) as caught:  # not retried: no try can succeed
        app.invoke(USER, {"thread_id": "t"})
    text = str(caught.value)
    assert "cannot call tools" in text and "bind_tools" in text


async def test_a_tool_call_langchain_could_not_parse_runs_nothing() -> None:
    model = LangChainChatModel(GenericFakeChatModel(messages=iter([])))
    broken = AIMessage(
        content="",
        invalid_tool_calls=[
            {"name": "lookup_order", "args": '{"order_id": ', "id": "c1", "error": "bad"}
        ],
    )
    with pytest.raises(OnceGraphError) as caught:
        model.from_langchain(broken)
    assert "lookup_order" in str(caught.value) and "nothing was run" in str(caught.value)


@pytest.mark.parametrize("wrap", ["bind_tools", "with_retry"])
def test_a_langchain_runnable_that_is_not_the_chat_model_is_refused(
    wrap: str, tmp_path: Path
) -> None:
    model = ToolCallingFake(log_path=str(tmp_path / "calls.jsonl"))
    wrapped = model.bind_tools([]) if wrap == "bind_tools" else model.with_retry()
    with pytest.raises(ConfigError) as caught:
        ReactAgent(wrapped)
    assert "pass the chat model itself" in str(caught.value)


def test_options_with_a_langchain_instance_are_refused() -> None:
    with pytest.raises(ConfigError) as caught:
        ReactAgent(GenericFakeChatModel(messages=iter([])), temperature=0)
    assert "configure the LangChain model itself" in str(caught.value)


# -- a crash after the model turn, resumed in a fresh process -------------------------------


def child_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--mode", choices=("run", "resume"), required=True)
    args = parser.parse_args(argv)
    app = ReactAgent(ToolCallingFake(log_path=args.log), tools=[_lookup_tool()]).compile(
        checkpointer=SqliteCheckpointer(args.db)
    )
    out = app.invoke(USER if args.mode == "run" else None, {"thread_id": "t1"})
    print(json.dumps({"messages": [dict(m) for m in out["messages"]]}), flush=True)
    return 0


@pytest.mark.slow
def test_a_resumed_run_does_not_call_the_langchain_model_again(tmp_path: Path) -> None:
    from oncegraph.testing.crash import run_in_subprocess

    log = tmp_path / "calls.jsonl"
    args = ["--db", str(tmp_path / "runs.db"), "--log", str(log)]
    # killed right after the model turn's step committed, before its tools ran
    crashed = run_in_subprocess(
        __file__, [*args, "--mode", "run"], crash_at=("after_checkpoint", 1), timeout=300
    )
    assert crashed.killed, crashed.describe()
    assert [c["turn"] for c in _calls(log)] == [0]
    resumed = run_in_subprocess(__file__, [*args, "--mode", "resume"], timeout=300)
    assert resumed.returncode == 0, resumed.describe()
    calls = _calls(log)
    assert [c["turn"] for c in calls] == [0, 1], "the first turn was not asked again"
    assert calls[0]["pid"] != calls[1]["pid"]
    messages = resumed.json()["messages"]
    assert messages[1]["tool_calls"][0]["id"] == "call_lookup"
    assert messages[-1]["content"] == ANSWER


@pytest.mark.parametrize("streamed", [False, True], ids=["invoke", "stream"])
def test_a_fresh_app_object_reuses_the_recorded_turn(tmp_path: Path, streamed: bool) -> None:
    from oncegraph import FaultPlan

    log = tmp_path / "calls.jsonl"
    db = tmp_path / "runs.db"

    def app() -> Any:
        model = ToolCallingFake(log_path=str(log))
        return ReactAgent(model, tools=[_lookup_tool()]).compile(
            checkpointer=SqliteCheckpointer(db)
        )

    crash = {"thread_id": "t", "fault_plan": FaultPlan("after_checkpoint")}
    deltas: list[str] = []
    with pytest.raises(_CrashSignal):  # right after the model turn's step committed
        if streamed:
            for chunk, _ in app().stream(USER, crash, stream_mode="messages"):
                deltas.append(chunk["content"])
        else:
            app().invoke(USER, crash)
    if streamed:
        assert "".join(deltas) == LOOKING
    assert [(c["turn"], c["streamed"]) for c in _calls(log)] == [(0, streamed)]
    out = app().invoke(None, {"thread_id": "t"})
    assert out["messages"][1]["content"] == LOOKING, "the recorded whole message"
    assert out["messages"][-1]["content"] == ANSWER
    assert [c["turn"] for c in _calls(log)] == [0, 1], "the first turn was not asked again"


# -- ChatOpenAI against a real local server ---------------------------------------------------


def _turns(body: Any) -> int:
    return sum(1 for m in (body or {}).get("messages", []) if m.get("role") == "assistant")


def _openai_answer(request: Any) -> Any:
    from wire import openai_completion, openai_stream

    streamed = bool((request.body or {}).get("stream"))
    if _turns(request.body) == 0:
        if streamed:
            return 200, openai_stream(
                ["Let me ", "look ", "it up."],
                [("call_1", "lookup_order", ('{"order_id": ', '"1042"}'))],
                "tool_calls",
            )
        call = {
            "id": "call_1",
            "type": "function",
            "function": {"name": "lookup_order", "arguments": '{"order_id": "1042"}'},
        }
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
        return 200, openai_completion(message, "tool_calls")
    if streamed:
        return 200, openai_stream(["Order 1042 is delivered; ", "its total is 59.00."])
    return 200, openai_completion({"role": "assistant", "content": ANSWER}, "stop")


@pytest.fixture
def openai_server() -> Iterator[Any]:
    if os.environ.get("CI") == "true":
        import langchain_openai  # noqa: F401
    else:
        pytest.importorskip("langchain_openai", reason="needs: pip install langchain-openai")
    from wire import WireServer

    server = WireServer(answer=_openai_answer)
    try:
        yield server
    finally:
        server.close()


def _check_openai_round_trip(server: Any, out: dict[str, Any]) -> None:
    assert [m["role"] for m in out["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert out["messages"][1]["tool_calls"] == [
        {"id": "call_1", "name": "lookup_order", "args": {"order_id": "1042"}}
    ]
    assert out["messages"][-1]["content"] == ANSWER
    first, second = (r.body for r in server.requests)
    assert first["model"] == "gpt-4o-mini"
    assert first["messages"][0] == {"role": "system", "content": SYSTEM}
    assert [t["function"]["name"] for t in first["tools"]] == ["lookup_order"]
    tool_reply = second["messages"][-1]
    assert tool_reply["role"] == "tool" and tool_reply["tool_call_id"] == "call_1"
    assert second["messages"][-2]["tool_calls"][0]["id"] == "call_1"


def test_chat_openai_drives_the_agent_against_a_local_server(openai_server: Any) -> None:
    from langchain_openai import ChatOpenAI

    chat = ChatOpenAI(
        model="gpt-4o-mini",
        base_url=openai_server.url + "/v1",
        api_key=SecretStr("k"),
        max_retries=0,
    )
    agent = ReactAgent(chat, system_prompt=SYSTEM, tools=[_lookup_tool()])
    assert agent.model.name == "langchain/ChatOpenAI:gpt-4o-mini"
    app = agent.compile(checkpointer=InMemoryCheckpointer())
    out = app.invoke(USER, {"thread_id": "t"})
    _check_openai_round_trip(openai_server, out)
    records = [e for e in app.effects(thread_id="t") if e.effect_class is EffectClass.MODEL]
    first = ModelResponse.from_json(records[0].result)
    assert first.usage == {"input_tokens": 30, "output_tokens": 7, "total_tokens": 37}
    assert first.raw_finish_reason == "tool_calls"


def test_chat_openai_streams_tokens_through_astream(openai_server: Any) -> None:
    from langchain_openai import ChatOpenAI

    chat = ChatOpenAI(
        model="gpt-4o-mini",
        base_url=openai_server.url + "/v1",
        api_key=SecretStr("k"),
        max_retries=0,
    )
    agent = ReactAgent(chat, system_prompt=SYSTEM, tools=[_lookup_tool()])
    app = agent.compile(checkpointer=InMemoryCheckpointer())
    deltas = [
        chunk["content"]
        for chunk, meta in app.stream(USER, {"thread_id": "t"}, stream_mode="messages")
        if meta.get("langgraph_node") == "agent"
    ]
    assert deltas == [
        "Let me ",
        "look ",
        "it up.",
        "Order 1042 is delivered; ",
        "its total is 59.00.",
    ]
    assert all(r.body["stream"] is True for r in openai_server.requests)
    state = app.get_state({"thread_id": "t"}).values
    asked = state["messages"][1]
    assert asked["content"] == LOOKING
    assert asked["tool_calls"] == [
        {"id": "call_1", "name": "lookup_order", "args": {"order_id": "1042"}}
    ]
    assert state["messages"][-1]["content"] == ANSWER


async def _no_wait(seconds: float) -> None:
    return None


OVERLOADED = {"error": {"message": "overloaded", "type": "server_error"}}


@pytest.mark.parametrize("own_retries", [0, 1])
def test_the_agents_model_retry_is_the_recorded_layer(openai_server: Any, own_retries: int) -> None:
    """With the LangChain model's own retries off, each failed request is a recorded try;
    with them on, they happen inside one try, unseen by the ledger."""
    from langchain_openai import ChatOpenAI

    openai_server.reply(OVERLOADED, status=503)
    chat = ChatOpenAI(
        model="gpt-4o-mini",
        base_url=openai_server.url + "/v1",
        api_key=SecretStr("k"),
        max_retries=own_retries,
    )
    retry = EffectRetry(max_attempts=2, initial_delay=0.0, jitter=0.0)
    app = ReactAgent(chat, tools=[_lookup_tool()], model_retry=retry).compile(
        checkpointer=InMemoryCheckpointer()
    )
    out = app.invoke(USER, {"thread_id": "t", "sleep": _no_wait})
    assert out["messages"][-1]["content"] == ANSWER
    first = next(e for e in app.effects(thread_id="t") if e.effect_class is EffectClass.MODEL)
    outcomes = [a.outcome for a in first.attempts]
    assert outcomes == (["failed", "completed"] if own_retries == 0 else ["completed"])
    assert len(openai_server.requests) == 3, "one 503, then the two turns' answers"


def test_a_langchain_model_can_be_a_fallback(openai_server: Any, tmp_path: Path) -> None:
    from langchain_openai import ChatOpenAI

    for _ in range(2):  # the primary's one try of each turn
        openai_server.reply(OVERLOADED, status=503)
    primary = ChatOpenAI(
        model="gpt-4o-mini",
        base_url=openai_server.url + "/v1",
        api_key=SecretStr("k"),
        max_retries=0,
    )
    backup = ToolCallingFake(log_path=str(tmp_path / "calls.jsonl"))
    app = ReactAgent(
        primary, tools=[_lookup_tool()], model_retry=_no_retry(), fallback_models=[backup]
    ).compile(checkpointer=InMemoryCheckpointer())
    out = app.invoke(USER, {"thread_id": "t"})
    assert out["messages"][-1]["content"] == ANSWER
    records = [e for e in app.effects(thread_id="t") if e.effect_class is EffectClass.MODEL]
    answered = {ModelResponse.from_json(r.result).model for r in records}
    assert answered == {"langchain/ToolCallingFake:fake-tools-1"}
    assert records[0].effect_type == "model:langchain/ChatOpenAI:gpt-4o-mini"


def test_init_chat_model_strings_build_a_langchain_model(openai_server: Any) -> None:
    pytest.importorskip("langchain", reason="needs: pip install langchain langchain-openai")
    agent = ReactAgent(
        "openai:gpt-4o-mini",
        system_prompt=SYSTEM,
        tools=[_lookup_tool()],
        base_url=openai_server.url + "/v1",
        api_key="k",
        max_retries=0,
    )
    assert isinstance(agent.model, LangChainChatModel)
    assert agent.model.name == "langchain/ChatOpenAI:gpt-4o-mini"
    out = agent.compile().invoke(USER, {"thread_id": "t"})
    _check_openai_round_trip(openai_server, out)


def test_a_langchain_model_refused_by_its_provider_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("langchain")
    pytest.importorskip("langchain_openai")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigError) as caught:
        ReactAgent("openai:gpt-4o-mini")
    text = str(caught.value)
    assert "'openai:gpt-4o-mini'" in text and "OPENAI_API_KEY" in text and "api_key=" in text
    with pytest.raises(ConfigError) as caught:
        ReactAgent("nosuchprovider:some-model")
    assert "nosuchprovider" in str(caught.value)


def test_our_own_slash_form_is_kept() -> None:
    pytest.importorskip("openai")
    from oncegraph.prebuilt.models.openai import OpenAIChatModel

    model = resolve_model("openai/gpt-4o-mini", api_key="k")
    assert isinstance(model, OpenAIChatModel) and model.name == "openai/gpt-4o-mini"


def test_a_missing_provider_package_names_the_pip_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("langchain")
    monkeypatch.setitem(sys.modules, "langchain_anthropic", None)  # not installed, whatever is
    with pytest.raises(ImportError) as caught:
        ReactAgent("anthropic:claude-haiku-4-5")
    assert "pip install langchain-anthropic" in str(caught.value)


def test_a_missing_langchain_names_the_pip_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "langchain", None)
    monkeypatch.setitem(sys.modules, "langchain.chat_models", None)
    with pytest.raises(ImportError) as caught:
        ReactAgent("openai:gpt-4o-mini")
    assert "pip install langchain langchain-openai" in str(caught.value)


if __name__ == "__main__":
    sys.exit(child_main())
