"""Overwrite, a node's list of updates, async routers and the node cache, on every store
(memory, SQLite, PostgreSQL) and every run path (invoke, ainvoke, stream, astream)."""

from __future__ import annotations

import operator
import uuid
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from tests.conftest import RunPath

from oncegraph import END, START, Command, Send, StateGraph, effect
from oncegraph.cache import CachePolicy, InMemoryCache, SqliteCache
from oncegraph.errors import InvalidUpdateError
from oncegraph.storage.protocols import Checkpointer
from oncegraph.types import Overwrite


class Items(TypedDict):
    items: Annotated[list[str], operator.add]
    total: Annotated[int, operator.add]


def _cfg() -> dict[str, Any]:
    return {"configurable": {"thread_id": uuid.uuid4().hex}}


def _fanout(b_write: Any, c_write: Any) -> StateGraph:
    g = StateGraph(Items)
    g.add_node("a", lambda s: {"items": ["a"], "total": 1})
    g.add_node("b", lambda s: b_write)
    g.add_node("c", lambda s: c_write)
    g.add_node("d", lambda s: {"items": ["d"], "total": 1})
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_edge("a", "c")
    g.add_edge(["b", "c"], "d")
    return g


# -- Overwrite -------------------------------------------------------------------------


def test_overwrite_replaces_a_reduced_list_and_number_and_is_stored(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    g = _fanout(
        {"items": Overwrite(["b"]), "total": {"__overwrite__": 10}},
        {"items": ["c"], "total": 5},
    )
    app = g.compile(checkpointer=checkpointer)
    cfg = _cfg()
    out = run_path(app, {"items": ["start"], "total": 0}, cfg)
    assert out["items"] == ["b", "d"]  # c's write in the same step was dropped
    assert out["total"] == 11
    # read back from the store by a fresh app: the log's reset entry folds the same way
    fresh = g.compile(checkpointer=checkpointer)
    assert fresh.get_state(cfg).values["items"] == ["b", "d"]
    history = [s.values.get("items") for s in fresh.get_state_history(cfg)]
    assert ["start", "a"] in history  # the snapshot before the overwrite keeps its value


def test_two_overwrites_of_one_field_in_a_step_fail_the_run(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    app = _fanout({"items": Overwrite(["b"])}, {"items": Overwrite(["c"])}).compile(
        checkpointer=checkpointer
    )
    with pytest.raises(InvalidUpdateError, match="only one Overwrite value per super-step"):
        run_path(app, {"items": [], "total": 0}, _cfg())


# -- a node's list of updates ----------------------------------------------------------


def test_a_list_of_commands_applies_each_update_in_order_and_joins_gotos(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    class S(TypedDict):
        foo: Annotated[str, operator.add]

    g = StateGraph(S)
    g.add_node("a", lambda s: [Command(update={"foo": "1"}, goto="b"), {"foo": "2"}])
    g.add_node("b", lambda s: {"foo": "b"})
    g.add_edge(START, "a")
    app = g.compile(checkpointer=checkpointer)
    assert run_path(app, {"foo": ""}, _cfg())["foo"] == "12b"
    chunks = list(g.compile().stream({"foo": ""}, stream_mode="updates"))
    assert chunks == [{"a": [{"foo": "1"}, {"foo": "2"}]}, {"b": {"foo": "b"}}]


# -- async routers ---------------------------------------------------------------------


def test_async_routers_route_from_start_and_from_nodes(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    async def fan(state: Items) -> list[Send]:
        return [Send("a", {"items": ["x"], "total": 0}), Send("a", {"items": ["y"], "total": 0})]

    async def again(state: Items, config: dict[str, Any]) -> str:
        assert config["configurable"]["thread_id"]
        return END if state["total"] >= 4 else "b"

    g = StateGraph(Items)
    g.add_node("a", lambda s: {"total": 1})
    g.add_node("b", lambda s: {"items": ["b"], "total": 1})
    g.add_conditional_edges(START, fan)
    g.add_edge("a", "b")
    g.add_conditional_edges("b", again)
    app = g.compile(checkpointer=checkpointer)
    out = run_path(app, {"items": [], "total": 0}, _cfg())
    assert out["total"] == 4 and out["items"] == ["b", "b"]


def test_an_async_router_that_raises_fails_the_run_with_its_error(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    async def broken(state: Items) -> str:
        raise LookupError("no route")

    g = StateGraph(Items)
    g.add_node("a", lambda s: {"total": 1})
    g.add_edge(START, "a")
    g.add_conditional_edges("a", broken)
    with pytest.raises(LookupError, match="no route"):
        run_path(g.compile(checkpointer=checkpointer), {"items": [], "total": 0}, _cfg())


# -- the node cache --------------------------------------------------------------------


@pytest.fixture(params=["memory", "sqlite"])
def cache(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    return InMemoryCache() if request.param == "memory" else SqliteCache(str(tmp_path / "c.db"))


def test_a_cached_node_runs_once_per_input_until_the_cache_is_cleared(
    checkpointer: Checkpointer, run_path: RunPath, cache: Any
) -> None:
    calls: list[int] = []

    def slow(state: Items) -> dict[str, Any]:
        calls.append(state["total"])
        return {"items": ["slow"], "total": 1}

    g = StateGraph(Items)
    g.add_node("slow", slow, cache_policy=CachePolicy())
    g.add_edge(START, "slow")
    app = g.compile(checkpointer=checkpointer, cache=cache)
    for _ in range(2):
        assert run_path(app, {"items": [], "total": 0}, _cfg())["items"] == ["slow"]
    assert calls == [0]
    assert run_path(app, {"items": [], "total": 7}, _cfg())["total"] == 8  # another key
    assert calls == [0, 7]
    chunks = list(app.stream({"items": [], "total": 0}, _cfg(), stream_mode="updates"))
    assert chunks == [{"slow": {"items": ["slow"], "total": 1}, "__metadata__": {"cached": True}}]
    app.clear_cache()
    run_path(app, {"items": [], "total": 0}, _cfg())
    assert calls == [0, 7, 0]


def test_a_node_that_performed_an_effect_is_never_served_from_the_cache(
    checkpointer: Checkpointer, run_path: RunPath
) -> None:
    sent: list[str] = []

    def notify(state: Items) -> dict[str, Any]:
        effect(lambda: sent.append("sent"), effect_type="notify", effect_class="write")
        return {"total": 1}

    g = StateGraph(Items)
    g.add_node("notify", notify, cache_policy=CachePolicy())
    g.add_edge(START, "notify")
    app = g.compile(checkpointer=checkpointer, cache=InMemoryCache())
    run_path(app, {"items": [], "total": 0}, _cfg())
    run_path(app, {"items": [], "total": 0}, _cfg())
    assert sent == ["sent", "sent"]  # each run's effect went through the ledger


def test_cache_entries_live_for_their_ttl_and_a_sqlite_cache_outlives_its_object(
    tmp_path: Path,
) -> None:
    calls: list[int] = []

    def node(state: Items) -> dict[str, Any]:
        calls.append(1)
        return {"total": 1}

    def app_with(cache: Any, ttl: float | None) -> Any:
        g = StateGraph(Items)
        g.add_node("n", node, cache_policy=CachePolicy(ttl=ttl))
        g.add_edge(START, "n")
        return g.compile(cache=cache)

    expired = app_with(InMemoryCache(), 0)
    expired.invoke({"items": [], "total": 0})
    expired.invoke({"items": [], "total": 0})
    assert len(calls) == 2  # a ttl of 0 has run out at once
    path = str(tmp_path / "cache.db")
    app_with(SqliteCache(path), None).invoke({"items": [], "total": 0})
    app_with(SqliteCache(path), None).invoke({"items": [], "total": 0})
    assert len(calls) == 3


def test_a_plain_task_is_cached_by_its_arguments_and_still_recorded(
    checkpointer: Checkpointer, cache: Any
) -> None:
    from oncegraph.func import entrypoint, task
    from oncegraph.types import interrupt

    calls: list[int] = []

    @task(cache_policy=CachePolicy())
    def double(x: int) -> int:
        calls.append(x)
        return 2 * x

    @entrypoint(checkpointer=checkpointer, cache=cache)
    def flow(inp: dict[str, Any]) -> dict[str, Any]:
        first = double(inp["x"]).result()
        answer = interrupt("ok?")
        return {"out": [first, double(inp["x"]).result(), answer]}

    for _ in range(2):  # a second thread finds the first one's results in the cache
        cfg = _cfg()
        flow.invoke({"x": 3}, cfg)
        assert flow.invoke(Command(resume="yes"), cfg) == {"out": [6, 6, "yes"]}
    assert calls == [3]
    double.clear_cache(cache)
    cfg = _cfg()
    flow.invoke({"x": 3}, cfg)
    assert calls == [3, 3]


def test_a_steps_updates_stream_as_each_task_finishes(checkpointer: Checkpointer) -> None:
    import threading

    released = threading.Event()

    def slow(state: Items) -> dict[str, Any]:
        assert released.wait(10)  # let go once "fast" finished and was shown
        return {"items": ["slow"]}

    g = StateGraph(Items)
    g.add_node("slow", slow)
    g.add_node("fast", lambda s: {"items": ["fast"]})
    g.add_edge(START, "slow")
    g.add_edge(START, "fast")
    app = g.compile(checkpointer=checkpointer)
    seen: list[str] = []
    for chunk in app.stream({"items": [], "total": 0}, _cfg(), stream_mode="updates"):
        seen.extend(chunk)
        released.set()
    assert seen == ["fast", "slow"]  # graph order would be slow, fast
