"""The runtime against real stores (memory and a SQLite file), on every run path.

Each law is checked through ``run_path`` (invoke, ainvoke, stream, astream) and the
``checkpointer`` fixture (memory, sqlite) from ``tests/conftest.py``. Node executions
are counted with plain lists captured by the nodes, so "only X re-ran" is asserted,
not assumed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import operator
import sqlite3
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pydantic
import pytest

from oncegraph import (
    END,
    START,
    Command,
    FaultPlan,
    IncompatibleVersionError,
    StaleStateError,
    StateGraph,
    ToolNode,
    UnfinishedRunError,
    add_messages,
    tool,
)
from oncegraph.app import CompiledGraph
from oncegraph.errors import (
    ConfigError,
    InvalidUpdateError,
    NoRunToResumeError,
    OnceGraphError,
    RecursionLimitError,
    RunNotFoundError,
    _CrashSignal,
)
from oncegraph.storage.checkpointer import InMemoryCheckpointer, SqliteCheckpointer
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import CheckpointRecord, RunStatus, StepCommit

RunPath = Callable[..., dict[str, Any]]  # the conftest's run_path fixture


class Msgs(TypedDict, total=False):
    messages: Annotated[list[dict[str, Any]], add_messages]


class S(TypedDict, total=False):
    messages: Annotated[list[dict[str, Any]], add_messages]
    hits: Annotated[list[str], operator.add]
    x: int
    route: str


def _status(app: CompiledGraph, thread_id: str) -> RunStatus:
    return app.runs(thread_id=thread_id, limit=1)[0].status


def _contents(values: dict[str, Any]) -> list[str]:
    return [m["content"] for m in values["messages"]]


# -- nodes and their return values -------------------------------------------------------


def test_sync_and_async_nodes_partial_dict_none_and_command(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    calls: list[str] = []

    def sync_node(state: S) -> dict[str, Any]:
        calls.append("sync")
        return {"x": state["x"] + 1, "hits": ["sync"]}  # partial: messages untouched

    async def async_node(state: S) -> None:
        calls.append("async")
        await asyncio.sleep(0)
        return None

    def commander(state: S) -> Command:
        calls.append("commander")
        return Command(update={"x": state["x"] * 10, "hits": ["cmd"]}, goto="tail")

    async def tail(state: S) -> dict[str, Any]:
        calls.append("tail")
        return {"hits": ["tail"]}

    def never(state: S) -> dict[str, Any]:
        raise AssertionError("Command(goto=...) replaces no static edge here")

    g = StateGraph(S)
    g.add_node("sync_node", sync_node)
    g.add_node("async_node", async_node)
    g.add_node("commander", commander)
    g.add_node("tail", tail)
    g.add_node("never", never)
    g.add_edge(START, "sync_node")
    g.add_edge("sync_node", "async_node")
    g.add_edge("async_node", "commander")
    g.add_edge("tail", END)
    app = g.compile(checkpointer=checkpointer)

    out = run_path(app, {"x": 1, "messages": ["hi"]}, {"thread_id": "t"})
    assert calls == ["sync", "async", "commander", "tail"]
    assert out["x"] == 20
    assert out["hits"] == ["sync", "cmd", "tail"]
    assert _contents(out) == ["hi"]
    assert "__interrupt__" not in out
    assert _status(app, "t") is RunStatus.COMPLETED


def test_node_with_config_argument_sees_ids_and_custom_keys(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    seen: list[dict[str, Any]] = []

    def node(state: S, config: dict[str, Any]) -> dict[str, Any]:
        seen.append(config)
        return {"x": 1}

    g = StateGraph(S)
    g.add_node("node", node)
    g.add_edge(START, "node")
    app = g.compile(checkpointer=checkpointer)
    run_path(app, {"x": 0}, {"thread_id": "t", "configurable": {"user": "u1"}})
    (config,) = seen
    assert config["thread_id"] == "t" and config["node"] == "node" and config["user"] == "u1"
    assert config["configurable"]["run_id"] == app.runs(thread_id="t")[0].run_id
    assert isinstance(config["run_id"], uuid.UUID)  # what LangChain's Runnables read


@dataclasses.dataclass
class DCState:
    messages: Annotated[list[dict[str, Any]], add_messages] = dataclasses.field(
        default_factory=list
    )
    count: int = 0


class PMState(pydantic.BaseModel):
    messages: Annotated[list[dict[str, Any]], add_messages] = []
    count: int = 0


@pytest.mark.parametrize("schema", [Msgs, DCState, PMState], ids=["typeddict", "dc", "pydantic"])
def test_state_schemas_end_to_end(
    schema: Any, checkpointer: Checkpointer, run_path: RunPath
) -> None:
    seen: list[type] = []

    def node(state: Any) -> dict[str, Any]:
        seen.append(type(state))
        msgs = state["messages"] if isinstance(state, dict) else state.messages
        out: dict[str, Any] = {"messages": [("assistant", f"seen {len(msgs)}")]}
        if schema is not Msgs:
            out["count"] = state.count + 1
        return out

    g = StateGraph(schema)
    g.add_node("node", node)
    g.add_edge(START, "node")
    app = g.compile(checkpointer=checkpointer)
    cfg = {"thread_id": "t"}
    run_path(app, {"messages": ["one"]}, cfg)
    out = run_path(app, {"messages": ["two"]}, cfg)
    assert _contents(out) == ["one", "seen 1", "two", "seen 3"]
    assert seen == [dict, dict] if schema is Msgs else seen == [schema, schema]
    if schema is not Msgs:
        assert out["count"] == 2


# -- reducers and fan-out --------------------------------------------------------------


def _fan(
    checkpointer: Checkpointer,
    b: Callable[..., Any],
    c: Callable[..., Any],
    after: Callable[..., Any] | None = None,
) -> CompiledGraph:
    def a(state: S) -> dict[str, Any]:
        return {"hits": ["a"]}

    def d(state: S) -> dict[str, Any]:
        return {"hits": ["d"]}

    g = StateGraph(S)
    g.add_node("a", a)
    g.add_node("b", b)
    g.add_node("c", c)
    g.add_node("d", after or d)
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_edge("a", "c")
    g.add_edge(["b", "c"], "d")
    g.add_edge("d", END)
    return g.compile(checkpointer=checkpointer)


def test_fan_out_merges_writes_with_reducers(checkpointer: Checkpointer, run_path: RunPath) -> None:
    async def b(state: S) -> dict[str, Any]:
        await asyncio.sleep(0.01)  # finishes after c: the merge order is still b, c
        return {"hits": ["b"], "messages": [("assistant", "from b")]}

    def c(state: S) -> dict[str, Any]:
        return {"hits": ["c"], "messages": [("assistant", "from c")]}

    app = _fan(checkpointer, b, c)
    out = run_path(app, {"hits": []}, {"thread_id": "t"})
    assert out["hits"] == ["a", "b", "c", "d"]
    assert _contents(out) == ["from b", "from c"]
    history = list(app.get_state_history({"thread_id": "t"}))
    # LangGraph's shape: the run's input shows as a checkpoint of its own, last
    assert [s.next for s in history] == [(), ("d",), ("b", "c"), ("a",), ("__start__",)]
    assert [t.name for t in history[2].tasks] == ["b", "c"]  # the step that wrote [1]
    # before the first input its lists are empty, as LangGraph's channels show them
    assert history[-1].values == {"hits": [], "messages": []}
    assert history[-1].metadata["source"] == "input"


def test_fan_out_writing_a_last_value_field_twice_fails_the_run(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    app = _fan(checkpointer, lambda s: {"x": 1}, lambda s: {"x": 2})
    with pytest.raises(InvalidUpdateError, match="'b' and 'c' both wrote 'x'"):
        run_path(app, {}, {"thread_id": "t"})


def test_fan_out_with_one_failing_sibling_resumes_only_that_sibling(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    calls: list[str] = []
    broken = [True]

    def b(state: S) -> dict[str, Any]:
        calls.append("b")
        return {"hits": ["b"]}

    async def c(state: S) -> dict[str, Any]:
        calls.append("c")
        if broken[0]:
            raise RuntimeError("c is down")
        return {"hits": ["c"]}

    def d(state: S) -> dict[str, Any]:
        calls.append("d")
        return {"hits": ["d"]}

    app = _fan(checkpointer, b, c, d)
    cfg = {"thread_id": "t"}
    with pytest.raises(RuntimeError, match="c is down") as info:  # the node's own error
        run_path(app, {"hits": []}, cfg)
    run = app.runs(thread_id="t")[0]
    assert info.value.oncegraph_node == "c"  # type: ignore[attr-defined]
    assert info.value.oncegraph_run_id == run.run_id  # type: ignore[attr-defined]
    assert any(run.run_id in note for note in info.value.__notes__)
    assert run.status is RunStatus.FAILED and "c is down" in (run.error or "")
    state = app.get_state(cfg)  # as LangGraph: b's kept writes applied, only c still to run
    assert state.next == ("c",) and state.values["hits"] == ["a", "b"]
    assert app.get_state(state.config).next == ("b", "c")  # the stored checkpoint, by its id
    assert sorted(calls) == ["b", "c"]

    broken[0] = False
    out = run_path(app, None, cfg)
    assert sorted(calls) == ["b", "c", "c", "d"]  # b's saved writes were used, b did not re-run
    assert out["hits"] == ["a", "b", "c", "d"]
    assert app.get_run(run.run_id).status is RunStatus.COMPLETED
    assert len(app.runs(thread_id="t")) == 1  # resume keeps the run


def test_conditional_edges_with_path_map_and_list_returns(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    def mark(name: str) -> Callable[[S], dict[str, Any]]:
        return lambda state: {"hits": [name]}

    g = StateGraph(S)
    for name in ("router", "left", "right", "x1", "x2"):
        g.add_node(name, mark(name))
    g.add_edge(START, "router")
    g.add_conditional_edges(
        "router", lambda s: s["route"], {"L": "left", "R": "right", "stop": END}
    )
    g.add_conditional_edges("left", lambda s: ["x1", "x2"])
    g.add_conditional_edges("right", lambda s: [END])
    app = g.compile(checkpointer=checkpointer)

    assert run_path(app, {"route": "L"}, {"thread_id": "l"})["hits"] == [
        "router",
        "left",
        "x1",
        "x2",
    ]
    assert run_path(app, {"route": "R"}, {"thread_id": "r"})["hits"] == ["router", "right"]
    assert run_path(app, {"route": "stop"}, {"thread_id": "s"})["hits"] == ["router"]


# A bad update, a router's GraphValidationError or a router's own exception fail the run
# with the error recorded (it was once left "running").
@pytest.mark.parametrize("fault", ["not_an_update", "router_raises", "router_unknown_node"])
def test_errors_applying_a_step_fail_the_run(
    checkpointer: Checkpointer, run_path: RunPath, fault: str
) -> None:
    def node(state: S) -> Any:
        return 5 if fault == "not_an_update" else {"x": 1}

    def router(state: S) -> str:
        if fault == "router_raises":
            raise KeyError("route")
        return "nowhere" if fault == "router_unknown_node" else END

    g = StateGraph(S)
    g.add_node("node", node)
    g.add_edge(START, "node")
    g.add_conditional_edges("node", router)
    app = g.compile(checkpointer=checkpointer)
    with pytest.raises(KeyError if fault == "router_raises" else OnceGraphError):
        run_path(app, {"x": 0}, {"thread_id": "t"})
    run = app.runs(thread_id="t")[0]
    assert run.status is RunStatus.FAILED
    assert run.error


def test_bad_input_writes_nothing(checkpointer: Checkpointer, run_path: RunPath) -> None:
    app = _fan(checkpointer, lambda s: None, lambda s: None)
    with pytest.raises(InvalidUpdateError, match=r"input must be a dict.*got int"):
        run_path(app, 5, {"thread_id": "t"})
    assert app.runs(thread_id="t") == []
    assert list(app.get_state_history({"thread_id": "t"})) == []


# -- threads and runs ------------------------------------------------------------------


def _chat(
    checkpointer: Checkpointer | None,
    fail: list[bool] | None = None,
    version: str = "1",
    extra_node: bool = False,
) -> CompiledGraph:
    def bot(state: Msgs) -> dict[str, Any]:
        if fail and fail[0]:
            raise RuntimeError("bot failed")
        return {"messages": [("assistant", f"echo {state['messages'][-1]['content']}")]}

    g = StateGraph(Msgs, name="chat", version=version)
    g.add_node("bot", bot)
    g.add_edge(START, "bot")
    if extra_node:
        g.add_node("after", lambda s: None)
        g.add_edge("bot", "after")
    return g.compile(checkpointer=checkpointer)


def test_missing_thread_id_with_a_checkpointer_is_a_config_error(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    app = _chat(checkpointer)
    with pytest.raises(ConfigError, match=r"needs a thread.*thread_id"):
        run_path(app, {"messages": ["hi"]}, None)
    with pytest.raises(ConfigError, match="thread_id must not be empty"):
        run_path(app, {"messages": ["hi"]}, {"thread_id": ""})
    for forged in ("t\x00", "t\r\nINFO forged log line", "t\x1b[2J", "t\u2028x", "t\x85x"):
        with pytest.raises(ConfigError, match="thread_id must not contain control characters"):
            run_path(app, {"messages": ["hi"]}, {"thread_id": forged})
    with pytest.raises(ConfigError, match="lone surrogate"):
        run_path(app, {"messages": ["hi"]}, {"thread_id": "t\udc80"})
    assert app.runs() == []  # nothing was written


def test_second_invoke_continues_the_thread_with_a_new_run(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    app = _chat(checkpointer)
    cfg = {"thread_id": "t"}
    first = run_path(app, {"messages": ["one"]}, cfg)
    second = run_path(app, {"messages": ["two"]}, cfg)
    third = run_path(app, {"messages": ["three"]}, cfg)
    assert _contents(third) == ["one", "echo one", "two", "echo two", "three", "echo three"]
    # message ids are given once and kept across runs
    assert [m["id"] for m in third["messages"][:4]] == [m["id"] for m in second["messages"]]
    assert [m["id"] for m in second["messages"][:2]] == [m["id"] for m in first["messages"]]
    runs = app.runs(thread_id="t")
    assert len(runs) == 3 and all(r.status is RunStatus.COMPLETED for r in runs)
    ids = [r.run_id for r in reversed(runs)]  # runs() lists newest first
    assert ids == sorted(ids) and len(set(ids)) == 3
    assert app.get_state(cfg).run_id == ids[-1]
    # another thread is independent
    other = run_path(app, {"messages": ["x"]}, {"thread_id": "u"})
    assert _contents(other) == ["x", "echo x"]


def test_new_input_on_an_unfinished_run_is_refused_until_continued_or_abandoned(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    fail = [True]
    app = _chat(checkpointer, fail)
    cfg = {"thread_id": "t"}
    with pytest.raises(RuntimeError, match="bot failed"):
        run_path(app, {"messages": ["one"]}, cfg)
    with pytest.raises(UnfinishedRunError) as info:
        run_path(app, {"messages": ["two"]}, cfg)
    message = str(info.value)
    assert "(failed)" in message
    assert "invoke(None, config)" in message and "app.abandon(config)" in message
    assert "on purpose" in info.value.__notes__[-1]  # why oncegraph differs from LangGraph
    failed = app.runs(thread_id="t")[0]

    record = app.abandon(cfg, reason="user moved on")
    assert record.run_id == failed.run_id
    assert record.status is RunStatus.ABANDONED and record.error == "user moved on"
    fail[0] = False
    out = run_path(app, {"messages": ["two"]}, cfg)
    # the abandoned run's input stays in the thread: nothing committed is dropped
    assert _contents(out) == ["one", "two", "echo two"]
    with pytest.raises(RunNotFoundError, match="no unfinished run to abandon"):
        app.abandon(cfg)


def test_continue_with_nothing_to_resume(checkpointer: Checkpointer, run_path: RunPath) -> None:
    app = _chat(checkpointer)
    with pytest.raises(NoRunToResumeError, match="no unfinished run"):
        run_path(app, None, {"thread_id": "fresh"})
    done = run_path(app, {"messages": ["hi"]}, {"thread_id": "done"})
    # a finished thread: its state, as LangGraph's replay of a final checkpoint; nothing runs
    assert _contents(run_path(app, None, {"thread_id": "done"})) == _contents(done)
    (run,) = app.runs(thread_id="done")  # no new run
    assert run.status is RunStatus.COMPLETED


def test_failed_run_is_resumed_with_none_keeping_its_run_id(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    fail = [True]
    app = _chat(checkpointer, fail)
    cfg = {"thread_id": "t"}
    with pytest.raises(RuntimeError, match="bot failed") as info:
        run_path(app, {"messages": ["hi"]}, cfg)
    assert "invoke(None, config)" in info.value.__notes__[-1]
    (run,) = app.runs(thread_id="t")
    fail[0] = False
    assert _contents(run_path(app, None, cfg)) == ["hi", "echo hi"]
    (after,) = app.runs(thread_id="t")
    assert after.run_id == run.run_id and after.status is RunStatus.COMPLETED


def test_get_state_and_history(checkpointer: Checkpointer) -> None:
    def a(state: S) -> dict[str, Any]:
        return {"x": 1}

    def b(state: S) -> dict[str, Any]:
        return {"x": 2}

    g = StateGraph(S)
    g.add_node("a", a)
    g.add_node("b", b)
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    app = g.compile(checkpointer=checkpointer)
    cfg = {"thread_id": "t"}

    empty = app.get_state(cfg)
    assert (
        empty.next == () and empty.run_id is None and empty.values == {"hits": [], "messages": []}
    )
    assert list(app.get_state_history(cfg)) == []

    app.invoke({"x": 0, "messages": ["m"]}, cfg)
    app.invoke({"x": 0}, cfg)
    history = list(app.get_state_history(cfg))
    # newest first; each run's input shows as its own checkpoint, as in LangGraph
    assert [s.next for s in history] == [(), ("b",), ("a",), ("__start__",)] * 2
    # LangGraph's numbering and metadata: the input checkpoint is step -1
    assert [s.metadata["step"] for s in history] == [2, 1, 0, -1] * 2
    assert [s.metadata["source"] for s in history] == ["loop", "loop", "loop", "input"] * 2
    assert history[3].metadata == {"source": "input", "step": -1, "parents": {}}
    assert [s.values.get("x") for s in history] == [2, 1, 0, 2, 2, 1, 0, None]
    for newer, older in itertools.pairwise(history):
        assert newer.parent_config == older.config
    assert history[-1].parent_config is None
    runs = [r.run_id for r in app.runs(thread_id="t")]
    assert [s.run_id for s in history] == [runs[0]] * 4 + [runs[1]] * 4
    assert app.get_state(cfg) == history[0]
    # one checkpoint by id (top level or in configurable), and one run's history
    middle = app.get_state({**cfg, "checkpoint_id": history[5].config["checkpoint_id"]})
    assert middle == history[5] and middle.values["messages"][0]["content"] == "m"
    assert app.get_state(history[5].config) == middle
    assert app.get_state(history[3].config) == history[3]
    assert list(app.get_state_history({**cfg, "run_id": runs[1]})) == history[4:]
    assert list(app.get_state_history(cfg, limit=2)) == history[:2]
    assert list(app.get_state_history(cfg, before=history[5].config)) == history[6:]
    assert list(app.get_state_history(cfg, filter={"step": 1})) == [history[1], history[5]]
    with pytest.raises(RunNotFoundError):
        app.get_state({**cfg, "checkpoint_id": "cp_nope"})
    with pytest.raises(RunNotFoundError):
        app.get_run("run_nope")


def test_recursion_limit(checkpointer: Checkpointer, run_path: RunPath) -> None:
    calls: list[str] = []

    def spin(state: S) -> dict[str, Any]:
        calls.append("spin")
        return {"hits": ["spin"]}

    g = StateGraph(S)
    g.add_node("spin", spin)
    g.add_edge(START, "spin")
    g.add_edge("spin", "spin")
    app = g.compile(checkpointer=checkpointer)
    with pytest.raises(RecursionLimitError, match=r"recursion_limit=5 after 5 steps"):
        run_path(app, {}, {"thread_id": "t", "recursion_limit": 5})
    assert len(calls) == 4  # LangGraph's count: the input step is one of the 5
    assert _status(app, "t") is RunStatus.FAILED
    for bad in (0, -1, "5", True):
        with pytest.raises(ConfigError, match="recursion_limit must be a positive integer"):
            run_path(app, {}, {"thread_id": "u", "recursion_limit": bad})


# -- guarantee 8: versioned writes -------------------------------------------------------------


def _intrude(store: Checkpointer, thread_id: str) -> str:
    """Commit a checkpoint on ``thread_id`` at its current version, as another writer."""

    async def go() -> str:
        thread = await store.get_thread(thread_id)
        assert thread is not None
        cp = CheckpointRecord(
            checkpoint_id="cp_intruder",
            thread_id=thread_id,
            run_id="run_intruder",
            step=99,
            version=thread.version + 1,
            parent_checkpoint_id=thread.head_checkpoint_id,
            values={"x": -1},
            logs={"messages": 0, "hits": 0},
            next=(),
        )
        await store.commit(StepCommit(thread_id, thread.version, cp))
        return cp.checkpoint_id

    return asyncio.run(go())


def test_stale_writer_gets_stale_state_error_and_writes_nothing(
    checkpointer: Checkpointer, run_path: RunPath, tmp_path: Path
) -> None:
    """A node commits behind the driver's back (through a SECOND store instance on the
    same SQLite file; for memory, the same instance): the driver's CAS then loses."""
    if isinstance(checkpointer, SqliteCheckpointer):
        intruder: Checkpointer = SqliteCheckpointer(checkpointer.path)
    else:
        intruder = checkpointer
    calls: list[str] = []

    def a(state: S) -> dict[str, Any]:
        calls.append("a")
        _intrude(intruder, "t")
        return {"x": 1, "messages": ["from a"]}

    def b(state: S) -> dict[str, Any]:
        calls.append("b")
        return {"x": 2}

    g = StateGraph(S)
    g.add_node("a", a)
    g.add_node("b", b)
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    app = g.compile(checkpointer=checkpointer)
    try:
        with pytest.raises(StaleStateError):
            run_path(app, {"x": 0}, {"thread_id": "t"})
    finally:
        if intruder is not checkpointer:
            asyncio.run(intruder.aclose())
    assert calls == ["a"]
    history = list(app.get_state_history({"thread_id": "t"}))
    assert history[0].config["checkpoint_id"] == "cp_intruder"
    # the input checkpoint (shown twice, as LangGraph does) + the intruder's; the stale
    # step wrote nothing
    assert len(history) == 3
    head = app.get_state({"thread_id": "t"})
    assert head.values["x"] == -1 and head.values["messages"] == []


