"""LangGraph's checkpointer API on oncegraph's stores: ``get_tuple`` / ``list`` (and their
async twins) read what ``get_state_history`` shows; writing a checkpoint by hand is
refused; ``from_conn_string`` opens and closes a store; on memory, SQLite and
PostgreSQL alike."""

from __future__ import annotations

import asyncio
import operator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

from oncegraph.checkpoint.base import CheckpointTuple
from oncegraph.constants import ERROR, PULL
from oncegraph.errors import ConfigError
from oncegraph.graph import END, START, StateGraph
from oncegraph.storage.checkpointer import SqliteCheckpointer
from oncegraph.storage.protocols import Checkpointer
from oncegraph.types import RetryPolicy


class State(TypedDict):
    foo: str
    log: Annotated[list[str], operator.add]


def _two_steps(checkpointer: Checkpointer) -> Any:
    def a(state: State) -> dict[str, Any]:
        return {"foo": "a", "log": ["a"]}

    def b(state: State) -> dict[str, Any]:
        return {"foo": "b", "log": ["b"]}

    return (
        StateGraph(State)
        .add_node("a", a)
        .add_node("b", b)
        .add_edge(START, "a")
        .add_edge("a", "b")
        .add_edge("b", END)
        .compile(checkpointer=checkpointer)
    )


def test_list_shows_the_history(checkpointer: Checkpointer) -> None:
    app = _two_steps(checkpointer)
    config = {"configurable": {"thread_id": "t1"}}
    app.invoke({"foo": "in", "log": ["in"]}, config)

    history = list(app.get_state_history(config))
    tuples = list(checkpointer.list(config))  # type: ignore[attr-defined]
    assert len(tuples) == len(history) == 4
    assert all(isinstance(t, CheckpointTuple) for t in tuples)
    for snap, item in zip(history, tuples, strict=True):
        assert item.config == snap.config
        assert item.parent_config == snap.parent_config
        assert item.metadata == snap.metadata
    assert tuples[0].checkpoint["channel_values"] == {"foo": "b", "log": ["in", "a", "b"]}
    assert tuples[-1].metadata["source"] == "input"

    head = checkpointer.get_tuple(config)  # type: ignore[attr-defined]
    assert head == tuples[0]
    past = checkpointer.get_tuple(tuples[2].config)  # type: ignore[attr-defined]
    assert past == tuples[2]
    assert past.checkpoint["channel_values"] == {"foo": "in", "log": ["in"]}
    assert checkpointer.get_tuple({"configurable": {"thread_id": "none"}}) is None  # type: ignore[attr-defined]
    assert checkpointer.get(config) == head.checkpoint  # type: ignore[attr-defined]
    assert checkpointer.get(tuples[2].config) == past.checkpoint  # type: ignore[attr-defined]
    assert checkpointer.get({"configurable": {"thread_id": "none"}}) is None  # type: ignore[attr-defined]

    assert [t.metadata["step"] for t in checkpointer.list(config, limit=2)] == [2, 1]  # type: ignore[attr-defined]
    older = list(checkpointer.list(config, before=tuples[1].config))  # type: ignore[attr-defined]
    assert older == tuples[2:]
    inputs = list(checkpointer.list(config, filter={"source": "input"}))  # type: ignore[attr-defined]
    assert inputs == tuples[-1:]


def test_async_twins_read_the_same(checkpointer: Checkpointer) -> None:
    app = _two_steps(checkpointer)
    config = {"configurable": {"thread_id": "t2"}}
    app.invoke({"foo": "in", "log": []}, config)
    expected = list(checkpointer.list(config))  # type: ignore[attr-defined]

    async def read() -> tuple[Any, list[Any]]:
        head = await checkpointer.aget_tuple(config)  # type: ignore[attr-defined]
        assert await checkpointer.aget(config) == head.checkpoint  # type: ignore[attr-defined]
        return head, [t async for t in checkpointer.alist(config)]  # type: ignore[attr-defined]

    head, listed = asyncio.run(read())
    assert head == expected[0]
    assert listed == expected


def test_a_failed_step_shows_its_finished_write_and_the_error(checkpointer: Checkpointer) -> None:
    class Count(TypedDict):
        value: Annotated[int, operator.add]

    def one(state: Count) -> dict[str, Any]:
        return {"value": 2}

    def two(state: Count) -> dict[str, Any]:
        raise ConnectionError("down")

    app = (
        StateGraph(Count)
        .add_node("one", one)
        .add_node("two", two, retry_policy=RetryPolicy(max_attempts=1))
        .add_edge(START, "one")
        .add_edge(START, "two")
        .compile(checkpointer=checkpointer)
    )
    config = {"configurable": {"thread_id": "t3"}}
    with pytest.raises(ConnectionError):
        app.invoke({"value": 1}, config)

    head = checkpointer.get_tuple(config)  # type: ignore[attr-defined]
    writes = head.pending_writes
    assert len(writes) == 2
    (done,) = [w for w in writes if w[1] != ERROR]
    (failed,) = [w for w in writes if w[1] == ERROR]
    assert done[1:] == ("value", 2)
    assert "ConnectionError" in failed[2]
    assert done[0] != failed[0]
    tasks = {t.name: t for t in app.get_state(config).tasks}
    assert tasks["one"].path == (PULL, "one")
    assert tasks["one"].id == done[0]  # the same task ids as the snapshot's


