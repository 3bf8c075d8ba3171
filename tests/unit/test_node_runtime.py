"""Node parameter injection (``config``, ``writer``, ``runtime``, ``store``) and
``oncegraph.runtime``'s ``Runtime`` / ``get_runtime``, with ``invoke(..., context=...)``."""

from __future__ import annotations

import dataclasses
from typing import Any, TypedDict

import pydantic

from oncegraph import START, StateGraph
from oncegraph.runtime import ExecutionInfo, Runtime, get_runtime
from oncegraph.types import RetryPolicy, StreamWriter


class S(TypedDict):
    out: str


@dataclasses.dataclass
class Ctx:
    user: str


def test_runtime_carries_the_context_a_writer_and_where_the_node_runs() -> None:
    def node(state: S, runtime: Runtime[Ctx]) -> dict[str, Any]:
        runtime.stream_writer({"custom": runtime.context.user})
        info = runtime.execution_info
        assert isinstance(info, ExecutionInfo)
        assert isinstance(info.node_first_attempt_time, float)
        assert info.run_id is not None and info.run_id.startswith("run_")
        assert get_runtime(Ctx).context is runtime.context
        return {"out": runtime.context.user}

    g = StateGraph(S, context_schema=Ctx)
    g.add_node("n", node)
    g.add_edge(START, "n")
    app = g.compile()
    assert app.invoke({"out": ""}, context=Ctx("ada")) == {"out": "ada"}
    chunks = list(app.stream({"out": ""}, context={"user": "bob"}, stream_mode="custom"))
    assert chunks == [{"custom": "bob"}]  # a dict is coerced to the context schema


async def test_the_async_paths_pass_the_context_too() -> None:
    class PCtx(pydantic.BaseModel):
        user: str

    async def node(state: S, runtime: Runtime[PCtx]) -> dict[str, Any]:
        return {"out": runtime.context.user}

    g = StateGraph(S, context_schema=PCtx)
    g.add_node("n", node)
    g.add_edge(START, "n")
    app = g.compile()
    assert await app.ainvoke({"out": ""}, context={"user": "ada"}) == {"out": "ada"}
    chunks = [c async for c in app.astream({"out": ""}, context=PCtx(user="cy"))]
    assert chunks == [{"n": {"out": "cy"}}]


def test_a_subgraph_sees_its_parents_context() -> None:
    def deep(state: S, runtime: Runtime[Ctx]) -> dict[str, Any]:
        return {"out": f"deep:{runtime.context.user}"}

    inner = StateGraph(S)
    inner.add_node("deep", deep)
    inner.add_edge(START, "deep")
    outer = StateGraph(S, context_schema=Ctx)
    outer.add_node("sub", inner.compile())
    outer.add_edge(START, "sub")
    assert outer.compile().invoke({"out": ""}, context=Ctx("ada")) == {"out": "deep:ada"}


def test_the_attempt_number_counts_retries() -> None:
    attempts: list[int] = []

    def flaky(state: S, runtime: Runtime[None]) -> dict[str, Any]:
        assert runtime.execution_info is not None
        attempts.append(runtime.execution_info.node_attempt)
        if len(attempts) < 3:
            raise ValueError("again")
        return {"out": "ok"}

    g = StateGraph(S)
    g.add_node(
        "f",
        flaky,
        retry_policy=RetryPolicy(max_attempts=3, initial_interval=0.0, retry_on=ValueError),
    )
    g.add_edge(START, "f")
    assert g.compile().invoke({"out": ""}) == {"out": "ok"}
    assert attempts == [1, 2, 3]


def test_writer_config_and_store_parameters_are_injected_by_name_or_type() -> None:
    got: dict[str, Any] = {}

    def node(state: S, writer: StreamWriter, config: dict[str, Any], store: Any) -> dict[str, Any]:
        writer("hello")
        got["thread"] = config["configurable"]["thread_id"]
        got["store"] = store
        return {"out": "done"}

    def positional(state: S, cfg: dict[str, Any]) -> dict[str, Any]:
        return {"out": cfg["configurable"]["who"]}  # a second parameter still gets config

    g = StateGraph(S)
    g.add_node("n", node)
    g.add_node("p", positional)
    g.add_edge(START, "n")
    g.add_edge("n", "p")
    cfg = {"configurable": {"who": "me"}}
    chunks = list(g.compile().stream({"out": ""}, cfg, stream_mode=["custom", "values"]))
    assert ("custom", "hello") in chunks
    assert chunks[-1] == ("values", {"out": "me"})
    assert got["store"] is None and isinstance(got["thread"], str)


def test_runtime_merge_and_override() -> None:
    base = Runtime(context=Ctx("a"))
    other = Runtime(context=None, previous=1)
    merged = base.merge(other)
    assert merged.context == Ctx("a") and merged.previous == 1
    assert base.override(context=Ctx("b")).context == Ctx("b")