async def test_two_stores_on_one_sqlite_file_race_on_the_same_version(tmp_path: Path) -> None:
    path = tmp_path / "race.db"
    one, two = SqliteCheckpointer(path), SqliteCheckpointer(path)
    try:
        await one.setup()
        await two.setup()

        def cp(cid: str, version: int, parent: str | None) -> CheckpointRecord:
            return CheckpointRecord(cid, "t", "run_1", 0, version, parent, {"who": cid}, {}, ())

        await one.commit(StepCommit("t", 0, cp("cp_base", 1, None)))
        await one.commit(StepCommit("t", 1, cp("cp_one", 2, "cp_base")))
        with pytest.raises(StaleStateError):
            await two.commit(StepCommit("t", 1, cp("cp_two", 2, "cp_base")))
        thread = await two.get_thread("t")
        assert thread is not None and thread.head_checkpoint_id == "cp_one"
        assert thread.version == 2
        assert await two.get_checkpoint("t", "cp_two") is None
    finally:
        await one.aclose()
        await two.aclose()


# -- guarantee 1: node persisted first --------------------------------------------------------


def test_crash_before_checkpoint_reruns_the_node_from_the_top(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    calls: list[str] = []

    def a(state: S) -> dict[str, Any]:
        calls.append("a")
        return {"hits": ["a"]}

    def b(state: S) -> dict[str, Any]:
        calls.append("b:start")
        out = {"hits": ["b"]}
        calls.append("b:end")
        return out

    def c(state: S) -> dict[str, Any]:
        calls.append("c")
        return {"hits": ["c"]}

    g = StateGraph(S)
    for name, fn in (("a", a), ("b", b), ("c", c)):
        g.add_node(name, fn)
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_edge("b", "c")
    app = g.compile(checkpointer=checkpointer)
    cfg = {"thread_id": "t"}

    # nth=2: the second checkpoint commit (after b) never happens
    with pytest.raises(_CrashSignal):
        run_path(app, {"hits": []}, {**cfg, "fault_plan": FaultPlan("before_checkpoint", nth=2)})
    assert calls == ["a", "b:start", "b:end"]
    head = app.get_state(cfg)
    assert head.next == ("b",)
    assert head.values["hits"] == ["a"]
    assert _status(app, "t") is RunStatus.RUNNING  # crashed: still running, resumable

    out = run_path(app, None, cfg)
    assert calls == ["a", "b:start", "b:end", "b:start", "b:end", "c"]
    assert out["hits"] == ["a", "b", "c"]
    assert _status(app, "t") is RunStatus.COMPLETED


# -- guarantee 10: versions are checked before resume ------------------------------------------


def test_resume_across_a_change_the_run_stands_on_is_refused(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    app = _chat(checkpointer, [True])
    cfg = {"thread_id": "t"}
    with pytest.raises(RuntimeError, match="bot failed"):
        run_path(app, {"messages": ["hi"]}, cfg)
    other = _chat(checkpointer, [False], version="2", extra_node=True)
    with pytest.raises(IncompatibleVersionError, match=r"'bot'.*gained edges") as info:
        run_path(other, None, cfg)
    message = str(info.value)
    assert "migrations=" in message and "previous_versions=" in message
    assert "review it manually" in message
    assert _status(app, "t") is RunStatus.FAILED  # nothing was changed by the refusal
    assert _contents(run_path(_chat(checkpointer, [False]), None, cfg)) == ["hi", "echo hi"]


def test_a_version_bump_with_the_same_shape_continues(checkpointer: Checkpointer) -> None:
    fail = [True]

    def bot(state: Msgs) -> None:
        if fail[0]:
            raise RuntimeError("down")

    def build(version: int, schema_version: int = 1) -> CompiledGraph:
        g = StateGraph(Msgs, state_schema_version=schema_version)
        g.add_node("bot", bot)
        g.add_edge(START, "bot")
        return g.compile(checkpointer=checkpointer, version=version)

    with pytest.raises(RuntimeError, match="down"):
        build(1).invoke({"messages": ["x"]}, {"thread_id": "t"})
    fail[0] = False
    with pytest.raises(IncompatibleVersionError, match="state_schema_version 1 != 2"):
        build(3, schema_version=2).invoke(None, {"thread_id": "t"})
    build(3).invoke(None, {"thread_id": "t"})  # a compatible deploy
    assert _status(build(3), "t") is RunStatus.COMPLETED


# -- the sync facade ---------------------------------------------------------------------


async def test_sync_api_works_inside_a_running_loop() -> None:
    # A Jupyter cell or an async handler: the call runs on the portal loop and blocks
    # this loop meanwhile; nothing it awaits needs this loop.
    app = _chat(InMemoryCheckpointer())
    cfg = {"thread_id": "t"}
    assert _contents(app.invoke({"messages": ["hi"]}, cfg)) == ["hi", "echo hi"]
    chunks = list(app.stream({"messages": ["again"]}, cfg, stream_mode="updates"))
    assert chunks[-1] == {"bot": {"messages": [("assistant", "echo again")]}}
    assert _contents(dict(app.get_state(cfg).values))[-1] == "echo again"
    assert _contents(_chat(None).invoke({"messages": ["x"]})) == ["x", "echo x"]
    # and the async API still works on this loop, on the same store
    out = await app.ainvoke({"messages": ["async"]}, cfg)
    assert _contents(out)[-1] == "echo async"
    assert len(await app.aruns(thread_id="t")) == 3


def test_sync_api_from_a_node_on_the_portal_loop_is_refused() -> None:
    inner = _chat(None)

    async def calls_invoke(state: Msgs) -> dict[str, Any]:
        inner.invoke({"messages": ["nested"]})  # would wait for its own loop forever
        return {}

    def calls_invoke_from_a_thread(state: Msgs) -> dict[str, Any]:
        nested = inner.invoke({"messages": ["nested"]})  # a worker thread: allowed
        return {"messages": [("assistant", _contents(nested)[-1])]}

    g = StateGraph(Msgs)
    g.add_node("async_node", calls_invoke)
    g.add_edge(START, "async_node")
    app = g.compile(checkpointer=InMemoryCheckpointer())
    with pytest.raises(ConfigError, match=r"would wait for itself.*await ainvoke"):
        app.invoke({"messages": ["hi"]}, {"thread_id": "t"})
    assert app.runs(thread_id="t")[0].status == "failed"  # resumable once the node is fixed

    g2 = StateGraph(Msgs)
    g2.add_node("sync_node", calls_invoke_from_a_thread)
    g2.add_edge(START, "sync_node")
    out = g2.compile().invoke({"messages": ["hi"]})
    assert _contents(out) == ["hi", "echo nested"]


def test_graph_without_checkpointer_keeps_nothing(run_path: RunPath) -> None:
    app = _chat(None)
    assert _contents(run_path(app, {"messages": ["a"]}, None)) == ["a", "echo a"]
    assert _contents(run_path(app, {"messages": ["b"]}, {"thread_id": "t"})) == ["b", "echo b"]
    assert _contents(run_path(app, {"messages": ["c"]}, {"thread_id": "t"})) == ["c", "echo c"]
    with pytest.raises(ConfigError, match="compiled without a checkpointer"):
        app.get_state({"thread_id": "t"})


def test_bad_config_values_are_config_errors(run_path: RunPath) -> None:
    app = _chat(InMemoryCheckpointer())
    with pytest.raises(ConfigError, match="config must be a dict"):
        run_path(app, {"messages": ["a"]}, "t1")
    with pytest.raises(ConfigError, match="thread_id must be a string"):
        run_path(app, {"messages": ["a"]}, {"thread_id": ["t"]})
    with pytest.raises(ConfigError, match=r"Command.*as input is not supported"):
        run_path(app, Command(update={"messages": ["a"]}), {"thread_id": "t"})


# -- streaming ---------------------------------------------------------------------------


@tool(dedup="test double: changes nothing")
def _lookup(q: str) -> dict[str, Any]:
    """Look something up."""
    return {"answer": q.upper()}


def _agent_graph(checkpointer: Checkpointer) -> CompiledGraph:
    def agent(state: Msgs) -> dict[str, Any]:
        last = state["messages"][-1]
        if last["role"] == "tool":
            return {"messages": [("assistant", f"done: {last['content']}")]}
        call = {"id": "call_1", "name": "_lookup", "args": {"q": last["content"]}}
        return {"messages": [{"role": "assistant", "content": "", "tool_calls": [call]}]}

    def route(state: Msgs) -> str:
        return "tools" if state["messages"][-1].get("tool_calls") else END

    g = StateGraph(Msgs)
    g.add_node("agent", agent)
    g.add_node("tools", ToolNode([_lookup]))
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", route, ["tools", END])
    g.add_edge("tools", "agent")
    return g.compile(checkpointer=checkpointer)


def test_stream_modes_values_updates_events(checkpointer: Checkpointer) -> None:
    app = _agent_graph(checkpointer)
    values = list(app.stream({"messages": ["hi"]}, {"thread_id": "v"}, stream_mode="values"))
    assert [len(v["messages"]) for v in values] == [1, 2, 3, 4]
    assert values[-1]["messages"][-1]["content"] == 'done: {"answer":"HI"}'

    updates = list(app.stream({"messages": ["hi"]}, {"thread_id": "u"}))  # LangGraph's default
    assert [next(iter(u)) for u in updates] == ["agent", "tools", "agent"]  # no __start__ chunk
    assert updates[1]["tools"]["messages"][0]["role"] == "tool"

    events = list(app.stream({"messages": ["hi"]}, {"thread_id": "e"}, stream_mode="events"))
    kinds = [(e["event"], e["node"]) for e in events]
    assert kinds == [
        ("node_start", "agent"),
        ("node_end", "agent"),
        ("node_start", "tools"),
        ("tool_start", "tools"),
        ("effect_intent", "tools"),  # the ledger: intent recorded before the call
        ("effect_result", "tools"),  # and its result (folded into the step's commit)
        ("tool_end", "tools"),
        ("node_end", "tools"),
        ("node_start", "agent"),
        ("node_end", "agent"),
    ]
    tool_start = events[3]
    assert tool_start["tool"] == "_lookup" and tool_start["args"] == {"q": "hi"}
    assert events[6]["status"] == "success"
    assert events[5]["status"] == "completed" and events[5]["folded"] is True
    assert all(e["status"] == "ok" for e in events if e["event"] == "node_end")


async def test_astream_list_of_modes_yields_mode_payload_tuples(
    checkpointer: Checkpointer,
) -> None:
    app = _agent_graph(checkpointer)
    items = [
        item
        async for item in app.astream(
            {"messages": ["hi"]}, {"thread_id": "t"}, stream_mode=["values", "events"]
        )
    ]
    assert all(isinstance(i, tuple) and len(i) == 2 for i in items)
    modes = [mode for mode, _ in items]
    assert set(modes) == {"values", "events"}
    assert modes.count("values") == 4
    # a step's values come after its events (emitted only after its commit)
    assert modes[-1] == "values" and items[-2][1]["event"] == "node_end"
    final = await app.ainvoke({"messages": ["again"]}, {"thread_id": "t"})
    assert _contents(final)[-1] == 'done: {"answer":"AGAIN"}'
    await checkpointer.aclose()


def test_unknown_stream_mode_is_a_config_error() -> None:
    app = _chat(InMemoryCheckpointer())
    with pytest.raises(ConfigError, match="stream_mode must be among"):
        list(app.stream({"messages": ["x"]}, {"thread_id": "t"}, stream_mode="tokens"))
    with pytest.raises(ConfigError, match="stream_mode must be among"):
        list(app.stream({"messages": ["x"]}, {"thread_id": "t"}, stream_mode=[]))


def test_stream_consumer_leaving_early_leaves_a_resumable_run(checkpointer: Checkpointer) -> None:
    """Closing a stream cancels the run mid-node; it stays unfinished and continues later."""
    gate, started = threading.Event(), threading.Event()
    calls: list[str] = []

    def slow(state: Msgs) -> dict[str, Any]:
        calls.append("slow")
        started.set()
        gate.wait(30)
        return {"messages": [("assistant", "slow done")]}

    def fast(state: Msgs) -> dict[str, Any]:
        calls.append("fast")
        return {"messages": [("assistant", "fast done")]}

    g = StateGraph(Msgs)
    g.add_node("slow", slow)
    g.add_node("fast", fast)
    g.add_edge(START, "slow")
    g.add_edge("slow", "fast")
    app = g.compile(checkpointer=checkpointer)
    cfg = {"thread_id": "t"}
    stream = app.stream({"messages": ["hi"]}, cfg, stream_mode="values")
    try:
        first = next(iter(stream))  # the input checkpoint
        assert _contents(first) == ["hi"]
        assert started.wait(30)  # `slow` runs and is blocked on the gate
        stream.close()  # type: ignore[attr-defined]
    finally:
        gate.set()
    assert _status(app, "t") is RunStatus.RUNNING
    assert app.get_state(cfg).next == ("slow",)
    out = app.invoke(None, cfg)
    assert _contents(out) == ["hi", "slow done", "fast done"]
    assert calls == ["slow", "slow", "fast"]
    assert _status(app, "t") is RunStatus.COMPLETED


# -- storage stays O(1) per step ---------------------------------------------------------


def _grow(path: Path, steps: int) -> list[tuple[int, int, str]]:
    def talk(state: Msgs) -> dict[str, Any]:
        return {"messages": [("assistant", f"message number {len(state['messages'])}")]}

    g = StateGraph(Msgs)
    g.add_node("talk", talk)
    g.add_edge(START, "talk")
    g.add_conditional_edges("talk", lambda s: "talk" if len(s["messages"]) < steps else END)
    store = SqliteCheckpointer(path)
    app = g.compile(checkpointer=store)
    cfg = {"thread_id": "t", "recursion_limit": steps + 5}
    out = app.invoke({"messages": ["start"]}, cfg)
    assert len(out["messages"]) == steps
    out = app.invoke({"messages": ["more"]}, {**cfg, "recursion_limit": 2})
    assert len(out["messages"]) == steps + 2
    asyncio.run(store.aclose())
    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            "SELECT step, channel_values, logs FROM oncegraph_checkpoints WHERE thread_id = 't'"
        ).fetchall()
        (log_rows,) = conn.execute(
            "SELECT count(*) FROM oncegraph_log WHERE thread_id = 't' AND channel = 'messages'"
        ).fetchone()
    conn.close()
    assert log_rows == steps + 2  # each message stored once
    return [(r[0], len(r[1]), r[2]) for r in rows]


def test_checkpoint_rows_do_not_grow_with_the_conversation(tmp_path: Path) -> None:
    short = _grow(tmp_path / "short.db", 4)
    long = _grow(tmp_path / "long.db", 40)
    assert len(long) == 40 + 2  # one checkpoint per step plus one per input
    # channel_values hold no message history: every row is the same size, for any N
    assert {size for _, size, _ in short} == {size for _, size, _ in long} == {2}  # "{}"
    counts = sorted(json.loads(logs)["messages"] for _, _, logs in long)
    assert counts == list(range(1, 43))  # a count per checkpoint, not a copy of the log
    assert max(len(logs) for _, _, logs in long) < 32


def test_app_is_a_context_manager_that_closes_its_store(tmp_path: Path) -> None:
    store = SqliteCheckpointer(tmp_path / "ctx.db")
    with _chat(store) as app:
        app.invoke({"messages": ["hi"]}, {"thread_id": "t"})
        assert store._conn is not None
    assert store._conn is None  # closed

    async def main() -> None:
        async with _chat(store) as app:
            assert store._conn is not None  # set up on entry
            await app.ainvoke({"messages": ["again"]}, {"thread_id": "t2"})
        assert store._conn is None

    asyncio.run(main())
