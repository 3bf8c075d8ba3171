"""MCP tools under the ledger, against a REAL MCP server process on both transports.

The server is :mod:`oncegraph.testing.mcp_server` (the official SDK's ``MCPServer``): its
``create_refund`` performs a refund unless the request's ``_meta`` carries an
idempotency key it has seen, and it counts refunds and calls in a JSON state file that
outlives every process. Over ``http`` the test starts it as its own process (streamable
HTTP on a free port); over ``stdio`` each client session starts it as a child.

The crash test runs ``mcp_worker.py`` (a ReactAgent on SQLite) in a fresh process that
SIGKILLs itself right after the server answered (``ONCEGRAPH_CRASH_AT=after_mcp_call``),
resumes the run in another fresh process, and finds exactly ONE refund at the server:
the resume re-sent the pending ``write`` call with the same key, and the server answered
from its key store.

Without a class from the user, a tool's class comes from the server's annotations and
fails closed: an unannotated or destructive tool is ``irreversible``, so a crash after its
call parks the run instead of calling again.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from mcp import StdioServerParameters

from oncegraph.errors import ConfigError
from oncegraph.prebuilt.agent import ReactAgent
from oncegraph.prebuilt.models import ScriptedModel
from oncegraph.storage.checkpointer import SqliteCheckpointer
from oncegraph.storage.records import EffectClass, EffectStatus
from oncegraph.testing.crash import run_in_subprocess
from oncegraph.testing.mcp_server import read_state
from oncegraph.tools.mcp import IDEMPOTENCY_META_KEY, MCPTools

WORKER = Path(__file__).with_name("mcp_worker.py")
DEADLINE = 120.0  # generous: the CI machine can be very slow at times


def _stdio(state: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "oncegraph.testing.mcp_server", "--state", str(state)],
        env=dict(os.environ),
    )


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "mcp_state.json"


@pytest.fixture
def http_url(tmp_path: Path, state: Path) -> Iterator[str]:
    """A streamable-HTTP MCP server in its own process; its URL."""
    port_file = tmp_path / "mcp.port"
    argv = [sys.executable, "-m", "oncegraph.testing.mcp_server", "--state", str(state)]
    argv += ["--http", "--port-file", str(port_file)]
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + DEADLINE
        while not port_file.exists():
            if process.poll() is not None:
                pytest.fail(f"the MCP server exited with {process.returncode}")
            if time.monotonic() > deadline:
                pytest.fail("the MCP server wrote no port file")
            time.sleep(0.02)
        yield f"http://127.0.0.1:{port_file.read_text()}/mcp"
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(params=["stdio", "http"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def server_spec(transport: str, state: Path, request: pytest.FixtureRequest) -> Any:
    if transport == "stdio":
        return _stdio(state)
    return request.getfixturevalue("http_url")


def _refund_model(amount: float = 59.0) -> ScriptedModel:
    return ScriptedModel.turns(
        {
            "content": "",
            "tool_calls": [
                {"name": "create_refund", "args": {"order_id": "1042", "amount": amount}},
                {"name": "order_status", "args": {"order_id": "1042"}},
            ],
        },
        "Done.",
    )


ALL_TOOLS = ["cancel_order", "create_refund", "order_status", "set_order_note"]


def test_tools_are_listed_with_schema_and_declared_classes(server_spec: Any) -> None:
    server = MCPTools(server_spec, effects={"create_refund": "write"}, recipient="refunds")
    tools = {t.name: t for t in server.tools()}
    assert sorted(tools) == ALL_TOOLS
    refund = tools["create_refund"]
    assert refund.effect is EffectClass.WRITE  # declared: it deduplicates on the key
    assert tools["order_status"].effect is EffectClass.READ  # from its annotations
    assert refund.description.startswith("Refund an amount of an order.")
    assert refund.parameters["properties"]["amount"]["type"] == "number"
    assert refund.parameters["required"] == ["order_id", "amount"]
    assert refund.recipient == "refunds" and refund.is_async
    assert len(server._connections) == 0  # the listing session was closed again


def test_a_react_agent_calls_mcp_tools_under_the_ledger(
    server_spec: Any, state: Path, tmp_path: Path
) -> None:
    checkpointer = SqliteCheckpointer(tmp_path / "runs.db")

    async def scenario() -> dict[str, Any]:
        async with MCPTools(server_spec, effects={"create_refund": "write"}) as server:
            app = ReactAgent(model=_refund_model(), tools=await server.atools()).compile(
                checkpointer=checkpointer
            )
            out = await app.ainvoke(
                {"messages": [{"role": "user", "content": "Refund 1042"}]}, {"thread_id": "t"}
            )
            effects = {e.effect_type: e for e in await app.aeffects(thread_id="t")}
            assert len(server._connections) == 1  # one session for this loop
        assert len(server._connections) == 0
        return {"out": out, "effects": effects}

    result = asyncio.run(scenario())
    tool_messages = [m for m in result["out"]["messages"] if m["role"] == "tool"]
    assert [m["status"] for m in tool_messages] == ["success", "success"]
    assert '"refund_id":"re_0001"' in tool_messages[0]["content"]
    assert '"order_id":"1042"' in tool_messages[1]["content"]  # (run in parallel: no order)

    refund_effect = result["effects"]["create_refund"]
    assert refund_effect.status is EffectStatus.COMPLETED
    assert refund_effect.effect_class is EffectClass.WRITE
    assert refund_effect.request == {"order_id": "1042", "amount": 59.0}
    assert result["effects"]["order_status"].effect_class is EffectClass.READ
    # the server got the call's idempotency key in _meta
    server_state = read_state(state)
    assert [r["key"] for r in server_state["refunds"]] == [refund_effect.effect_id]
    assert server_state["calls"] == 1


def test_bad_arguments_and_server_errors_reach_the_model(
    http_url: str, state: Path, tmp_path: Path
) -> None:
    """(Not transport-specific: HTTP only, to keep the file fast.)"""
    checkpointer = SqliteCheckpointer(tmp_path / "runs.db")
    model = ScriptedModel.turns(
        {
            "content": "",
            "tool_calls": [
                {"name": "create_refund", "args": {"order_id": 1042}},
                {"name": "create_refund", "args": {"order_id": "1043", "amount": -5}},
            ],
        },
        "Sorry.",
    )
    server = MCPTools(http_url)
    try:
        app = ReactAgent(model=model, tools=server.tools()).compile(checkpointer=checkpointer)
        out = app.invoke({"messages": [{"role": "user", "content": "x"}]}, {"thread_id": "t"})
    finally:
        server.close()
    first, second = (m for m in out["messages"] if m["role"] == "tool")
    # checked against the input schema before anything was recorded or sent
    assert first["status"] == "error"
    assert "order_id: 1042 is not of type 'string'" in first["content"]
    assert "(arguments): 'amount' is a required property" in first["content"]
    # sent, and refused by the server: its text reaches the model, the ledger says failed
    assert second["status"] == "error"
    assert "MCPToolError" in second["content"] and "amount must be positive" in second["content"]
    effects = app.effects(thread_id="t")
    assert [(e.effect_type, e.status) for e in effects if e.effect_type == "create_refund"] == [
        ("create_refund", EffectStatus.FAILED)
    ]
    assert read_state(state)["refunds"] == []


def test_one_session_per_event_loop_and_close(transport: str, server_spec: Any) -> None:
    """Each loop gets its own session; aclose() on one loop closes the other loop's session
    through that loop's thread (as for the sync facade's loop)."""
    server = MCPTools(server_spec)

    async def connect() -> tuple[Any, Any]:
        client = await server.client()
        assert await server.client() is client  # reused on its loop
        return client, server._connections.peek()

    other = asyncio.new_event_loop()
    thread = threading.Thread(target=other.run_forever, daemon=True)
    thread.start()
    here = asyncio.new_event_loop()
    try:
        client_here, conn_here = here.run_until_complete(connect())
        future = asyncio.run_coroutine_threadsafe(connect(), other)
        client_other, conn_other = future.result(DEADLINE)
        assert client_other is not client_here
        assert len(server._connections) == 2 and conn_here.alive and conn_other.alive

        here.run_until_complete(server.aclose())
        assert len(server._connections) == 0
        assert not conn_here.alive and not conn_other.alive  # both sessions ended

        # a closed server opens a new session on the next use
        names = here.run_until_complete(server.atools())
        assert sorted(t.name for t in names) == ALL_TOOLS
        here.run_until_complete(server.aclose())
    finally:
        here.close()
        other.call_soon_threadsafe(other.stop)
        thread.join(DEADLINE)
        other.close()


def test_an_unreachable_server_is_a_connection_error_naming_it() -> None:
    server = MCPTools("http://127.0.0.1:9/mcp")  # nothing listens on the discard port
    with pytest.raises(ConnectionError, match=r"could not open an MCP session with http://"):
        server.tools()
    failing = _stdio(Path("unused.json"))
    failing.args = ["-c", "raise SystemExit(3)"]
    with pytest.raises(ConnectionError, match="could not open an MCP session"):
        MCPTools(failing).tools()


def test_unknown_tool_names_in_options_are_refused(http_url: str) -> None:
    with pytest.raises(ConfigError, match="does not have"):
        MCPTools(http_url, effects={"delete_everything": "read"}).tools()
    with pytest.raises(ConfigError, match="unknown options"):
        MCPTools(http_url, tool_options={"create_refund": {"colour": "red"}})


@pytest.mark.slow
def test_sigkill_after_the_mcp_call_leaves_one_effect(
    transport: str, state: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    db = tmp_path / "runs.db"
    if transport == "http":
        target = ["--url", request.getfixturevalue("http_url")]
    else:
        target = ["--stdio-state", str(state)]
    crashed = run_in_subprocess(
        WORKER,
        ["--db", str(db), "--mode", "run", *target],
        crash_at="after_mcp_call",
        timeout=DEADLINE,
    )
    assert crashed.killed, crashed.describe()
    before = read_state(state)
    assert len(before["refunds"]) == 1 and before["calls"] == 1  # the server did it once

    resumed = run_in_subprocess(
        WORKER, ["--db", str(db), "--mode", "resume", *target], timeout=DEADLINE
    )
    assert resumed.returncode == 0, resumed.describe()
    report = resumed.json()
    assert report["outcome"] == "completed", report
    assert report["final"] == "Refund done."
    after = read_state(state)
    assert len(after["refunds"]) == 1, after  # exactly ONE effect at the server
    assert after["calls"] == 2  # the resume re-sent the call ...
    (effect,) = report["effects"]
    assert after["refunds"][0]["key"] == effect["effect_id"]  # ... with the same key
    assert effect["status"] == "completed" and effect["attempts"] == 2
    assert '"replayed":true' in report["tool_messages"][0]["content"]


def test_classes_come_from_the_annotations_failing_closed_unless_declared(
    http_url: str,
) -> None:
    def classes(**options: Any) -> dict[str, EffectClass]:
        server = MCPTools(http_url, **options)
        try:
            return {t.name: t.effect for t in server.tools()}
        finally:
            server.close()

    read, write, irreversible = EffectClass.READ, EffectClass.WRITE, EffectClass.IRREVERSIBLE
    assert classes() == {
        "create_refund": irreversible,  # no annotations
        "order_status": read,  # read-only and idempotent
        "set_order_note": write,  # idempotent, not destructive
        "cancel_order": irreversible,  # destructive, not idempotent
    }
    # the user's class always wins: per tool, in tool_options, or as the default
    declared = classes(
        effects={"cancel_order": "write"},
        tool_options={"order_status": {"effect": "irreversible"}},
    )
    assert declared["cancel_order"] is write and declared["order_status"] is irreversible
    assert set(classes(default_effect="read").values()) == {read}


def test_annotated_class_reads_the_hints_with_the_mcp_defaults() -> None:
    from mcp.types import ToolAnnotations

    from oncegraph.tools.mcp import annotated_class

    def cls(**hints: Any) -> EffectClass:
        return annotated_class(ToolAnnotations(**hints))

    assert annotated_class(None) is EffectClass.IRREVERSIBLE
    assert cls() is EffectClass.IRREVERSIBLE
    assert cls(read_only_hint=True) is EffectClass.IRREVERSIBLE  # not said to be idempotent
    assert cls(read_only_hint=True, idempotent_hint=True) is EffectClass.READ
    assert cls(idempotent_hint=True) is EffectClass.IRREVERSIBLE  # destructive by default
    assert cls(idempotent_hint=True, destructive_hint=False) is EffectClass.WRITE
    assert cls(idempotent_hint=False, destructive_hint=False) is EffectClass.IRREVERSIBLE


def _one_call(name: str, args: dict[str, Any]) -> ScriptedModel:
    return ScriptedModel.turns(
        {"content": "", "tool_calls": [{"id": "c1", "name": name, "args": args}]}, "Done."
    )


def test_a_destructive_tool_is_parked_not_sent_again_after_a_crash(
    http_url: str, state: Path, tmp_path: Path
) -> None:
    """``cancel_order`` acts on every call and ignores the key: as a ``write`` tool (the
    old default) the resume cancelled the order a second time."""
    from oncegraph import FaultPlan
    from oncegraph.errors import NeedsReviewError, _CrashSignal

    checkpointer = SqliteCheckpointer(tmp_path / "runs.db")
    server = MCPTools(http_url)
    try:
        tools = server.tools()
        model = _one_call("cancel_order", {"order_id": "1042"})
        app = ReactAgent(model=model, tools=tools).compile(checkpointer=checkpointer)
        user = {"messages": [{"role": "user", "content": "Cancel 1042"}]}
        with pytest.raises(_CrashSignal):
            app.invoke(user, {"thread_id": "t", "fault_plan": FaultPlan("after_mcp_call")})
        assert read_state(state)["cancels"] == ["1042"]
        with pytest.raises(NeedsReviewError, match="cancel_order"):
            app.invoke(None, {"thread_id": "t"})
    finally:
        server.close()
    assert read_state(state)["cancels"] == ["1042"], "cancelled once, then parked for review"


def test_an_idempotent_tool_runs_again_after_a_crash(
    http_url: str, state: Path, tmp_path: Path
) -> None:
    from oncegraph import FaultPlan
    from oncegraph.errors import _CrashSignal

    checkpointer = SqliteCheckpointer(tmp_path / "runs.db")
    server = MCPTools(http_url)
    try:
        model = _one_call("set_order_note", {"order_id": "1042", "note": "gift"})
        app = ReactAgent(model=model, tools=server.tools()).compile(checkpointer=checkpointer)
        user = {"messages": [{"role": "user", "content": "Note 1042"}]}
        with pytest.raises(_CrashSignal):
            app.invoke(user, {"thread_id": "t", "fault_plan": FaultPlan("after_mcp_call")})
        out = app.invoke(None, {"thread_id": "t"})
    finally:
        server.close()
    assert out["messages"][-1]["content"] == "Done."
    after = read_state(state)
    assert after["note_calls"] == 2 and after["notes"] == {"1042": "gift"}


def test_meta_key_constant_is_namespaced() -> None:
    # a vendor prefix as the MCP specification asks for _meta keys
    assert IDEMPOTENCY_META_KEY.split("/")[0] == "io.oncegraph"
