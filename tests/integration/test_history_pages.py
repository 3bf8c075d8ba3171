"""History is paged: walking a 1,000-step thread of 1 KB messages holds one page and one
copy of the log, not 500,500 message objects (issue 15: it used to take 915 MiB), and
pages join without gaps or repeats on every backend."""

from __future__ import annotations

import gc
import itertools
import operator
import tracemalloc
from typing import Annotated, Any

import pytest
from typing_extensions import TypedDict

from oncegraph import END, START, StateGraph, add_messages
from oncegraph.app import CompiledGraph
from oncegraph.runs import reading as reading_module
from oncegraph.storage.protocols import Checkpointer

STEPS = 1000
BLOB = "x" * 1024


class Chat(TypedDict):
    messages: Annotated[list[Any], add_messages]
    n: int


def talker(state: Chat) -> dict[str, Any]:
    n = state["n"] + 1
    return {"n": n, "messages": [{"role": "assistant", "content": f"{n} {BLOB}"}]}


def app_on(store: Checkpointer) -> CompiledGraph:
    g = StateGraph(Chat)
    g.add_node("talk", talker)
    g.add_edge(START, "talk")
    g.add_conditional_edges("talk", lambda s: END if s["n"] >= STEPS else "talk")
    return g.compile(checkpointer=store)


@pytest.fixture
def long_thread(checkpointer: Checkpointer) -> CompiledGraph:
    app = app_on(checkpointer)
    app.invoke({"messages": [], "n": 0}, {"thread_id": "long", "recursion_limit": STEPS + 10})
    return app


def test_walking_a_1000_step_history_stays_within_a_fixed_memory_bound(
    long_thread: CompiledGraph,
) -> None:
    gc.collect()
    tracemalloc.start()
    try:
        seen = 0
        sizes = []
        for snap in long_thread.get_state_history({"thread_id": "long"}):
            seen += 1
            if seen % 250 == 0:
                sizes.append(len(snap.values["messages"]))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert seen >= STEPS, "every checkpoint is walked"
    assert sizes == sorted(sizes, reverse=True) and sizes[0] > sizes[-1], "newest first"
    # One copy of the log (1,000 x 1 KB) plus a page of snapshots sharing its strings:
    # a few MiB. Rebuilding the log per snapshot needs hundreds of MiB.
    assert peak < 64 * 2**20, f"peak {peak / 2**20:.1f} MiB while walking the history"


def test_pages_join_without_gaps_or_repeats(
    long_thread: CompiledGraph, monkeypatch: pytest.MonkeyPatch
) -> None:
    everything = [
        s.config["checkpoint_id"] for s in long_thread.get_state_history({"thread_id": "long"})
    ]
    monkeypatch.setattr(reading_module, "HISTORY_PAGE", 7)
    # HISTORY_PAGE is the default page size of the state reads: read it per call
    paged = [
        s.config["checkpoint_id"] for s in long_thread.get_state_history({"thread_id": "long"})
    ]
    assert paged == everything and len(set(paged)) == len(paged)
    first = list(itertools.islice(long_thread.get_state_history({"thread_id": "long"}), 3))
    assert [s.config["checkpoint_id"] for s in first] == everything[:3]
    limited = list(long_thread.get_state_history({"thread_id": "long"}, limit=120))
    assert [s.config["checkpoint_id"] for s in limited] == everything[:120]
    older = list(
        long_thread.get_state_history({"thread_id": "long"}, before=limited[-1].config, limit=5)
    )
    assert [s.config["checkpoint_id"] for s in older] == everything[120:125]


class Mixed(TypedDict):
    messages: Annotated[list[Any], add_messages]
    notes: Annotated[list[str], operator.add]
    n: int


def mixer(state: Mixed) -> dict[str, Any]:
    """A message a step; every third step rewrites the one before in place and every
    fifth removes an older one, so a later value is not its prefix plus appends."""
    n = state["n"] + 1
    messages: list[dict[str, Any]] = [{"role": "assistant", "content": f"{n}", "id": f"m{n}"}]
    if n % 3 == 0:
        messages.append({"role": "assistant", "content": f"{n - 1} again", "id": f"m{n - 1}"})
    if n % 5 == 0:
        messages.append({"role": "remove", "id": f"m{n - 3}"})
    return {"n": n, "notes": [f"note {n}"], "messages": messages}


def test_a_page_of_history_has_the_values_of_each_checkpoint_read_alone(
    checkpointer: Checkpointer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page folds each log once and extends it checkpoint by checkpoint; every snapshot
    must still equal the state read at its checkpoint on its own, across page joins and
    in-place rewrites and removals of messages."""
    g = StateGraph(Mixed)
    g.add_node("mix", mixer)
    g.add_edge(START, "mix")
    g.add_conditional_edges("mix", lambda s: END if s["n"] >= 40 else "mix")
    app = g.compile(checkpointer=checkpointer)
    app.invoke({"messages": [{"role": "user", "content": "go"}], "n": 0}, {"thread_id": "mixed"})
    app.invoke({"messages": [{"role": "user", "content": "again"}], "n": 0}, {"thread_id": "mixed"})
    monkeypatch.setattr(reading_module, "HISTORY_PAGE", 7)
    snaps = list(app.get_state_history({"thread_id": "mixed"}))
    assert len(snaps) > 80
    removed_somewhere = False
    for snap in snaps:
        alone = app.get_state(snap.config)
        assert snap.values == alone.values, snap.config
        ids = [m["id"] for m in snap.values.get("messages", [])]
        removed_somewhere |= "m1" in ids and "m3" in ids and "m2" not in ids
    assert removed_somewhere, "the thread holds a removal"
    first, second = snaps[0].values["messages"], snaps[1].values["messages"]
    assert first is not second
    first.append({"role": "user", "content": "mine"})
    assert app.get_state({"thread_id": "mixed"}).values["messages"][-1]["content"] != "mine"
