"""Records, values and helpers the conformance suite's tests share.

Factories of fresh records with random ids (``make_run``, ``make_checkpoint``,
``make_effect``, ``start_thread``, ``add_run``, ``build_history``), the commit of a
checkpoint as its thread's next step (``step``), what a test observes of a thread
(``snapshot``), hostile and nested values, and the prune graph. Backend test modules
import them from :mod:`oncegraph.testing.conformance`, which re-exports them.
"""

from __future__ import annotations

import operator
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated, Any, TypedDict

from oncegraph.storage.protocols import Checkpointer, Pruner
from oncegraph.storage.records import (
    Attempt,
    CheckpointRecord,
    EffectClass,
    EffectRecord,
    EffectStatus,
    LogEntry,
    RunRecord,
    RunStatus,
    StepCommit,
    TaskWrite,
    WriteKind,
)

Reopen = Callable[[], Awaitable[Checkpointer]]

# A value exercising JSON: unicode, 64-bit ints, floats, None, nesting, empty containers.
NESTED: dict[str, Any] = {
    "text": 'héllo wörld ✓ 日本語 🚀 \u0000 nul and "quotes" \\ back',
    "big": 2**63 - 1,
    "small": -(2**63),
    "unsigned": 2**64 - 1,
    "float": 3.141592653589793,
    "tiny": 5e-324,
    "neg_zero_ish": -0.5,
    "none": None,
    "flags": [True, False, None],
    "nested": [[1, [2, [3, [4, {"deep": ["x", {"y": [None, 1.25]}]}]]]], [], {}],
    "empty_str": "",
}


# Text that breaks naively built SQL: quotes, backslashes, placeholders of every driver
# style, a statement separator, comments, an escape-string prefix, control characters.
HOSTILE = (
    'it\'s a "test" \\ back\\slash %s %% %(x)s $1 ? :name ; '
    "DROP TABLE oncegraph_threads; -- /* c */ E'\\x41' \n\t\r ✓ 🚀"
)


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def make_run(
    thread_id: str,
    run_id: str | None = None,
    *,
    status: RunStatus = RunStatus.RUNNING,
    created_at: float = 1_000.0,
    **changes: Any,
) -> RunRecord:
    return RunRecord(
        run_id=run_id or new_id("run"),
        thread_id=thread_id,
        status=status,
        created_at=created_at,
        updated_at=created_at,
        **changes,
    )


def make_checkpoint(
    thread_id: str,
    run_id: str,
    version: int,
    *,
    values: dict[str, Any] | None = None,
    logs: dict[str, int] | None = None,
    parent: str | None = None,
    next_nodes: tuple[str, ...] = ("agent",),
    metadata: dict[str, Any] | None = None,
) -> CheckpointRecord:
    return CheckpointRecord(
        checkpoint_id=new_id("cp"),
        thread_id=thread_id,
        run_id=run_id,
        step=version - 2,
        version=version,
        parent_checkpoint_id=parent,
        values=values if values is not None else {"count": version},
        logs=logs or {},
        next=next_nodes,
        metadata=metadata or {"source": "loop"},
        created_at=2_000.0 + version,
    )


def make_effect(
    run_id: str,
    thread_id: str,
    command_id: str = "msg_1:call_1",
    *,
    request: Any = None,
    status: EffectStatus = EffectStatus.PENDING,
    created_at: float = 3_000.0,
    **changes: Any,
) -> EffectRecord:
    request = {"order": 7} if request is None else request
    return EffectRecord(
        effect_id=new_id("eff"),
        effect_type="tool:refund",
        effect_class=EffectClass.IRREVERSIBLE,
        command_id=command_id,
        run_id=run_id,
        thread_id=thread_id,
        node="tools",
        request_hash="sha256:" + uuid.uuid4().hex,
        status=status,
        request=request,
        recipient="payments",
        attempts=(Attempt(number=1, started_at=created_at),),
        created_at=created_at,
        updated_at=created_at,
        **{"row_version": 1, **changes},
    )


def step(checkpoint: CheckpointRecord, **fields: Any) -> StepCommit:
    """The commit of ``checkpoint`` as the next step of its thread: expected at the version
    just before its own (a test of a stale or mismatched commit builds its own)."""
    return StepCommit(
        thread_id=checkpoint.thread_id,
        expected_version=checkpoint.version - 1,
        checkpoint=checkpoint,
        **fields,
    )