def test_writing_a_checkpoint_by_hand_is_refused(checkpointer: Checkpointer) -> None:
    app = _two_steps(checkpointer)
    config = {"configurable": {"thread_id": "t4"}}
    app.invoke({"foo": "in", "log": []}, config)
    before = list(checkpointer.list(config))  # type: ignore[attr-defined]
    head = before[0]
    with pytest.raises(ConfigError, match="update_state"):
        checkpointer.put(head.config, head.checkpoint, head.metadata, {})  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="update_state"):
        checkpointer.put_writes(head.config, [("foo", "x")], "task")  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="update_state"):
        asyncio.run(checkpointer.aput(head.config, head.checkpoint, head.metadata, {}))  # type: ignore[attr-defined]
    assert list(checkpointer.list(config)) == before  # type: ignore[attr-defined]


def test_subgraph_checkpoints_are_listed_with_their_namespace(checkpointer: Checkpointer) -> None:
    class Inner(TypedDict):
        key: Annotated[str, operator.add]

    def step(state: Inner) -> dict[str, Any]:
        return {"key": "+"}

    inner = StateGraph(Inner).add_node("step", step).add_edge(START, "step").compile()
    outer = (
        StateGraph(Inner)
        .add_node("inner", inner)
        .add_edge(START, "inner")
        .compile(checkpointer=checkpointer)
    )
    config: dict[str, Any] = {"configurable": {"thread_id": "t5"}}
    outer.invoke({"key": ""}, config)

    everything = list(checkpointer.list(config))  # type: ignore[attr-defined]
    config["configurable"]["checkpoint_ns"] = ""
    root = list(checkpointer.list(config))  # type: ignore[attr-defined]
    assert len(root) == 3  # input, the input applied, after inner
    children = [t for t in everything if t.config["configurable"]["checkpoint_ns"]]
    assert len(children) == 3  # the subgraph's own: input, input applied, after step
    assert all(t.config["configurable"]["checkpoint_ns"].startswith("inner:") for t in children)
    assert len(everything) == len(root) + len(children)


def test_next_version_and_serde(checkpointer: Checkpointer) -> None:
    saver: Any = checkpointer
    assert saver.get_next_version(None, None) == 1
    assert saver.get_next_version(4, None) == 5
    kind, data = saver.serde.dumps_typed({"a": [1, 2]})
    assert saver.serde.loads_typed((kind, data)) == {"a": [1, 2]}


def test_from_conn_string_opens_and_closes(tmp_path: Path) -> None:
    path = str(tmp_path / "conn.db")
    with SqliteCheckpointer.from_conn_string(path) as saver:
        app = _two_steps(saver)
        config = {"configurable": {"thread_id": "t6"}}
        app.invoke({"foo": "in", "log": []}, config)
        assert saver.get_tuple(config).checkpoint["channel_values"]["foo"] == "b"

    async def again() -> Any:
        async with SqliteCheckpointer.from_conn_string(path) as saver:
            return await saver.aget_tuple({"configurable": {"thread_id": "t6"}})

    assert asyncio.run(again()).metadata["step"] == 2


def test_compiled_nodes_copy() -> None:
    app = _two_steps(None)  # type: ignore[arg-type]
    assert set(app.nodes) == {"a", "b"}
    renamed = app.nodes["a"].copy({"timeout": 5.0})
    assert renamed.timeout == 5.0 and renamed.name == "a"
    assert app.nodes["a"].timeout is None  # the graph's own node is unchanged


def test_what_a_tool_masks_is_masked(checkpointer: Checkpointer, tmp_path: Path) -> None:
    from oncegraph import tool
    from oncegraph.prebuilt.agent import ReactAgent
    from oncegraph.prebuilt.models.scripted import ScriptedModel

    card = "4111111111111111"

    @tool(effect="irreversible", recipient="payments", mask=["card"])
    def charge(order_id: str, card: str) -> str:
        """Charge a card for an order."""
        return f"charged card {card} for {order_id}"

    def turn(messages: list[Any], tools: Any) -> Any:
        if messages[-1]["role"] == "user":
            args = {"order_id": "7", "card": card}
            return {"content": "", "tool_calls": [{"name": "charge", "args": args}]}
        return "done"

    app = ReactAgent(model=ScriptedModel(turn), tools=[charge], name="maskshop").compile(
        checkpointer=checkpointer
    )
    config = {"configurable": {"thread_id": "t7"}}
    app.invoke({"messages": [{"role": "user", "content": "pay order 7"}]}, config)

    shown = repr(list(checkpointer.list(config)))  # type: ignore[attr-defined]
    assert "charged card" in shown  # the state is there...
    assert card not in shown  # ...but never the card
    assert card not in repr(checkpointer.get_tuple(config))  # type: ignore[attr-defined]
    assert card not in repr(list(app.get_state_history(config)))  # as the graph's own view
