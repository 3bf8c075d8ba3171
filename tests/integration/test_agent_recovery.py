"""ReactAgent model calls across a SIGKILL, with the REAL SDKs against local wire servers.

The servers (:mod:`wire`) run in the test process and answer by the conversation they
are sent (the number of assistant turns in it), so a fresh child process gets the same
answers; the first turn asks for ``lookup_order``, the second answers. This file is
also the child's program: it builds the agent on a SQLite file, runs (or resumes) the
thread, and prints a JSON report. The child is SIGKILLed by ``ONCEGRAPH_CRASH_AT``.

What is proven, counting the requests each server received for the FIRST turn:

* a turn that needed a retry (the server failed the first request) is not asked again
  after a crash before its step's commit: 2 requests for it in all, not 3;
* a turn answered by a fallback model (the primary failed every try) is not asked
  again, of either model, after such a crash;
* a token-streamed turn (deltas emitted while the server was still writing) is not asked
  again after a crash that follows it; the recorded response is the whole message.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ANSWER = "Order 1042 is delivered; its total is 59.00."
OPENAI_MODEL = "gpt-4o-mini"
ANTHROPIC_MODEL = "claude-haiku-4-5"


def _turns(body: Any) -> int:
    """Assistant turns already in a request (OpenAI and Anthropic name them alike)."""
    return sum(1 for m in (body or {}).get("messages", []) if m.get("role") == "assistant")


# -- the child program ---------------------------------------------------------------------


async def _no_wait(seconds: float) -> None:
    return None


def child_main(argv: list[str] | None = None) -> int:
    from oncegraph import FaultPlan, tool
    from oncegraph.prebuilt.agent import ReactAgent
    from oncegraph.prebuilt.models.anthropic import AnthropicChatModel
    from oncegraph.prebuilt.models.openai import OpenAIChatModel
    from oncegraph.runtime.config import RunConfig
    from oncegraph.runtime.portal import run_sync
    from oncegraph.storage.checkpointer import SqliteCheckpointer
    from oncegraph.tools import EffectRetry

    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--openai", required=True)
    parser.add_argument("--anthropic")
    parser.add_argument("--tokens")
    parser.add_argument("--mode", choices=("run", "resume"), required=True)
    args = parser.parse_args(argv)

    @tool(effect="read")
    def lookup_order(order_id: str) -> dict[str, Any]:
        """Look up an order by id."""
        return {"order_id": order_id, "status": "delivered", "total": 59.0}

    primary = OpenAIChatModel(OPENAI_MODEL, base_url=args.openai + "/v1", api_key="k")
    fallbacks = (
        [AnthropicChatModel(ANTHROPIC_MODEL, base_url=args.anthropic, api_key="k")]
        if args.anthropic
        else []
    )
    store = SqliteCheckpointer(args.db)
    agent = ReactAgent(
        primary,
        tools=[lookup_order],
        model_retry=EffectRetry(max_attempts=2, initial_delay=0.0, jitter=0.0),
        fallback_models=fallbacks,
    )
    app = agent.compile(checkpointer=store)
    user = {"messages": [{"role": "user", "content": "Where is order 1042?"}]}
    inp = user if args.mode == "run" else None
    config = {"thread_id": "t1", "sleep": _no_wait}

    if args.tokens:
        tokens_file = args.tokens

        class Tokens:
            modes = frozenset({"messages"})

            def __call__(self, mode: str, payload: Any) -> None:
                if mode == "messages":
                    chunk, meta = payload
                    if meta.get("langgraph_node") != "agent":
                        return  # the tools node's messages stream too (as LangGraph's)
                    with open(tokens_file, "a", encoding="utf-8") as f:
                        f.write(json.dumps({"chunk": chunk, "meta": meta}) + "\n")

        async def streamed() -> dict[str, Any]:
            try:
                # the service directly (stream() learns the "messages" mode separately);
                # the crash plan comes from ONCEGRAPH_CRASH_AT, as invoke would take it
                cfg = RunConfig.parse({**config, "fault_plan": FaultPlan.from_env()})
                result = await app.service.run(inp, cfg, Tokens())
                return result.output()
            finally:
                for model in (primary, *fallbacks):
                    await model.aclose()
                await store.aclose()

        out = asyncio.run(streamed())
    else:
        out = app.invoke(inp, config)
        for model in (primary, *fallbacks):
            run_sync(model.aclose(), "close")
        run_sync(store.aclose(), "close")
    print(json.dumps({"messages": [dict(m) for m in out["messages"]]}), flush=True)
    return 0


# -- the servers -------------------------------------------------------------------------


@pytest.fixture
def sdks() -> None:
    for module, extra in (("openai", "openai"), ("anthropic", "anthropic")):
        if os.environ.get("CI") == "true":
            __import__(module)
        else:
            pytest.importorskip(module, reason=f'needs the SDK: pip install "oncegraph[{extra}]"')


def _openai_answer(*, fail_first: int, stream: bool) -> Any:
    from wire import openai_completion, openai_stream

    seen = {"first_turn": 0}

    def answer(request: Any) -> tuple[int, Any]:
        turns = _turns(request.body)
        if turns == 0:
            seen["first_turn"] += 1
            if seen["first_turn"] <= fail_first:
                return 503, {"error": {"message": "overloaded", "type": "server_error"}}
            if stream:
                args = ('{"order_id": ', '"1042"}')
                return 200, openai_stream(
                    ["Let me ", "look ", "it up."], [("call_1", "lookup_order", args)], "tool_calls"
                )
            call = {
                "id": "call_1",
                "type": "function",
                "function": {"name": "lookup_order", "arguments": '{"order_id": "1042"}'},
            }
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
            return 200, openai_completion(message, "tool_calls")
        if stream:
            return 200, openai_stream(["Order 1042 is delivered; ", "its total is 59.00."])
        return 200, openai_completion({"role": "assistant", "content": ANSWER}, "stop")

    return answer


def _anthropic_answer(request: Any) -> tuple[int, Any]:
    from wire import anthropic_message

    if _turns(request.body) == 0:
        block = {
            "type": "tool_use",
            "id": "toolu_1",
            "name": "lookup_order",
            "input": {"order_id": "1042"},
        }
        return 200, anthropic_message([block], "tool_use")
    return 200, anthropic_message([{"type": "text", "text": ANSWER}], "end_turn")


@pytest.fixture
def servers() -> Iterator[list[Any]]:
    made: list[Any] = []
    yield made
    for server in made:
        server.close()


def _first_turn_requests(server: Any) -> int:
    return sum(1 for r in server.requests if _turns(r.body) == 0)


def _run(args: list[str], crash_at: tuple[str, int] | None = None) -> Any:
    from oncegraph.testing.crash import run_in_subprocess

    return run_in_subprocess(__file__, args, crash_at=crash_at, timeout=300)


# -- tests -------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_retried_turn_is_not_asked_again_after_a_sigkill(
    sdks: None, servers: list[Any], tmp_path: Path
) -> None:
    from wire import WireServer

    openai = WireServer(answer=_openai_answer(fail_first=1, stream=False))
    servers.append(openai)
    args = ["--db", str(tmp_path / "runs.db"), "--openai", openai.url]
    # the first model step: its answer came on the second try; killed before the commit
    crashed = _run([*args, "--mode", "run"], crash_at=("before_checkpoint", 1))
    assert crashed.killed, crashed.describe()
    assert _first_turn_requests(openai) == 2, "one failed request, one answer"
    resumed = _run([*args, "--mode", "resume"])
    assert resumed.returncode == 0, resumed.describe()
    assert resumed.json()["messages"][-1]["content"] == ANSWER
    assert _first_turn_requests(openai) == 2, "the retried turn was not asked again"
    assert len(openai.requests) == 3


@pytest.mark.slow
def test_a_fallback_answer_is_not_asked_again_after_a_sigkill(
    sdks: None, servers: list[Any], tmp_path: Path
) -> None:
    from wire import WireServer

    openai = WireServer(answer=_openai_answer(fail_first=99, stream=False))
    anthropic = WireServer(answer=_anthropic_answer)
    servers.extend([openai, anthropic])
    args = ["--db", str(tmp_path / "runs.db"), "--openai", openai.url]
    args += ["--anthropic", anthropic.url]
    crashed = _run([*args, "--mode", "run"], crash_at=("before_checkpoint", 1))
    assert crashed.killed, crashed.describe()
    assert (_first_turn_requests(openai), _first_turn_requests(anthropic)) == (2, 1)
    resumed = _run([*args, "--mode", "resume"])
    assert resumed.returncode == 0, resumed.describe()
    assert resumed.json()["messages"][-1]["content"] == ANSWER
    assert (_first_turn_requests(openai), _first_turn_requests(anthropic)) == (2, 1)
    assert anthropic.requests[0].body["model"] == ANTHROPIC_MODEL


@pytest.mark.slow
def test_a_token_streamed_turn_is_not_asked_again_after_a_sigkill(
    sdks: None, servers: list[Any], tmp_path: Path
) -> None:
    from wire import WireServer

    openai = WireServer(answer=_openai_answer(fail_first=0, stream=True))
    servers.append(openai)
    tokens = tmp_path / "tokens.jsonl"
    args = ["--db", str(tmp_path / "runs.db"), "--openai", openai.url, "--tokens", str(tokens)]
    # killed in the tools step, after the streamed model turn was committed
    crashed = _run([*args, "--mode", "run"], crash_at=("before_checkpoint", 2))
    assert crashed.killed, crashed.describe()
    first = [json.loads(line) for line in tokens.read_text().splitlines()]
    assert "".join(t["chunk"]["content"] for t in first) == "Let me look it up."
    assert all(t["meta"]["langgraph_node"] == "agent" for t in first)
    assert openai.requests[0].body["stream"] is True

    resumed = _run([*args, "--mode", "resume"])
    assert resumed.returncode == 0, resumed.describe()
    messages = resumed.json()["messages"]
    assert _first_turn_requests(openai) == 1, "the streamed turn came from the ledger"
    assistant = next(m for m in messages if m["role"] == "assistant")
    assert assistant["content"] == "Let me look it up.", "recorded whole, not in pieces"
    assert {t["chunk"]["id"] for t in first} == {assistant["id"]}
    after = [json.loads(line) for line in tokens.read_text().splitlines()][len(first) :]
    assert "".join(t["chunk"]["content"] for t in after) == ANSWER
    assert messages[-1]["content"] == ANSWER


if __name__ == "__main__":
    sys.exit(child_main())