async def start_thread(
    store: Checkpointer, **commit_fields: Any
) -> tuple[str, str, CheckpointRecord]:
    """Commit version 1 of a new thread with a new run; returns (thread, run, checkpoint)."""
    thread_id, run_id = new_id("thread"), new_id("run")
    cp = make_checkpoint(thread_id, run_id, 1, next_nodes=("__start__",))
    await store.commit(step(cp, new_run=make_run(thread_id, run_id), **commit_fields))
    return thread_id, run_id, cp


async def add_run(store: Checkpointer, thread_id: str, **changes: Any) -> str:
    """Store a new run on ``thread_id`` directly (``create_run``); returns its id."""
    run_id = new_id("run")
    await store.create_run(make_run(thread_id, run_id, **changes))
    return run_id


async def snapshot(store: Checkpointer, thread_id: str, run_ids: Sequence[str]) -> dict[str, Any]:
    """Everything a test can observe about a thread, for "nothing was written" checks."""
    head = await store.get_checkpoint(thread_id)
    return {
        "thread": await store.get_thread(thread_id),
        "head": head,
        "checkpoints": await store.list_checkpoints(thread_id),
        "log": await store.read_log(thread_id, "messages", 1_000),
        "runs": [await store.get_run(r) for r in run_ids],
        "thread_runs": await store.list_runs(thread_id=thread_id),
        "effects": await store.list_effects(thread_id=thread_id),
        "task_writes": (await store.get_task_writes(thread_id, head.checkpoint_id) if head else []),
    }


async def build_history(
    store: Checkpointer, run_statuses: Sequence[RunStatus], *, per_run: int = 2
) -> tuple[str, list[tuple[str, list[CheckpointRecord]]]]:
    """A new thread with one run per status, run after run, ``per_run`` checkpoints each.

    Checkpoint ``v`` (1-based) appends log entry ``messages#v-1`` = ``"m{v-1}"`` and
    gets one task write; a run's last commit sets its status. Returns the thread id
    and ``(run_id, checkpoints oldest first)`` per run.
    """
    tid = new_id("thread")
    version, parent = 0, None
    out: list[tuple[str, list[CheckpointRecord]]] = []
    for status in run_statuses:
        rid = new_id("run")
        cps: list[CheckpointRecord] = []
        for i in range(per_run):
            cp = make_checkpoint(
                tid, rid, version + 1, parent=parent, logs={"messages": version + 1}
            )
            await store.commit(
                step(
                    cp,
                    log=[LogEntry("messages", version, f"m{version}")],
                    new_run=make_run(tid, rid) if i == 0 else None,
                    run_status=status if i == per_run - 1 else None,
                )
            )
            await store.put_task_write(
                TaskWrite(tid, cp.checkpoint_id, "tools", WriteKind.WRITES, 0, {"v": cp.version})
            )
            version, parent = version + 1, cp.checkpoint_id
            cps.append(cp)
        out.append((rid, cps))
    return tid, out


def ids(effects: Sequence[EffectRecord]) -> set[str]:
    return {e.effect_id for e in effects}


async def ids_of(listing: Awaitable[list[EffectRecord]]) -> set[str]:
    return ids(await listing)


def as_pruner(store: Checkpointer) -> Pruner:
    assert isinstance(store, Pruner), f"{type(store).__name__} has no prune()"
    return store


class PruneState(TypedDict, total=False):
    log: Annotated[list[str], operator.add]


def prune_graph(store: Checkpointer) -> Any:
    """before -> ask (interrupts for an answer) -> after; every node appends to ``log``."""
    from oncegraph import END, START, StateGraph, interrupt

    def before(state: PruneState) -> dict[str, Any]:
        return {"log": ["before"]}

    def ask(state: PruneState) -> dict[str, Any]:
        return {"log": [f"ask:{interrupt('approve?')}"]}

    def after(state: PruneState) -> dict[str, Any]:
        return {"log": ["after"]}

    g = StateGraph(PruneState)
    g.add_node("before", before)
    g.add_node("ask", ask)
    g.add_node("after", after)
    g.add_edge(START, "before")
    g.add_edge("before", "ask")
    g.add_edge("ask", "after")
    g.add_edge("after", END)
    return g.compile(checkpointer=store)


class WithoutPrune:
    """A store wrapper that hides ``prune`` (what a third-party store may look like)."""

    def __init__(self, inner: Checkpointer) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name == "prune":
            raise AttributeError(name)
        return getattr(self._inner, name)


# What :mod:`oncegraph.testing.conformance` re-exports: what a backend's own tests use.
__all__ = [
    "NESTED",
    "PruneState",
    "Reopen",
    "add_run",
    "as_pruner",
    "build_history",
    "make_checkpoint",
    "make_effect",
    "make_run",
    "new_id",
    "prune_graph",
    "snapshot",
    "start_thread",
    "step",
]
