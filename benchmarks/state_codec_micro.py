"""Micro-benchmark of the state codecs on the hot path (no store, no event loop).

One step's pure work: apply a node's update (a count and one chat message), encode the
state for storage (``advance``) and build the checkpoint and log rows
(``rows.checkpoint_to_params`` / ``log_params``, JSON included). A TypedDict of plain
fields (identity codecs) against one holding a dataclass and a list of ten dataclasses
with datetimes (pydantic TypeAdapters, re-encoded every step). Prints the best of 15
rounds in microseconds per step. Compare two trees with ``PYTHONPATH=<src> python
benchmarks/state_codec_micro.py``.
"""

from __future__ import annotations

import dataclasses
import datetime
import time
from typing import Annotated, Any, TypedDict

from oncegraph import START, StateGraph, add_messages
from oncegraph.runtime.engine import TaskResult, advance, empty_head
from oncegraph.storage.sql.rows import PLAIN as rows


class Plain(TypedDict, total=False):
    messages: Annotated[list[Any], add_messages]
    query: str
    count: int
    docs: list[str]
    meta: dict[str, Any]


@dataclasses.dataclass
class Item:
    sku: str
    qty: int
    when: datetime.datetime


class Typed(TypedDict, total=False):
    messages: Annotated[list[Any], add_messages]
    query: str
    count: int
    item: Item
    items: list[Item]


def spec_of(schema: Any) -> Any:
    g = StateGraph(schema)
    g.add_node("n", lambda s: None)
    g.add_edge(START, "n")
    return g.validate()


def bench(schema: Any, update: dict[str, Any], n: int = 5000) -> float:
    spec = spec_of(schema)
    head = empty_head(spec, "t")
    head, _, _ = advance(spec, head, "r", [TaskResult("n", update)], step=0, source="loop")
    samples = []
    for _ in range(15):
        t = time.perf_counter()
        for i in range(n):
            update = {"count": i, "messages": [{"role": "user", "content": "hi"}]}
            nxt, entries, _ = advance(
                spec, head, "r", [TaskResult("n", update)], step=1, source="loop"
            )
            rows.checkpoint_to_params(nxt.checkpoint)
            rows.log_params("t", entries)
        samples.append((time.perf_counter() - t) / n * 1e6)
    return min(samples)


def main() -> None:
    now = datetime.datetime(2024, 1, 1)
    plain = {"query": "q" * 50, "count": 1, "docs": ["d" * 100] * 10, "meta": {"a": [1, 2]}}
    print(f"plain TypedDict : {bench(Plain, plain):.2f} us/step")
    typed = {"query": "q", "count": 1, "item": Item("a", 1, now), "items": [Item("b", 2, now)] * 10}
    print(f"typed TypedDict : {bench(Typed, typed):.2f} us/step")


if __name__ == "__main__":
    main()
