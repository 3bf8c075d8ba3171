"""``config["max_concurrency"]``: a step of many tasks runs at most N at once, and the
run's result is the same as without a limit (on every store)."""

from __future__ import annotations

import asyncio
import operator
from typing import Annotated, Any

import pytest

from oncegraph import START, Send, StateGraph
from oncegraph.errors import ConfigError
from oncegraph.storage.protocols import Checkpointer


class Counter:
    def __init__(self) -> None:
        self.now = 0
        self.most = 0

    async def __call__(self, item: Any) -> list[Any]:
        self.now += 1
        self.most = max(self.most, self.now)
        await asyncio.sleep(0.05)  # long enough for every slot to fill
        self.now -= 1
        return [item]


def fan_out_graph(counter: Counter, n: int) -> StateGraph:
    builder = StateGraph(Annotated[list, operator.add])
    builder.add_node("start", lambda state: ["s"])
    builder.add_node("work", counter)
    builder.add_edge(START, "start")
    builder.add_conditional_edges("start", lambda state: [Send("work", i) for i in range(n)])
    return builder


async def test_max_concurrency_bounds_the_tasks_of_a_step(checkpointer: Checkpointer) -> None:
    counter = Counter()
    app = fan_out_graph(counter, 30).compile(checkpointer=checkpointer)
    out = await app.ainvoke(["in"], {"thread_id": "t1", "max_concurrency": 4})
    assert out == ["in", "s", *range(30)]  # order of the sends kept
    assert counter.most == 4
    assert counter.now == 0


async def test_without_max_concurrency_every_task_runs_at_once() -> None:
    counter = Counter()
    app = fan_out_graph(counter, 30).compile()
    assert await app.ainvoke(["in"]) == ["in", "s", *range(30)]
    assert counter.most == 30


def test_max_concurrency_in_a_sync_call() -> None:
    counter = Counter()
    app = fan_out_graph(counter, 12).compile()
    assert app.invoke(["in"], {"max_concurrency": 3}) == ["in", "s", *range(12)]
    assert counter.most == 3


async def test_a_continued_run_takes_the_continuing_calls_limit(
    checkpointer: Checkpointer,
) -> None:
    counter = Counter()
    app = fan_out_graph(counter, 20).compile(checkpointer=checkpointer, interrupt_before=["work"])
    config = {"thread_id": "t2", "max_concurrency": 5}
    assert await app.ainvoke(["in"], config) == ["in", "s"]
    assert await app.ainvoke(None, config) == ["in", "s", *range(20)]
    assert counter.most == 5


@pytest.mark.parametrize("bad", [0, -1, 2.5, "4", True])
async def test_a_max_concurrency_that_is_no_positive_integer_is_refused(bad: Any) -> None:
    app = fan_out_graph(Counter(), 3).compile()
    with pytest.raises(ConfigError, match="max_concurrency must be a positive integer"):
        await app.ainvoke(["in"], {"max_concurrency": bad})
