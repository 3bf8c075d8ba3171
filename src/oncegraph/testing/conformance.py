"""The pytest-native contract suite every :class:`Checkpointer` backend must pass.

A backend's test module subclasses :class:`CheckpointerConformance` and provides a
``checkpointer`` fixture yielding a set-up store (closing it afterwards)::

    class TestSqlite(CheckpointerConformance):
        @pytest.fixture
        async def checkpointer(self, tmp_path):
            store = SqliteCheckpointer(tmp_path / "db.sqlite")
            await store.setup()
            yield store
            await store.aclose()

        @pytest.fixture
        async def reopen(self, tmp_path):  # optional: enables the durability test
            ...yield an async function returning a NEW set-up store on the same database

Every test uses fresh, random thread and run ids and filters its listings by them, so
the suite may run against a shared database (PostgreSQL) and in parallel. Records use
fixed timestamps where an ordering is asserted, so no test depends on the clock.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import operator
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated, Any, TypedDict, cast

import pytest

from oncegraph.errors import (
    ConfigError,
    InvalidUpdateError,
    LeaseLostError,
    RunNotFoundError,
    StaleStateError,
    StorageError,
)
from oncegraph.storage.protocols import Checkpointer, Pruner, RequestHashKeys, ThreadOpening
from oncegraph.storage.records import (
    UNFINISHED_STATUSES,
    Attempt,
    AuditRecord,
    CheckpointRecord,
    EffectClass,
    EffectRecord,
    EffectStatus,
    LogEntry,
    PruneReport,
    RunRecord,
    RunStatus,
    StepCommit,
    TaskWrite,
    WriteKind,
    now,
)
from oncegraph.testing.conformance_auditchain import AuditChainConformance
from oncegraph.testing.conformance_order import ThreadOrderConformance
from oncegraph.testing.conformance_requests import IdempotencyConformance

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


async def start_thread(
    store: Checkpointer, **commit_fields: Any
) -> tuple[str, str, CheckpointRecord]:
    """Commit version 1 of a new thread with a new run; returns (thread, run, checkpoint)."""
    thread_id, run_id = new_id("thread"), new_id("run")
    cp = make_checkpoint(thread_id, run_id, 1, next_nodes=("__start__",))
    await store.commit(
        StepCommit(
            thread_id=thread_id,
            expected_version=0,
            checkpoint=cp,
            new_run=make_run(thread_id, run_id),
            **commit_fields,
        )
    )
    return thread_id, run_id, cp


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
                StepCommit(
                    thread_id=tid,
                    expected_version=version,
                    checkpoint=cp,
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


class _WithoutPrune:
    """A store wrapper that hides ``prune`` (what a third-party store may look like)."""

    def __init__(self, inner: Checkpointer) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name == "prune":
            raise AttributeError(name)
        return getattr(self._inner, name)


class CheckpointerConformance(
    IdempotencyConformance, AuditChainConformance, ThreadOrderConformance
):
    """Contract tests for :class:`~oncegraph.storage.protocols.Checkpointer` backends
    (idempotency keys' in :class:`~oncegraph.testing.conformance_requests.
    IdempotencyConformance`)."""

    @pytest.fixture
    def reopen(self) -> Reopen | None:
        """Override with a factory of NEW set-up stores on the same database to enable
        the durability test; ``None`` (the default) skips it."""
        return None

    # -- protocol ---------------------------------------------------------------------

    async def test_is_a_checkpointer(self, checkpointer: Checkpointer) -> None:
        assert isinstance(checkpointer, Checkpointer)

    async def test_unknown_ids_read_as_empty(self, checkpointer: Checkpointer) -> None:
        tid = new_id("thread")
        assert await checkpointer.get_thread(tid) is None
        assert await checkpointer.get_checkpoint(tid) is None
        assert await checkpointer.get_checkpoint(tid, "cp_missing") is None
        assert await checkpointer.list_checkpoints(tid) == []
        assert await checkpointer.read_log(tid, "messages", 10) == []
        assert await checkpointer.get_task_writes(tid, "cp_missing") == []
        assert await checkpointer.get_run(new_id("run")) is None
        assert await checkpointer.list_runs(thread_id=tid) == []
        assert await checkpointer.get_effect(new_id("eff")) is None
        assert await checkpointer.list_effects(thread_id=tid) == []

    # -- commit and CAS ---------------------------------------------------------------

    async def test_commit_new_thread(self, checkpointer: Checkpointer) -> None:
        tid, rid, cp = await start_thread(checkpointer)
        thread = await checkpointer.get_thread(tid)
        assert thread is not None
        assert (thread.version, thread.head_checkpoint_id) == (1, cp.checkpoint_id)
        assert await checkpointer.get_checkpoint(tid) == cp
        assert await checkpointer.get_checkpoint(tid, cp.checkpoint_id) == cp
        run = await checkpointer.get_run(rid)
        assert run is not None
        assert (run.thread_id, run.status) == (tid, RunStatus.RUNNING)

    async def test_commit_moves_head_and_version(self, checkpointer: Checkpointer) -> None:
        tid, rid, cp1 = await start_thread(checkpointer)
        cp2 = make_checkpoint(tid, rid, 2, parent=cp1.checkpoint_id, values={"count": 2})
        await checkpointer.commit(StepCommit(thread_id=tid, expected_version=1, checkpoint=cp2))
        cp3 = make_checkpoint(tid, rid, 3, parent=cp2.checkpoint_id, next_nodes=())
        await checkpointer.commit(StepCommit(thread_id=tid, expected_version=2, checkpoint=cp3))
        thread = await checkpointer.get_thread(tid)
        assert thread is not None
        assert (thread.version, thread.head_checkpoint_id) == (3, cp3.checkpoint_id)
        assert await checkpointer.get_checkpoint(tid) == cp3
        assert await checkpointer.get_checkpoint(tid, cp1.checkpoint_id) == cp1
        assert await checkpointer.get_checkpoint(tid, cp2.checkpoint_id) == cp2

    async def test_checkpoint_of_another_thread_is_not_found(
        self, checkpointer: Checkpointer
    ) -> None:
        _, _, cp = await start_thread(checkpointer)
        other, _, _ = await start_thread(checkpointer)
        assert await checkpointer.get_checkpoint(other, cp.checkpoint_id) is None

    async def test_commit_applies_run_status_and_error(self, checkpointer: Checkpointer) -> None:
        tid, rid, cp1 = await start_thread(checkpointer)
        cp2 = make_checkpoint(tid, rid, 2, parent=cp1.checkpoint_id)
        await checkpointer.commit(
            StepCommit(
                thread_id=tid,
                expected_version=1,
                checkpoint=cp2,
                run_status=RunStatus.FAILED,
                run_error="boom",
            )
        )
        run = await checkpointer.get_run(rid)
        assert run is not None
        assert (run.status, run.error) == (RunStatus.FAILED, "boom")

    async def test_stale_cas_raises_and_writes_nothing(self, checkpointer: Checkpointer) -> None:
        tid, rid, cp1 = await start_thread(
            checkpointer, log=[LogEntry("messages", 0, {"role": "user", "content": "hi"})]
        )
        effect = make_effect(rid, tid)
        await checkpointer.begin_effect(effect)
        await checkpointer.put_task_write(
            TaskWrite(tid, cp1.checkpoint_id, "tools", WriteKind.WRITES, 0, {"x": 1})
        )
        before = await snapshot(checkpointer, tid, [rid])
        other_run = new_id("run")
        for stale in (0, 5):
            cp = make_checkpoint(tid, rid, stale + 1, parent=cp1.checkpoint_id)
            with pytest.raises(StaleStateError):
                await checkpointer.commit(
                    StepCommit(
                        thread_id=tid,
                        expected_version=stale,
                        checkpoint=cp,
                        log=[LogEntry("messages", 1, {"role": "ai", "content": "stale"})],
                        new_run=make_run(tid, other_run),
                        run_status=RunStatus.COMPLETED,
                        run_error="stale",
                        effects=[effect.replace(status=EffectStatus.COMPLETED, result="stale")],
                        clear_task_writes_of=cp1.checkpoint_id,
                    )
                )
            assert await checkpointer.get_checkpoint(tid, cp.checkpoint_id) is None
        assert await checkpointer.get_run(other_run) is None
        assert await snapshot(checkpointer, tid, [rid]) == before
        assert await checkpointer.read_log(tid, "messages", 5) == [
            {"role": "user", "content": "hi"}
        ]

    async def test_racing_writers_exactly_one_wins(self, checkpointer: Checkpointer) -> None:
        tid, rid, cp1 = await start_thread(checkpointer)
        candidates = [
            make_checkpoint(tid, rid, 2, parent=cp1.checkpoint_id, values={"writer": i})
            for i in range(6)
        ]
        results = await asyncio.gather(
            *(
                checkpointer.commit(
                    StepCommit(
                        thread_id=tid,
                        expected_version=1,
                        checkpoint=cp,
                        log=[LogEntry("messages", 0, {"writer": i})],
                    )
                )
                for i, cp in enumerate(candidates)
            ),
            return_exceptions=True,
        )
        winners = [i for i, r in enumerate(results) if not isinstance(r, BaseException)]
        assert len(winners) == 1, results
        lost = [r for r in results if isinstance(r, BaseException)]
        assert all(isinstance(r, StaleStateError) for r in lost), results
        thread = await checkpointer.get_thread(tid)
        assert thread is not None and thread.version == 2
        assert thread.head_checkpoint_id == candidates[winners[0]].checkpoint_id
        assert await checkpointer.read_log(tid, "messages", 5) == [{"writer": winners[0]}]
        assert len(await checkpointer.list_checkpoints(tid)) == 2

    async def test_racing_new_threads_exactly_one_wins(self, checkpointer: Checkpointer) -> None:
        tid = new_id("thread")
        commits = []
        for _ in range(4):
            rid = new_id("run")
            commits.append(
                StepCommit(
                    thread_id=tid,
                    expected_version=0,
                    checkpoint=make_checkpoint(tid, rid, 1),
                    new_run=make_run(tid, rid),
                )
            )
        results = await asyncio.gather(
            *(checkpointer.commit(c) for c in commits), return_exceptions=True
        )
        assert sum(not isinstance(r, BaseException) for r in results) == 1, results
        lost = [r for r in results if isinstance(r, BaseException)]
        assert all(isinstance(r, StaleStateError) for r in lost), results
        assert len(await checkpointer.list_runs(thread_id=tid)) == 1

    async def test_malformed_commit_is_rejected(self, checkpointer: Checkpointer) -> None:
        tid, rid, _ = await start_thread(checkpointer)
        wrong_version = make_checkpoint(tid, rid, 5)
        with pytest.raises(ConfigError):
            await checkpointer.commit(
                StepCommit(thread_id=tid, expected_version=1, checkpoint=wrong_version)
            )
        other_thread = make_checkpoint(new_id("thread"), rid, 2)
        with pytest.raises(ConfigError):
            await checkpointer.commit(
                StepCommit(thread_id=tid, expected_version=1, checkpoint=other_thread)
            )
        thread = await checkpointer.get_thread(tid)
        assert thread is not None and thread.version == 1

    async def test_unserializable_value_writes_nothing(self, checkpointer: Checkpointer) -> None:
        tid, rid, _ = await start_thread(checkpointer)
        before = await snapshot(checkpointer, tid, [rid])
        bad = make_checkpoint(tid, rid, 2, values={"x": object()})
        with pytest.raises(ConfigError):
            await checkpointer.commit(StepCommit(thread_id=tid, expected_version=1, checkpoint=bad))
        bad_log = make_checkpoint(tid, rid, 2)
        with pytest.raises(ConfigError):
            await checkpointer.commit(
                StepCommit(
                    thread_id=tid,
                    expected_version=1,
                    checkpoint=bad_log,
                    log=[LogEntry("messages", 0, "ok"), LogEntry("messages", 1, object())],
                )
            )
        assert await snapshot(checkpointer, tid, [rid]) == before
        # the store is still usable at the same version
        good = make_checkpoint(tid, rid, 2)
        await checkpointer.commit(StepCommit(thread_id=tid, expected_version=1, checkpoint=good))
        assert await checkpointer.get_checkpoint(tid) == good

    async def test_duplicate_checkpoint_id_writes_nothing(self, checkpointer: Checkpointer) -> None:
        tid, rid, cp1 = await start_thread(checkpointer)
        before = await snapshot(checkpointer, tid, [rid])
        dup = dataclasses.replace(make_checkpoint(tid, rid, 2), checkpoint_id=cp1.checkpoint_id)
        with pytest.raises(StorageError):
            await checkpointer.commit(
                StepCommit(
                    thread_id=tid,
                    expected_version=1,
                    checkpoint=dup,
                    log=[LogEntry("messages", 0, "x")],
                )
            )
        assert await snapshot(checkpointer, tid, [rid]) == before

    # -- logs -------------------------------------------------------------------------

    async def test_log_entries_appended_and_read_by_end(self, checkpointer: Checkpointer) -> None:
        m = [{"role": "user", "content": f"m{i}"} for i in range(5)]
        tid, rid, cp1 = await start_thread(
            checkpointer,
            log=[LogEntry("messages", 0, m[0]), LogEntry("messages", 1, m[1])],
        )
        cp2 = make_checkpoint(
            tid, rid, 2, parent=cp1.checkpoint_id, logs={"messages": 5, "events": 1}
        )
        await checkpointer.commit(
            StepCommit(
                thread_id=tid,
                expected_version=1,
                checkpoint=cp2,
                log=[
                    LogEntry("messages", 2, m[2]),
                    LogEntry("messages", 3, m[3]),
                    LogEntry("messages", 4, m[4]),
                    LogEntry("events", 0, "started"),
                ],
            )
        )
        assert await checkpointer.read_log(tid, "messages", 5) == m
        assert await checkpointer.read_log(tid, "messages", 2) == m[:2]
        assert await checkpointer.read_log(tid, "messages", 100) == m
        assert await checkpointer.read_log(tid, "messages", 0) == []
        assert await checkpointer.read_log(tid, "events", 1) == ["started"]
        assert await checkpointer.read_log(tid, "nothing", 3) == []
        head = await checkpointer.get_checkpoint(tid)
        assert head is not None
        assert dict(head.logs) == {"messages": 5, "events": 1}
        assert "messages" not in head.values  # a checkpoint stores counts, not entries

    async def test_log_entry_is_never_rewritten(self, checkpointer: Checkpointer) -> None:
        tid, rid, cp1 = await start_thread(checkpointer, log=[LogEntry("messages", 0, "first")])
        before = await snapshot(checkpointer, tid, [rid])
        cp2 = make_checkpoint(tid, rid, 2, parent=cp1.checkpoint_id)
        with pytest.raises(StorageError):
            await checkpointer.commit(
                StepCommit(
                    thread_id=tid,
                    expected_version=1,
                    checkpoint=cp2,
                    log=[LogEntry("messages", 1, "new"), LogEntry("messages", 0, "rewrite")],
                )
            )
        assert await snapshot(checkpointer, tid, [rid]) == before
        assert await checkpointer.read_log(tid, "messages", 5) == ["first"]

    # -- checkpoint listings ----------------------------------------------------------

    async def test_list_checkpoints_newest_first_and_by_run(
        self, checkpointer: Checkpointer
    ) -> None:
        tid, run_a, cp1 = await start_thread(checkpointer)
        cp2 = make_checkpoint(tid, run_a, 2, parent=cp1.checkpoint_id)
        await checkpointer.commit(StepCommit(thread_id=tid, expected_version=1, checkpoint=cp2))
        run_b = new_id("run")
        cp3 = make_checkpoint(tid, run_b, 3, parent=cp2.checkpoint_id)
        cp4 = make_checkpoint(tid, run_b, 4, parent=cp3.checkpoint_id)
        await checkpointer.commit(
            StepCommit(
                thread_id=tid, expected_version=2, checkpoint=cp3, new_run=make_run(tid, run_b)
            )
        )
        await checkpointer.commit(StepCommit(thread_id=tid, expected_version=3, checkpoint=cp4))
        ids = [c.checkpoint_id for c in await checkpointer.list_checkpoints(tid)]
        assert ids == [cp4.checkpoint_id, cp3.checkpoint_id, cp2.checkpoint_id, cp1.checkpoint_id]
        by_a = await checkpointer.list_checkpoints(tid, run_id=run_a)
        assert [c.checkpoint_id for c in by_a] == [cp2.checkpoint_id, cp1.checkpoint_id]
        by_b = await checkpointer.list_checkpoints(tid, run_id=run_b, limit=1)
        assert by_b == [cp4]
        limited = await checkpointer.list_checkpoints(tid, limit=2)
        assert [c.version for c in limited] == [4, 3]
        assert await checkpointer.list_checkpoints(tid, run_id=new_id("run")) == []
        # the next page after a checkpoint: only lower versions
        after = await checkpointer.list_checkpoints(
            tid, limit=2, before_version=limited[-1].version
        )
        assert [c.version for c in after] == [2, 1]
        assert await checkpointer.list_checkpoints(tid, before_version=1) == []
        by_b_older = await checkpointer.list_checkpoints(tid, run_id=run_b, before_version=4)
        assert by_b_older == [cp3]

    # -- task writes ------------------------------------------------------------------

    async def test_task_writes_put_replace_get_ordered_and_cleared(
        self, checkpointer: Checkpointer
    ) -> None:
        tid, rid, cp1 = await start_thread(checkpointer)
        cid = cp1.checkpoint_id
        puts = [
            TaskWrite(tid, cid, "tools", WriteKind.WRITES, 1, {"b": 1}, created_at=1.0),
            TaskWrite(tid, cid, "agent", WriteKind.WRITES, 0, {"a": 1}, created_at=2.0),
            TaskWrite(tid, cid, "tools", WriteKind.INTERRUPT, 0, "ask?", created_at=3.0),
            TaskWrite(tid, cid, "tools", WriteKind.WRITES, 0, {"c": 1}, created_at=4.0),
        ]
        for w in puts:
            await checkpointer.put_task_write(w)
        await checkpointer.put_task_write(
            TaskWrite(tid, "cp_other", "agent", WriteKind.WRITES, 0, 1)
        )
        got = await checkpointer.get_task_writes(tid, cid)
        assert [(w.task, w.kind, w.idx) for w in got] == [
            ("agent", "writes", 0),
            ("tools", "interrupt", 0),
            ("tools", "writes", 0),
            ("tools", "writes", 1),
        ]
        assert got[0] == puts[1]
        replaced = TaskWrite(
            tid, cid, "tools", WriteKind.INTERRUPT, 0, {"answer": "yes"}, created_at=9.0
        )
        await checkpointer.put_task_write(replaced)
        got = await checkpointer.get_task_writes(tid, cid)
        assert len(got) == 4
        assert got[1] == replaced
        cp2 = make_checkpoint(tid, rid, 2, parent=cid)
        await checkpointer.commit(
            StepCommit(thread_id=tid, expected_version=1, checkpoint=cp2, clear_task_writes_of=cid)
        )
        assert await checkpointer.get_task_writes(tid, cid) == []
        assert len(await checkpointer.get_task_writes(tid, "cp_other")) == 1

    # -- runs -------------------------------------------------------------------------

    async def test_runs_create_get_update(self, checkpointer: Checkpointer) -> None:
        tid = new_id("thread")
        run = make_run(
            tid,
            status=RunStatus.QUEUED,
            input={"messages": [{"role": "user", "content": "hi"}]},
            config={"tool_timeout": 60},
            workflow_name="support",
            workflow_version="7",
            state_schema_version=3,
            graph_fingerprint="fp",
            parent_run_id="run_parent",
            parent_checkpoint_id="cp_parent",
            launch_reason="replay",
            mode="evidence",
            lease_owner="worker-1",
            lease_expires_at=99.5,
            fencing_token=4,
        )
        await checkpointer.create_run(run)
        assert await checkpointer.get_run(run.run_id) == run
        await checkpointer.update_run(run.run_id, status=RunStatus.FAILED, error="boom")
        got = await checkpointer.get_run(run.run_id)
        assert got is not None
        assert (got.status, got.error) == (RunStatus.FAILED, "boom")
        assert got.replace(status=run.status, error=None, updated_at=run.updated_at) == run
        await checkpointer.update_run(run.run_id, status=RunStatus.COMPLETED)
        got = await checkpointer.get_run(run.run_id)
        assert got is not None
        assert (got.status, got.error) == (RunStatus.COMPLETED, None)

    async def test_duplicate_run_is_rejected(self, checkpointer: Checkpointer) -> None:
        run = make_run(new_id("thread"), status=RunStatus.QUEUED)
        await checkpointer.create_run(run)
        # the same words on every backend, not the driver's
        with pytest.raises(StorageError, match=r"already exists; nothing was written") as info:
            await checkpointer.create_run(run.replace(status=RunStatus.COMPLETED))
        assert run.run_id in str(info.value)
        assert await checkpointer.get_run(run.run_id) == run

    async def test_list_runs_newest_first_by_thread_and_status(
        self, checkpointer: Checkpointer
    ) -> None:
        tid, other = new_id("thread"), new_id("thread")
        statuses = [
            RunStatus.COMPLETED,
            RunStatus.FAILED,
            RunStatus.RUNNING,
            RunStatus.INTERRUPTED,
            RunStatus.FAILED,
        ]
        # created_at (the submitters' clocks) is deliberately not in insertion order: a
        # thread's runs are listed in the order the store placed them, newest first
        created = [1_003.0, 1_001.0, 1_004.0, 1_000.0, 1_002.0]
        runs = [
            make_run(tid, status=s, created_at=c) for s, c in zip(statuses, created, strict=True)
        ]
        for run in runs:
            await checkpointer.create_run(run)
        await checkpointer.create_run(make_run(other, status=RunStatus.FAILED))
        newest_first = runs[::-1]
        assert await checkpointer.list_runs(thread_id=tid) == newest_first
        assert await checkpointer.list_runs(thread_id=tid, limit=2) == newest_first[:2]
        failed = await checkpointer.list_runs(thread_id=tid, statuses=[RunStatus.FAILED])
        assert failed == [runs[4], runs[1]]
        unfinished = await checkpointer.list_runs(
            thread_id=tid, statuses=[RunStatus.RUNNING, RunStatus.INTERRUPTED]
        )
        assert unfinished == [runs[3], runs[2]]
        # without a thread filter, our failed runs are found among everyone's
        everywhere = await checkpointer.list_runs(statuses=[RunStatus.FAILED], limit=100_000)
        ids = {r.run_id for r in everywhere}
        assert {runs[1].run_id, runs[4].run_id} <= ids
        assert all(r.status is RunStatus.FAILED for r in everywhere)

    async def test_open_thread_reads_the_thread_and_its_latest_run_together(
        self, checkpointer: Checkpointer
    ) -> None:
        """``open_thread`` answers what ``get_thread`` and the newest of ``list_runs`` do:
        for an unknown thread, a thread with runs but no row yet (a queued run), and a
        committed thread with several runs (the one the store placed last, whatever its
        ``created_at`` or ``run_id``);
        ``open_run`` what ``get_run`` and its thread's ``get_thread`` do."""
        if not isinstance(checkpointer, ThreadOpening):
            pytest.skip("this backend reads a thread and its latest run separately")
        assert await checkpointer.open_thread(new_id("thread")) == (None, None)

        queued = make_run(new_id("thread"), status=RunStatus.QUEUED)
        await checkpointer.create_run(queued)
        assert await checkpointer.open_thread(queued.thread_id) == (None, queued)

        tid, _, _ = await start_thread(checkpointer)
        later = make_run(tid, status=RunStatus.COMPLETED, created_at=1_002.0, app_id="a")
        tied = [make_run(tid, f"{tid}_r{i}", created_at=1_003.0) for i in (2, 1)]
        older = make_run(tid, f"{tid}_r0", created_at=1_001.0)  # written last, yet older
        for run in (later, *tied, older):
            await checkpointer.create_run(run)
        thread, latest = await checkpointer.open_thread(tid)
        assert thread == await checkpointer.get_thread(tid) and thread is not None
        assert (thread.version, latest) == (1, older)  # placed last: the thread's latest
        assert latest == (await checkpointer.list_runs(thread_id=tid, limit=1))[0]
        await checkpointer.update_run(older.run_id, status=RunStatus.FAILED, error="boom")
        _, latest = await checkpointer.open_thread(tid)
        assert latest is not None and (latest.status, latest.error) == (RunStatus.FAILED, "boom")

        # open_run: a run and its thread's row, by the run's id
        assert await checkpointer.open_run(new_id("run")) == (None, None)
        assert await checkpointer.open_run(queued.run_id) == (queued, None)
        assert await checkpointer.open_run(later.run_id) == (later, thread)

    async def test_list_runs_of_every_app_newest_first(self, checkpointer: Checkpointer) -> None:
        """With no app and no thread, a listing holds every app's runs in one order:
        newest first across the apps (a tie in time: the larger run id first), cut at the
        limit, the status and tenant filters applied to every app's runs alike."""
        apps, tenant = [new_id("app") for _ in range(3)], new_id("tenant")
        runs = [
            make_run(
                new_id("thread"),
                f"{new_id('run')}-{i:02d}",
                status=RunStatus.FAILED if i % 4 == 0 else RunStatus.COMPLETED,
                created_at=2_000.0 + i // 2,  # two apps' runs share each instant
                workflow_name=apps[i % 3],
                tenant=tenant if i % 3 == 1 else None,
            )
            for i in range(12)
        ]
        for run in reversed(runs):
            await checkpointer.create_run(run)
        newest = sorted(runs, key=lambda r: (r.created_at, r.run_id), reverse=True)
        assert await checkpointer.list_runs() == newest
        assert await checkpointer.list_runs(limit=5) == newest[:5]
        assert await checkpointer.list_runs(limit=0) == []
        failed = await checkpointer.list_runs(statuses=[RunStatus.FAILED], limit=2)
        assert failed == [r for r in newest if r.status is RunStatus.FAILED][:2]
        twice = [RunStatus.FAILED, RunStatus.FAILED]  # a status named twice counts once
        assert await checkpointer.list_runs(statuses=twice) == [
            r for r in newest if r.status is RunStatus.FAILED
        ]
        assert await checkpointer.list_runs(app_id=apps[0], statuses=twice) == [
            r for r in newest if r.status is RunStatus.FAILED and r.app_id == apps[0]
        ]
        assert await checkpointer.list_runs(tenant=tenant) == [
            r for r in newest if r.tenant == tenant
        ]

    async def test_list_runs_page_after_page(self, checkpointer: Checkpointer) -> None:
        """``before`` (a run's ``(created_at, run_id)``) lists the runs after that run in
        the listing's order: read page after page from each page's last run, a listing
        of any filters gives every run once, in order, as one long listing does; a tie
        in time goes on with the smaller ids."""
        apps, tenant = [new_id("app") for _ in range(2)], new_id("tenant")
        thread, parent = new_id("thread"), new_id("run")
        runs = [
            make_run(
                thread if i % 5 == 0 else new_id("thread"),
                f"{new_id('run')}-{i:02d}",
                status=RunStatus.FAILED if i % 3 == 0 else RunStatus.COMPLETED,
                created_at=3_000.0 + i // 3,  # three runs share each instant
                workflow_name=apps[i % 2],
                tenant=tenant if i % 4 == 1 else None,
                parent_run_id=parent if i % 4 == 2 else None,
            )
            for i in range(23)
        ]
        for run in reversed(runs):
            await checkpointer.create_run(run)
        failed, completed = RunStatus.FAILED, RunStatus.COMPLETED
        filters: list[dict[str, Any]] = [
            {},
            {"app_id": apps[0]},
            {"app_id": apps[1], "statuses": [failed]},
            {"statuses": [failed, completed]},
            {"statuses": [failed]},
            {"tenant": tenant},
            {"app_id": apps[1], "tenant": tenant},
            {"thread_id": thread},
            {"parent_run_id": parent},
            {"parent_run_id": parent, "app_id": apps[0]},
        ]
        for where in filters:
            whole = await checkpointer.list_runs(limit=1_000, **where)
            assert whole, where
            paged: list[RunRecord] = []
            before: tuple[float, str] | None = None
            while True:
                page = await checkpointer.list_runs(limit=2, before=before, **where)
                assert len(page) <= 2
                paged.extend(page)
                if len(page) < 2:
                    break
                before = (page[-1].created_at, page[-1].run_id)
            assert paged == whole, where
        # after one run of a tie in time: the tie's smaller ids, then the older runs
        newest = sorted(runs, key=lambda r: (r.created_at, r.run_id), reverse=True)
        tied = [r for r in newest if r.created_at == 3_003.0]
        assert len(tied) == 3
        after = await checkpointer.list_runs(before=(tied[0].created_at, tied[0].run_id), limit=4)
        assert after == newest[newest.index(tied[0]) + 1 :][:4]
        assert after[:2] == tied[1:]
        assert await checkpointer.list_runs(before=(2_999.0, "~"), tenant=tenant) == []

    async def test_list_runs_made_from_a_run(self, checkpointer: Checkpointer) -> None:
        """``parent_run_id`` lists the runs made from that run (its replays and
        branches), newest first, on any thread, with the other filters applied."""
        parent = make_run(new_id("thread"), created_at=1_000.0)
        app_a, app_b = new_id("app"), new_id("app")
        made = [
            make_run(
                f"{parent.thread_id}~{i}",
                created_at=1_001.0 + i,
                parent_run_id=parent.run_id,
                status=RunStatus.FAILED if i == 1 else RunStatus.COMPLETED,
                workflow_name=app_b if i == 2 else app_a,
            )
            for i in range(4)
        ]
        grandchild = make_run(new_id("thread"), created_at=1_010.0, parent_run_id=made[0].run_id)
        for run in (parent, *made, grandchild):
            await checkpointer.create_run(run)
        newest = made[::-1]
        assert await checkpointer.list_runs(parent_run_id=parent.run_id) == newest
        assert await checkpointer.list_runs(parent_run_id=parent.run_id, limit=2) == newest[:2]
        failed = [RunStatus.FAILED]
        assert await checkpointer.list_runs(parent_run_id=parent.run_id, statuses=failed) == [
            made[1]
        ]
        assert await checkpointer.list_runs(parent_run_id=parent.run_id, app_id=app_b) == [
            made[2]
        ]
        assert await checkpointer.list_runs(parent_run_id=made[0].run_id) == [grandchild]
        assert await checkpointer.list_runs(
            parent_run_id=parent.run_id, thread_id=made[3].thread_id
        ) == [made[3]]
        assert await checkpointer.list_runs(parent_run_id=grandchild.run_id) == []

    async def test_runs_carry_their_app_and_tenant(self, checkpointer: Checkpointer) -> None:
        """Guarantee 15: a run's app and tenant are stored and come back as written; a run
        built without an app belongs to its workflow_name; both filter listings."""
        tid = new_id("thread")
        app_a, app_b, tenant = new_id("app"), new_id("app"), new_id("tenant")
        plain = make_run(tid, workflow_name=app_a, created_at=1_000.0)
        assert plain.app_id == app_a and plain.tenant is None
        tenanted = make_run(tid, workflow_name=app_a, tenant=tenant, created_at=1_001.0)
        other = make_run(tid, workflow_name=app_a, app_id=app_b, created_at=1_002.0)
        for run in (plain, tenanted, other):
            await checkpointer.create_run(run)
        for run in (plain, tenanted, other):
            assert await checkpointer.get_run(run.run_id) == run
        assert await checkpointer.list_runs(thread_id=tid, app_id=app_a) == [tenanted, plain]
        assert await checkpointer.list_runs(app_id=app_b) == [other]
        assert await checkpointer.list_runs(app_id=app_a, tenant=tenant) == [tenanted]
        assert await checkpointer.list_runs(app_id=app_b, tenant=tenant) == []
        assert await checkpointer.list_runs(tenant=tenant, limit=1) == [tenanted]
        assert await checkpointer.list_runs(app_id=new_id("app")) == []
        both = await checkpointer.list_runs(
            thread_id=tid, app_id=app_a, statuses=[RunStatus.RUNNING], limit=1
        )
        assert both == [tenanted]
        # a takeover (an operator's abandon, a resume) keeps the run's app and tenant
        taken = await checkpointer.fence_run(
            tenanted.run_id,
            expected_token=tenanted.fencing_token,
            owner="op",
            status=RunStatus.ABANDONED,
        )
        assert taken is not None and (taken.app_id, taken.tenant) == (app_a, tenant)

    async def test_effects_listed_by_their_runs_app_and_tenant(
        self, checkpointer: Checkpointer
    ) -> None:
        tid = new_id("thread")
        app_a, app_b, tenant = new_id("app"), new_id("app"), new_id("tenant")
        run_a = make_run(tid, workflow_name=app_a, tenant=tenant)
        run_b = make_run(tid, workflow_name=app_b)
        for run in (run_a, run_b):
            await checkpointer.create_run(run)
        mine = make_effect(run_a.run_id, tid, "m:1", created_at=3_001.0)
        theirs = make_effect(run_b.run_id, tid, "m:2", created_at=3_002.0)
        for effect in (mine, theirs):
            await checkpointer.begin_effect(effect)
        assert await checkpointer.list_effects(thread_id=tid) == [mine, theirs]
        assert await checkpointer.list_effects(thread_id=tid, app_id=app_a) == [mine]
        assert await checkpointer.list_effects(thread_id=tid, app_id=app_b) == [theirs]
        assert await checkpointer.list_effects(run_id=run_b.run_id, app_id=app_a) == []
        by_tenant = await checkpointer.list_effects(
            thread_id=tid, app_id=app_a, tenant=tenant, statuses=[EffectStatus.PENDING]
        )
        assert by_tenant == [mine]
        assert await checkpointer.list_effects(thread_id=tid, tenant=new_id("tenant")) == []

    async def test_unknown_run(self, checkpointer: Checkpointer) -> None:
        with pytest.raises(RunNotFoundError):
            await checkpointer.update_run(new_id("run"), status=RunStatus.COMPLETED)
        with pytest.raises(RunNotFoundError):
            await checkpointer.update_run(new_id("run"), status=RunStatus.COMPLETED, fence=1)
        tid, rid, cp1 = await start_thread(checkpointer)
        before = await snapshot(checkpointer, tid, [rid])
        ghost = new_id("run")
        cp2 = make_checkpoint(tid, ghost, 2, parent=cp1.checkpoint_id)
        # the run's update alone, fenced, or both: a missing run is named, not a lost fence
        for status, fence in ((RunStatus.COMPLETED, None), (None, 1), (RunStatus.COMPLETED, 1)):
            with pytest.raises(RunNotFoundError):
                await checkpointer.commit(
                    StepCommit(
                        thread_id=tid,
                        expected_version=1,
                        checkpoint=cp2,
                        run_status=status,
                        fence=fence,
                    )
                )
        assert await snapshot(checkpointer, tid, [rid]) == before

    async def test_fence_mismatch_raises_and_writes_nothing(
        self, checkpointer: Checkpointer
    ) -> None:
        tid, rid, cp1 = await start_thread(checkpointer)
        run_b = new_id("run")
        await checkpointer.create_run(make_run(tid, run_b, fencing_token=3))
        effect = make_effect(run_b, tid)
        await checkpointer.begin_effect(effect)
        with pytest.raises(LeaseLostError):
            await checkpointer.update_run(run_b, status=RunStatus.COMPLETED, fence=2)
        got = await checkpointer.get_run(run_b)
        assert got is not None and got.status is RunStatus.RUNNING
        before = await snapshot(checkpointer, tid, [rid, run_b])
        for run_status in (RunStatus.COMPLETED, None):
            cp2 = make_checkpoint(tid, run_b, 2, parent=cp1.checkpoint_id)
            with pytest.raises(LeaseLostError):
                await checkpointer.commit(
                    StepCommit(
                        thread_id=tid,
                        expected_version=1,
                        checkpoint=cp2,
                        log=[LogEntry("messages", 0, "fenced out")],
                        run_status=run_status,
                        effects=[effect.replace(status=EffectStatus.COMPLETED, result=1)],
                        fence=2,
                    )
                )
            assert await checkpointer.get_checkpoint(tid, cp2.checkpoint_id) is None
        assert await snapshot(checkpointer, tid, [rid, run_b]) == before
        # the current token passes
        await checkpointer.update_run(run_b, status=RunStatus.RUNNING, fence=3)
        cp2 = make_checkpoint(tid, run_b, 2, parent=cp1.checkpoint_id)
        await checkpointer.commit(
            StepCommit(
                thread_id=tid,
                expected_version=1,
                checkpoint=cp2,
                run_status=RunStatus.COMPLETED,
                fence=3,
            )
        )
        got = await checkpointer.get_run(run_b)
        assert got is not None and got.status is RunStatus.COMPLETED

    # -- effects ----------------------------------------------------------------------

    async def test_begin_effect_first_writer_wins(self, checkpointer: Checkpointer) -> None:
        tid, rid, _ = await start_thread(checkpointer)
        first = make_effect(rid, tid, request={"amount": 10})
        stored, created = await checkpointer.begin_effect(first)
        assert created is True
        assert stored == first
        second = first.replace(
            request_hash="sha256:other", request={"amount": 99}, recipient="someone else"
        )
        stored, created = await checkpointer.begin_effect(second)
        assert created is False
        assert stored == first
        assert stored.request_hash == first.request_hash
        assert await checkpointer.get_effect(first.effect_id) == first

    async def test_begin_effect_racing_one_creates(self, checkpointer: Checkpointer) -> None:
        tid, rid, _ = await start_thread(checkpointer)
        base = make_effect(rid, tid)
        variants = [base.replace(request_hash=f"sha256:{i}", request={"i": i}) for i in range(5)]
        results = await asyncio.gather(*(checkpointer.begin_effect(v) for v in variants))
        assert sum(created for _, created in results) == 1
        winner = next(stored for stored, created in results if created)
        assert all(stored == winner for stored, _ in results)
        assert await checkpointer.get_effect(base.effect_id) == winner

    async def test_save_effect_updates_result_never_request_hash(
        self, checkpointer: Checkpointer
    ) -> None:
        tid, rid, _ = await start_thread(checkpointer)
        effect = make_effect(rid, tid, request={"amount": 10})
        await checkpointer.begin_effect(effect)
        attempts = (
            Attempt(number=1, started_at=3_000.0, ended_at=3_001.0, outcome="timeout"),
            Attempt(number=2, started_at=3_002.0, ended_at=3_003.5, outcome="completed"),
        )
        done = effect.replace(
            status=EffectStatus.COMPLETED,
            attempts=attempts,
            result={"refund_id": "r_1", "amount": 10},
            provider_reference="prov_1",
            error=None,
            updated_at=3_004.0,
            request_hash="sha256:tampered",
            request={"amount": 99},
            row_version=2,
        )
        await checkpointer.save_effect(done)
        got = await checkpointer.get_effect(effect.effect_id)
        assert got is not None
        assert got.status is EffectStatus.COMPLETED
        assert got.attempts == attempts
        assert got.result == {"refund_id": "r_1", "amount": 10}
        assert got.provider_reference == "prov_1"
        assert got.updated_at == 3_004.0
        assert got.request_hash == effect.request_hash
        assert got.request == {"amount": 10}
        assert got.created_at == effect.created_at
        failed = done.replace(
            status=EffectStatus.FAILED, error="declined", result=None, row_version=3
        )
        await checkpointer.save_effect(failed)
        got = await checkpointer.get_effect(effect.effect_id)
        assert got is not None
        assert (got.status, got.error, got.result) == (EffectStatus.FAILED, "declined", None)
        assert got.request_hash == effect.request_hash

    async def test_save_effect_never_begun_is_recorded(self, checkpointer: Checkpointer) -> None:
        tid, rid, _ = await start_thread(checkpointer)
        effect = make_effect(rid, tid, status=EffectStatus.COMPLETED, result={"ok": True})
        await checkpointer.save_effect(effect)
        assert await checkpointer.get_effect(effect.effect_id) == effect
        with pytest.raises(StaleStateError):  # a second "first write" is stale
            await checkpointer.save_effect(effect.replace(result={"ok": False}))
        assert await checkpointer.get_effect(effect.effect_id) == effect

    async def test_save_effect_is_a_compare_and_set_on_the_row_version(
        self, checkpointer: Checkpointer
    ) -> None:
        tid, rid, _ = await start_thread(checkpointer)
        effect = make_effect(rid, tid)
        await checkpointer.begin_effect(effect)  # row version 1
        second = effect.replace(attempts=(*effect.attempts, Attempt(2, 3_010.0)), row_version=2)
        await checkpointer.save_effect(second)
        # A writer that read version 1 too (it would start attempt 2 as well) loses.
        rival = effect.replace(status=EffectStatus.COMPLETED, result="rival", row_version=2)
        with pytest.raises(StaleStateError, match="changed since it was read"):
            await checkpointer.save_effect(rival)
        for stale in (1, 2, 4):  # not the next version (3): refused, nothing written
            with pytest.raises(StaleStateError):
                await checkpointer.save_effect(second.replace(result=stale, row_version=stale))
        assert await checkpointer.get_effect(effect.effect_id) == second
        # Concurrent writers of the same next version: exactly one wins.
        tries = [second.replace(result=i, row_version=3) for i in range(5)]
        outcomes = await asyncio.gather(
            *(checkpointer.save_effect(t) for t in tries), return_exceptions=True
        )
        assert sum(o is None for o in outcomes) == 1
        assert all(isinstance(o, StaleStateError) for o in outcomes if o is not None)
        got = await checkpointer.get_effect(effect.effect_id)
        assert got is not None and got.row_version == 3 and got.result in range(5)

    async def test_fenced_effect_and_task_writes(self, checkpointer: Checkpointer) -> None:
        tid, _, cp = await start_thread(checkpointer)
        run_b = new_id("run")
        await checkpointer.create_run(make_run(tid, run_b, fencing_token=4))
        effect = make_effect(run_b, tid)
        with pytest.raises(LeaseLostError):
            await checkpointer.begin_effect(effect, fence=3)
        assert await checkpointer.get_effect(effect.effect_id) is None
        stored, created = await checkpointer.begin_effect(effect, fence=4)
        assert created and stored == effect
        with pytest.raises(LeaseLostError):  # an existing record is not returned to it
            await checkpointer.begin_effect(effect, fence=3)
        done = effect.replace(status=EffectStatus.COMPLETED, result="ok", row_version=2)
        with pytest.raises(LeaseLostError):
            await checkpointer.save_effect(done, fence=3)
        assert await checkpointer.get_effect(effect.effect_id) == effect
        await checkpointer.save_effect(done, fence=4)
        assert await checkpointer.get_effect(effect.effect_id) == done
        write = TaskWrite(tid, cp.checkpoint_id, "agent", WriteKind.WRITES, 0, {"update": {}})
        with pytest.raises(LeaseLostError):
            await checkpointer.put_task_write(write, run_id=run_b, fence=5)
        with pytest.raises(RunNotFoundError):
            await checkpointer.put_task_write(write, run_id=new_id("run"), fence=1)
        assert await checkpointer.get_task_writes(tid, cp.checkpoint_id) == []
        await checkpointer.put_task_write(write, run_id=run_b, fence=4)
        assert [w.task for w in await checkpointer.get_task_writes(tid, cp.checkpoint_id)] == [
            "agent"
        ]
        with pytest.raises(RunNotFoundError):
            await checkpointer.begin_effect(make_effect(new_id("run"), tid), fence=1)

    async def test_fence_run_takes_a_run_over_by_compare_and_set(
        self, checkpointer: Checkpointer
    ) -> None:
        tid, _, _ = await start_thread(checkpointer)
        run_id = new_id("run")
        await checkpointer.create_run(make_run(tid, run_id, fencing_token=2))
        taken = await checkpointer.fence_run(
            run_id, expected_token=2, owner="host:1:a", status=RunStatus.RUNNING
        )
        assert taken is not None
        assert (taken.fencing_token, taken.lease_owner, taken.status) == (
            3,
            "host:1:a",
            RunStatus.RUNNING,
        )
        assert taken.lease_expires_at is None
        assert await checkpointer.get_run(run_id) == taken
        # a second taker that read token 2 too loses, and writes nothing
        assert await checkpointer.fence_run(run_id, expected_token=2, owner="other") is None
        assert await checkpointer.get_run(run_id) == taken
        # without a status, the status and error stay
        again = await checkpointer.fence_run(run_id, expected_token=3, owner="op")
        assert again is not None and again.status is RunStatus.RUNNING
        assert again.fencing_token == 4 and again.lease_owner == "op"
        stopped = await checkpointer.fence_run(
            run_id, expected_token=4, owner="op", status=RunStatus.ABANDONED, error="no"
        )
        assert stopped is not None and (stopped.status, stopped.error) == (
            RunStatus.ABANDONED,
            "no",
        )
        # the old holder's writes are fenced out
        with pytest.raises(LeaseLostError):
            await checkpointer.update_run(run_id, status=RunStatus.COMPLETED, fence=3)
        with pytest.raises(RunNotFoundError):
            await checkpointer.fence_run(new_id("run"), expected_token=0, owner="x")
        racers = await asyncio.gather(
            *(checkpointer.fence_run(run_id, expected_token=5, owner=f"r{i}") for i in range(5))
        )
        assert sum(r is not None for r in racers) == 1

    async def test_audit_is_appended_and_listed_newest_first(
        self, checkpointer: Checkpointer
    ) -> None:
        tid, rid, _ = await start_thread(checkpointer)
        made = [
            AuditRecord(
                audit_id=new_id("aud"),
                actor=f"op{i}",
                action="continue" if i % 2 else "resolve_effect",
                target_kind="run",
                target_id=rid if i < 3 else "eff_x",
                run_id=rid,
                thread_id=tid,
                reason=f"because {i}",
                details={"before": "failed", "i": i},
                at=5_000.0 + i,
            )
            for i in range(5)
        ]
        for record in made:
            await checkpointer.append_audit(record)
        with pytest.raises(StorageError):  # never replaced
            await checkpointer.append_audit(dataclasses.replace(made[0], reason="rewritten"))
        got = await checkpointer.list_audit(run_id=rid)
        assert got == list(reversed(made))
        assert await checkpointer.list_audit(thread_id=tid, limit=2) == [made[4], made[3]]
        assert await checkpointer.list_audit(target_id="eff_x") == [made[4], made[3]]
        assert await checkpointer.list_audit(run_id=rid, before=5_002.0) == [made[1], made[0]]
        assert await checkpointer.list_audit(run_id=new_id("run")) == []
        if isinstance(checkpointer, Pruner):
            await checkpointer.prune(keep_checkpoints=1, effects_older_than=0)
        assert len(await checkpointer.list_audit(run_id=rid)) == 5  # a prune keeps them

    async def test_audit_is_listed_for_an_app_and_a_tenant(
        self, checkpointer: Checkpointer
    ) -> None:
        """``list_audit(app_id=..., tenant=...)``: the records whose run is that app's
        (and that tenant's; a run with no tenant is none's), and those with no run or
        whose run the store does not hold, newest first and cut at the limit after the
        filter, however many newer records other apps wrote."""
        app, other, tenant = new_id("app"), new_id("app"), new_id("tenant")
        runs = [
            make_run(new_id("thread"), workflow_name=app, tenant=tenant),
            make_run(new_id("thread"), workflow_name=app),
            make_run(new_id("thread"), workflow_name=other, tenant=tenant),
        ]
        for run in runs:
            await checkpointer.create_run(run)
        owners = [0, 1, None, "gone", *[2] * 6]  # the newest six are the other app's

        def run_of(owner: int | str | None) -> str | None:
            if owner is None or owner == "gone":  # no run; a run the store does not hold
                return None if owner is None else new_id("run")
            return runs[int(owner)].run_id

        made = [
            AuditRecord(
                audit_id=new_id("aud"),
                actor="op",
                action="continue",
                target_kind="run",
                target_id=f"target-{i}",
                run_id=run_of(owner),
                at=6_000.0 + i,
            )
            for i, owner in enumerate(owners)
        ]
        for record in made:
            await checkpointer.append_audit(record)
        newest = made[::-1]
        assert await checkpointer.list_audit(app_id=app, limit=3) == [made[3], made[2], made[1]]
        assert await checkpointer.list_audit(app_id=app) == [made[3], made[2], made[1], made[0]]
        assert await checkpointer.list_audit(app_id=app, tenant=tenant) == [
            made[3],
            made[2],
            made[0],
        ]
        assert await checkpointer.list_audit(app_id=app, before=6_003.0, limit=1) == [made[2]]
        assert await checkpointer.list_audit(app_id=other, limit=2) == newest[:2]
        assert await checkpointer.list_audit(tenant=tenant, limit=100) == [
            r for r in newest if owners[made.index(r)] in (0, 2, None, "gone")
        ]
        assert await checkpointer.list_audit(app_id=app, target_id="target-0") == [made[0]]

    async def test_audit_pages_by_record_keep_records_of_one_instant(
        self, checkpointer: Checkpointer
    ) -> None:
        """``before=(at, audit_id)`` lists the records after that record in the log's
        order (``at``, then ``audit_id``, newest first): page after page, records written
        in one instant are neither skipped nor repeated; ``before=at`` gives the older
        records only."""
        tid, rid, _ = await start_thread(checkpointer)
        made = [
            AuditRecord(
                audit_id=f"{new_id('aud')}-{i}",
                actor="op",
                action="continue",
                target_kind="run",
                target_id=rid,
                run_id=rid,
                thread_id=tid,
                at=7_000.0 + (i >= 1) + (i >= 4),  # records 1 to 3 share one instant
            )
            for i in range(5)
        ]
        for record in made:
            await checkpointer.append_audit(record)
        newest = sorted(made, key=lambda r: (r.at, r.audit_id), reverse=True)
        paged: list[AuditRecord] = []
        position: tuple[float, str] | None = None
        while page := await checkpointer.list_audit(run_id=rid, limit=2, before=position):
            paged += page
            position = (page[-1].at, page[-1].audit_id)
        assert paged == newest
        assert await checkpointer.list_audit(run_id=rid, before=7_001.0) == [made[0]]
        tied = [r for r in newest if r.at == 7_001.0]
        after = await checkpointer.list_audit(run_id=rid, before=(tied[0].at, tied[0].audit_id))
        assert after == [*tied[1:], made[0]]

    async def test_audit_rides_with_its_change_or_not_at_all(
        self, checkpointer: Checkpointer
    ) -> None:
        tid, _, _ = await start_thread(checkpointer)
        run_id = new_id("run")
        await checkpointer.create_run(make_run(tid, run_id, fencing_token=1))

        def audit(action: str) -> AuditRecord:
            return AuditRecord(
                audit_id=new_id("aud"),
                actor="op",
                action=action,
                target_kind="run",
                target_id=run_id,
                run_id=run_id,
            )

        lost = await checkpointer.fence_run(
            run_id, expected_token=0, owner="x", audit=audit("lost")
        )
        assert lost is None
        won = await checkpointer.fence_run(run_id, expected_token=1, owner="x", audit=audit("won"))
        assert won is not None
        effect = make_effect(run_id, tid)
        await checkpointer.begin_effect(effect)
        with pytest.raises(StaleStateError):
            await checkpointer.save_effect(effect.replace(row_version=5), audit=audit("stale"))
        await checkpointer.save_effect(effect.replace(row_version=2), audit=audit("saved"))
        actions = [a.action for a in await checkpointer.list_audit(run_id=run_id)]
        assert sorted(actions) == ["saved", "won"]

    async def test_lock_run_is_exclusive_and_released(self, checkpointer: Checkpointer) -> None:
        first = await checkpointer.lock_run("run_locked")
        assert first is not None and first.run_id == "run_locked" and not first.lost
        assert await checkpointer.lock_run("run_locked") is None  # held, in this process too
        other = await checkpointer.lock_run("run_other")
        assert other is not None  # locks are per run
        await first.release()
        await first.release()  # idempotent
        again = await checkpointer.lock_run("run_locked")
        assert again is not None
        await again.release()
        await other.release()

    async def test_list_effects_by_run_thread_status_in_creation_order(
        self, checkpointer: Checkpointer
    ) -> None:
        tid, run_a, _ = await start_thread(checkpointer)
        run_b = new_id("run")
        await checkpointer.create_run(make_run(tid, run_b))
        other_tid, run_c, _ = await start_thread(checkpointer)
        specs = [  # (run, status, created_at) - inserted out of creation order
            (run_a, EffectStatus.PENDING, 3_005.0),
            (run_a, EffectStatus.COMPLETED, 3_001.0),
            (run_b, EffectStatus.ACCEPTED, 3_003.0),
            (run_a, EffectStatus.FAILED, 3_002.0),
            (run_b, EffectStatus.COMPLETED, 3_004.0),
        ]
        effects = [
            make_effect(r, tid, f"msg:{i}", status=s, created_at=c)
            for i, (r, s, c) in enumerate(specs)
        ]
        for e in effects:
            await checkpointer.begin_effect(e)
        await checkpointer.begin_effect(make_effect(run_c, other_tid, created_at=3_000.5))

        def order(*idx: int) -> list[EffectRecord]:
            return [effects[i] for i in idx]

        assert await checkpointer.list_effects(run_id=run_a) == order(1, 3, 0)
        assert await checkpointer.list_effects(run_id=run_b) == order(2, 4)
        assert await checkpointer.list_effects(thread_id=tid) == order(1, 3, 2, 4, 0)
        done = await checkpointer.list_effects(thread_id=tid, statuses=[EffectStatus.COMPLETED])
        assert done == order(1, 4)
        unsure = await checkpointer.list_effects(
            run_id=run_b, statuses=[EffectStatus.PENDING, EffectStatus.ACCEPTED]
        )
        assert unsure == order(2)
        assert await checkpointer.list_effects(run_id=run_a, thread_id=other_tid) == []
        # pages: limit and offset over the same order, without gaps or repeats
        assert await checkpointer.list_effects(thread_id=tid, limit=2) == order(1, 3)
        assert await checkpointer.list_effects(thread_id=tid, limit=2, offset=2) == order(2, 4)
        assert await checkpointer.list_effects(thread_id=tid, limit=2, offset=4) == order(0)
        assert await checkpointer.list_effects(thread_id=tid, offset=3) == order(4, 0)
        assert await checkpointer.list_effects(thread_id=tid, limit=0) == []

    async def test_effect_payloads_are_the_listed_effects_type_request_and_result(
        self, checkpointer: Checkpointer
    ) -> None:
        """What masking reads: each effect's type, request and result, in the order and
        with the filters of list_effects, and no result when not asked for one."""
        tid, run_a, _ = await start_thread(checkpointer)
        run_b = new_id("run")
        await checkpointer.create_run(make_run(tid, run_b))
        other_tid, run_c, _ = await start_thread(checkpointer)
        late = make_effect(run_a, tid, "msg:0", request={"card": "4242 4242"}, created_at=3_009.0)
        early = make_effect(run_b, tid, "msg:1", request=["a", {"b": 2}], created_at=3_001.0)
        middle = make_effect(run_a, tid, "msg:2", created_at=3_004.0).replace(effect_type="model")
        for e in (late, early, middle):
            await checkpointer.begin_effect(e)
        await checkpointer.begin_effect(make_effect(run_c, other_tid, created_at=3_000.5))
        done = early.replace(
            status=EffectStatus.COMPLETED, result={"tool_calls": [1]}, row_version=2
        )
        await checkpointer.save_effect(done)

        def payloads(records: list[EffectRecord], results: bool = True) -> list[Any]:
            return [
                (r.effect_type, r.request, r.result if results else None) for r in records
            ]

        mine = await checkpointer.list_effects(thread_id=tid)
        assert [e.effect_id for e in mine] == [early.effect_id, middle.effect_id, late.effect_id]
        found = await checkpointer.list_effect_payloads(thread_id=tid)
        assert [tuple(p) for p in found] == payloads(mine)
        assert found[0].result == {"tool_calls": [1]} and found[1].effect_type == "model"
        bare = await checkpointer.list_effect_payloads(thread_id=tid, results=False)
        assert [tuple(p) for p in bare] == payloads(mine, results=False)
        by_run = await checkpointer.list_effect_payloads(run_id=run_a)
        assert [tuple(p) for p in by_run] == payloads(await checkpointer.list_effects(run_id=run_a))
        assert len(by_run) == 2
        assert await checkpointer.list_effect_payloads(run_id=run_a, thread_id=other_tid) == []
        # several threads in one read: their effects, in list_effects order across them
        both = await checkpointer.list_effect_payloads(thread_ids=[other_tid, tid, "t-none"])
        everyone = [
            e for e in await checkpointer.list_effects() if e.thread_id in (tid, other_tid)
        ]
        assert [tuple(p) for p in both] == payloads(everyone) and len(both) == 4
        assert await checkpointer.list_effect_payloads(thread_ids=[]) == []
        assert await checkpointer.list_effect_payloads(thread_ids=["t-none"]) == []

    async def test_folded_effects_saved_in_commit(self, checkpointer: Checkpointer) -> None:
        tid, rid, cp1 = await start_thread(checkpointer)
        pending = make_effect(rid, tid)
        await checkpointer.begin_effect(pending)
        folded_new = make_effect(rid, tid, "msg_1:call_2", status=EffectStatus.COMPLETED)
        cp2 = make_checkpoint(tid, rid, 2, parent=cp1.checkpoint_id)
        done = pending.replace(
            status=EffectStatus.COMPLETED,
            result={"ok": 1},
            provider_reference="p1",
            checkpoint_id=cp2.checkpoint_id,
            request_hash="sha256:ignored",
        )
        await checkpointer.commit(
            StepCommit(
                thread_id=tid,
                expected_version=1,
                checkpoint=cp2,
                effects=[done, folded_new],
            )
        )
        got = await checkpointer.get_effect(pending.effect_id)
        assert got is not None
        assert (got.status, got.result, got.provider_reference) == (
            EffectStatus.COMPLETED,
            {"ok": 1},
            "p1",
        )
        assert got.request_hash == pending.request_hash
        assert await checkpointer.get_effect(folded_new.effect_id) == folded_new

    async def test_planned_intents_are_inserted_never_overwriting(
        self, checkpointer: Checkpointer
    ) -> None:
        tid, rid, cp1 = await start_thread(checkpointer)
        done = make_effect(rid, tid, "msg_1:call_1", status=EffectStatus.COMPLETED)
        await checkpointer.begin_effect(done.replace(row_version=1))
        again = done.replace(status=EffectStatus.PENDING, attempts=(), row_version=1)
        # a planned intent: a write call's, nothing attempted yet (oncegraph.ledger.planned)
        planned = make_effect(rid, tid, "msg_2:call_1").replace(
            attempts=(), effect_class=EffectClass.WRITE
        )
        cp2 = make_checkpoint(tid, rid, 2, parent=cp1.checkpoint_id)
        inserted = await checkpointer.commit(
            StepCommit(thread_id=tid, expected_version=1, checkpoint=cp2, intents=[planned, again])
        )
        # it says how many it inserted (None: cannot tell), never more than it did
        assert inserted in (1, None), "one of the two intents was new"
        assert await checkpointer.get_effect(planned.effect_id) == planned
        kept = await checkpointer.get_effect(done.effect_id)
        assert kept is not None and kept.status is EffectStatus.COMPLETED, "never overwritten"
        # a lost CAS writes no intent either
        late = make_effect(rid, tid, "msg_3:call_1").replace(
            attempts=(), effect_class=EffectClass.WRITE
        )
        stale = make_checkpoint(tid, rid, 2, parent=cp1.checkpoint_id)
        with pytest.raises(StaleStateError):
            await checkpointer.commit(
                StepCommit(thread_id=tid, expected_version=1, checkpoint=stale, intents=[late])
            )
        assert await checkpointer.get_effect(late.effect_id) is None

    # -- values -----------------------------------------------------------------------

    async def test_json_round_trip(self, checkpointer: Checkpointer) -> None:
        tid, rid = new_id("thread"), new_id("run")
        cp = make_checkpoint(
            tid, rid, 1, values={"state": NESTED, "list": [NESTED]}, metadata={"m": NESTED}
        )
        run = make_run(tid, rid, input=NESTED, config={"c": NESTED})
        await checkpointer.commit(
            StepCommit(
                thread_id=tid,
                expected_version=0,
                checkpoint=cp,
                new_run=run,
                log=[LogEntry("messages", 0, NESTED), LogEntry("messages", 1, None)],
            )
        )
        await checkpointer.put_task_write(
            TaskWrite(tid, cp.checkpoint_id, "t", WriteKind.WRITES, 0, NESTED)
        )
        effect = make_effect(rid, tid, request=NESTED, result=[NESTED])
        await checkpointer.begin_effect(effect)
        got_cp = await checkpointer.get_checkpoint(tid)
        assert got_cp is not None
        assert got_cp.values == {"state": NESTED, "list": [NESTED]}
        assert got_cp.metadata == {"m": NESTED}
        got_run = await checkpointer.get_run(rid)
        assert got_run is not None
        assert (got_run.input, got_run.config) == (NESTED, {"c": NESTED})
        assert await checkpointer.read_log(tid, "messages", 2) == [NESTED, None]
        (write,) = await checkpointer.get_task_writes(tid, cp.checkpoint_id)
        assert write.value == NESTED
        got_effect = await checkpointer.get_effect(effect.effect_id)
        assert got_effect is not None
        assert (got_effect.request, got_effect.result) == (NESTED, [NESTED])
        big = got_cp.values["state"]["big"]
        assert big == 2**63 - 1 and isinstance(big, int)
        assert isinstance(got_cp.values["state"]["float"], float)

    async def test_sql_metacharacters_are_data(self, checkpointer: Checkpointer) -> None:
        # Quotes, backslashes, placeholders, statement separators and comments in every
        # text a step writes come back unchanged, and the step still commits as a whole.
        tid, rid = new_id("thread") + "'; -- %s $1", new_id("run")
        cp1 = make_checkpoint(tid, rid, 1)
        first = StepCommit(tid, 0, cp1, new_run=make_run(tid, rid))
        await checkpointer.commit(first)
        cp2 = make_checkpoint(
            tid, rid, 2, parent=cp1.checkpoint_id, values={"v": HOSTILE}, metadata={HOSTILE: 1}
        )
        effect = make_effect(rid, tid, request={"q": HOSTILE}, result=HOSTILE)
        await checkpointer.commit(
            StepCommit(
                thread_id=tid,
                expected_version=1,
                checkpoint=cp2,
                log=[LogEntry("messages", 0, HOSTILE)],
                effects=[effect],
                run_status=RunStatus.FAILED,
                run_error=HOSTILE,
            )
        )
        got = await checkpointer.get_checkpoint(tid)
        assert got is not None
        assert (got.values, got.metadata) == ({"v": HOSTILE}, {HOSTILE: 1})
        assert await checkpointer.read_log(tid, "messages", 1) == [HOSTILE]
        run = await checkpointer.get_run(rid)
        assert run is not None and (run.status, run.error) == (RunStatus.FAILED, HOSTILE)
        saved = await checkpointer.get_effect(effect.effect_id)
        assert saved is not None and (saved.request, saved.result) == ({"q": HOSTILE}, HOSTILE)
        thread = await checkpointer.get_thread(tid)
        assert thread is not None and thread.version == 2

    async def test_nul_in_free_text_is_kept_visible(self, checkpointer: Checkpointer) -> None:
        # PostgreSQL text cannot hold NUL: every store keeps such descriptions as "\\x00"
        tid, rid = new_id("thread"), new_id("run")
        run = make_run(tid, rid, error="boom\x00")
        await checkpointer.create_run(run)
        effect = make_effect(rid, tid, error="bad\x00byte", provider_reference="ref\x00")
        effect = effect.replace(recipient="a\x00b")
        await checkpointer.begin_effect(effect)
        created = await checkpointer.get_run(rid)
        assert created is not None and created.error == "boom\\x00"
        await checkpointer.update_run(rid, status=RunStatus.FAILED, error="update\x00d")
        got = await checkpointer.get_effect(effect.effect_id)
        assert got is not None
        assert (got.error, got.recipient, got.provider_reference) == (
            "bad\\x00byte",
            "a\\x00b",
            "ref\\x00",
        )
        stored = await checkpointer.get_run(rid)
        assert stored is not None and stored.error == "update\\x00d"
        # and through a step commit
        cp = make_checkpoint(tid, new_id("run"), 1)
        step = StepCommit(
            tid,
            0,
            cp,
            new_run=make_run(tid, cp.run_id),
            run_status=RunStatus.FAILED,
            run_error="step\x00",
        )
        await checkpointer.commit(step)
        committed = await checkpointer.get_run(cp.run_id)
        assert committed is not None and committed.error == "step\\x00"

    async def test_app_records_a_failure_whose_message_holds_nul(
        self, checkpointer: Checkpointer
    ) -> None:
        from oncegraph import END, START, StateGraph

        def fails(state: PruneState) -> dict[str, Any]:
            raise ValueError("bad\x00byte")

        g = StateGraph(PruneState)
        g.add_node("fails", fails)
        g.add_edge(START, "fails")
        g.add_edge("fails", END)
        app = g.compile(checkpointer=checkpointer)
        tid = new_id("thread")
        with pytest.raises(ValueError, match="bad"):  # the node's own error, as in LangGraph
            await app.ainvoke({"log": ["x\x00y"]}, {"thread_id": tid})
        [run] = await checkpointer.list_runs(thread_id=tid)
        assert run.status is RunStatus.FAILED
        assert run.error is not None and run.error.endswith("ValueError: bad\\x00byte")

    async def test_json_normalizes_like_json(self, checkpointer: Checkpointer) -> None:
        # state arrives encoded by its schema: tuples come back as lists on every backend
        # alike, and what JSON would silently change (int keys, datetimes, sets) is
        # refused naming the field, with nothing written
        tid, rid = new_id("thread"), new_id("run")
        cp = make_checkpoint(tid, rid, 1, values={"pair": (1, 2), "keys": {"1": "one"}})
        await checkpointer.commit(
            StepCommit(thread_id=tid, expected_version=0, checkpoint=cp, new_run=make_run(tid, rid))
        )
        got = await checkpointer.get_checkpoint(tid)
        assert got is not None
        assert got.values == {"pair": [1, 2], "keys": {"1": "one"}}
        before = await snapshot(checkpointer, tid, [rid])
        for value in ({1: "one"}, datetime.datetime(2024, 1, 1), {"a"}):
            bad = make_checkpoint(tid, rid, 2, values={"ok": 1, "field": value})
            with pytest.raises(InvalidUpdateError, match="state field 'field'"):
                await checkpointer.commit(
                    StepCommit(thread_id=tid, expected_version=1, checkpoint=bad)
                )
            with pytest.raises(InvalidUpdateError, match="state field 'messages'"):
                await checkpointer.commit(
                    StepCommit(
                        thread_id=tid,
                        expected_version=1,
                        checkpoint=make_checkpoint(tid, rid, 2),
                        log=[LogEntry("messages", 0, {"at": value})],
                    )
                )
        assert await snapshot(checkpointer, tid, [rid]) == before

    async def test_values_are_not_aliases(self, checkpointer: Checkpointer) -> None:
        tid, rid = new_id("thread"), new_id("run")
        values: dict[str, Any] = {"items": [1, 2], "inner": {"k": "v"}}
        log_value: dict[str, Any] = {"content": "hi"}
        cp = make_checkpoint(tid, rid, 1, values=values)
        await checkpointer.commit(
            StepCommit(
                thread_id=tid,
                expected_version=0,
                checkpoint=cp,
                new_run=make_run(tid, rid, config={"a": [1]}),
                log=[LogEntry("messages", 0, log_value)],
            )
        )
        result: dict[str, Any] = {"r": [1]}
        effect = make_effect(rid, tid, result=result)
        await checkpointer.begin_effect(effect)
        # mutate what we passed in
        values["items"].append(3)
        values["inner"]["k"] = "changed"
        log_value["content"] = "changed"
        result["r"].append(2)
        # mutate what we got back
        got = await checkpointer.get_checkpoint(tid)
        assert got is not None
        got.values["items"].append(99)
        got.metadata["x"] = 1  # type: ignore[index]
        (entry,) = await checkpointer.read_log(tid, "messages", 1)
        entry["content"] = "mutated"
        got_run = await checkpointer.get_run(rid)
        assert got_run is not None
        got_run.config["a"].append(2)
        got_effect = await checkpointer.get_effect(effect.effect_id)
        assert got_effect is not None
        got_effect.result["r"].append(3)
        stored, _ = await checkpointer.begin_effect(effect)
        stored.result["r"].append(4)
        # the store still holds the original values
        again = await checkpointer.get_checkpoint(tid)
        assert again is not None
        assert again.values == {"items": [1, 2], "inner": {"k": "v"}}
        assert again.metadata == {"source": "loop"}
        assert await checkpointer.read_log(tid, "messages", 1) == [{"content": "hi"}]
        run_again = await checkpointer.get_run(rid)
        assert run_again is not None and run_again.config == {"a": [1]}
        effect_again = await checkpointer.get_effect(effect.effect_id)
        assert effect_again is not None and effect_again.result == {"r": [1]}

    # -- retention (prune) ------------------------------------------------------------

    async def test_is_a_pruner(self, checkpointer: Checkpointer) -> None:
        assert isinstance(checkpointer, Pruner)

    async def test_prune_keeps_head_and_newest_n(self, checkpointer: Checkpointer) -> None:
        store = as_pruner(checkpointer)
        tid, runs = await build_history(checkpointer, [RunStatus.COMPLETED] * 3)
        other, _ = await build_history(checkpointer, [RunStatus.COMPLETED] * 2)
        other_before = await snapshot(checkpointer, other, [])
        cps = [cp for _, run_cps in runs for cp in run_cps]
        report = await store.prune(keep_checkpoints=3, thread_id=tid)
        assert report == PruneReport(threads=1, checkpoints=3, task_writes=3, effects=0)
        assert await checkpointer.list_checkpoints(tid) == cps[:2:-1]  # v6, v5, v4
        for cp in cps[:3]:
            assert await checkpointer.get_checkpoint(tid, cp.checkpoint_id) is None
            assert await checkpointer.get_task_writes(tid, cp.checkpoint_id) == []
        for cp in cps[3:]:
            (write,) = await checkpointer.get_task_writes(tid, cp.checkpoint_id)
            assert write.value == {"v": cp.version}
        # log entries are never pruned: the head needs all of them
        assert await checkpointer.read_log(tid, "messages", 100) == [f"m{i}" for i in range(6)]
        report = await store.prune(keep_checkpoints=1, thread_id=tid)
        assert (report.checkpoints, report.task_writes) == (2, 2)
        assert await checkpointer.list_checkpoints(tid) == [cps[-1]]
        assert await checkpointer.get_checkpoint(tid) == cps[-1]
        assert await snapshot(checkpointer, other, []) == other_before

    async def test_prune_keeps_checkpoints_of_unfinished_runs(
        self, checkpointer: Checkpointer
    ) -> None:
        store = as_pruner(checkpointer)
        for status in sorted(UNFINISHED_STATUSES):
            tid, runs = await build_history(
                checkpointer, [RunStatus.ABANDONED, status, RunStatus.COMPLETED]
            )
            (_, gone), (open_run, kept), (_, last) = runs
            report = await store.prune(keep_checkpoints=1, thread_id=tid)
            assert (report.checkpoints, report.task_writes) == (3, 3), status
            remaining = await checkpointer.list_checkpoints(tid)
            assert remaining == [last[-1], kept[1], kept[0]], status
            assert await checkpointer.list_checkpoints(tid, run_id=open_run) == kept[::-1]
            for cp in kept:
                assert len(await checkpointer.get_task_writes(tid, cp.checkpoint_id)) == 1
            for cp in [*gone, last[0]]:
                assert await checkpointer.get_checkpoint(tid, cp.checkpoint_id) is None
                assert await checkpointer.get_task_writes(tid, cp.checkpoint_id) == []

    async def test_prune_effects_only_finished_old_of_finished_runs(
        self, checkpointer: Checkpointer
    ) -> None:
        store = as_pruner(checkpointer)
        tid, runs = await build_history(
            checkpointer, [RunStatus.COMPLETED, RunStatus.ABANDONED, RunStatus.INTERRUPTED]
        )
        (done, _), (abandoned, _), (open_run, _) = runs
        fresh = now() - 1.0
        doomed = [
            make_effect(done, tid, "c:1", status=EffectStatus.COMPLETED),
            make_effect(done, tid, "c:2", status=EffectStatus.FAILED),
            make_effect(abandoned, tid, "c:3", status=EffectStatus.COMPLETED),
        ]
        kept = [
            make_effect(done, tid, "c:4", status=EffectStatus.PENDING),
            make_effect(done, tid, "c:5", status=EffectStatus.ACCEPTED),
            make_effect(abandoned, tid, "c:6", status=EffectStatus.PENDING),
            make_effect(done, tid, "c:7", status=EffectStatus.COMPLETED, created_at=fresh),
            make_effect(open_run, tid, "c:8", status=EffectStatus.COMPLETED),
            make_effect(open_run, tid, "c:9", status=EffectStatus.FAILED),
            make_effect(new_id("run"), tid, "c:10", status=EffectStatus.COMPLETED),  # no run row
        ]
        other, ((other_run, _),) = await build_history(checkpointer, [RunStatus.COMPLETED])
        elsewhere = make_effect(other_run, other, "c:11", status=EffectStatus.COMPLETED)
        for e in [*doomed, *kept, elsewhere]:
            await checkpointer.begin_effect(e)
        # without effects_older_than no effect is touched
        report = await store.prune(keep_checkpoints=100, thread_id=tid)
        assert report == PruneReport(threads=1)
        report = await store.prune(keep_checkpoints=100, effects_older_than=3_600.0, thread_id=tid)
        assert report == PruneReport(threads=1, effects=3)
        for e in doomed:
            assert await checkpointer.get_effect(e.effect_id) is None
        assert await ids_of(checkpointer.list_effects(thread_id=tid)) == ids(kept)
        assert await checkpointer.get_effect(elsewhere.effect_id) == elsewhere
        # an age of 0 takes the fresh completed one too, never the others
        report = await store.prune(keep_checkpoints=100, effects_older_than=0, thread_id=tid)
        assert report.effects == 1
        remaining = ids(kept[:3] + kept[4:])
        assert await ids_of(checkpointer.list_effects(thread_id=tid)) == remaining

    async def test_prune_dry_run_counts_exactly_and_deletes_nothing(
        self, checkpointer: Checkpointer
    ) -> None:
        store = as_pruner(checkpointer)
        tid, runs = await build_history(checkpointer, [RunStatus.COMPLETED] * 3)
        other, _ = await build_history(checkpointer, [RunStatus.COMPLETED] * 2)
        (done, _) = runs[0]
        effect = make_effect(done, tid, "c:1", status=EffectStatus.COMPLETED)
        await checkpointer.begin_effect(effect)
        before = {t: await checkpointer.list_checkpoints(t) for t in (tid, other)}
        seen: list[PruneReport] = []
        dry = await store.prune(
            keep_checkpoints=1, effects_older_than=0, dry_run=True, on_thread=seen.append
        )
        assert dry.threads == 2 and dry.checkpoints > 0 and dry.effects == 1
        assert len(seen) == 2 and sum(r.checkpoints for r in seen) == dry.checkpoints
        for t, cps in before.items():
            assert await checkpointer.list_checkpoints(t) == cps  # nothing deleted
        assert await checkpointer.get_effect(effect.effect_id) is not None
        real = await store.prune(keep_checkpoints=1, effects_older_than=0)
        assert real == dry
        assert await checkpointer.get_effect(effect.effect_id) is None

    async def test_prune_is_idempotent(self, checkpointer: Checkpointer) -> None:
        store = as_pruner(checkpointer)
        tid, runs = await build_history(
            checkpointer, [RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.COMPLETED]
        )
        await checkpointer.begin_effect(make_effect(runs[0][0], tid, status=EffectStatus.COMPLETED))
        first = await store.prune(keep_checkpoints=2, effects_older_than=60.0, thread_id=tid)
        assert (first.checkpoints, first.effects) == (2, 1)
        after = await snapshot(checkpointer, tid, [rid for rid, _ in runs])
        again = await store.prune(keep_checkpoints=2, effects_older_than=60.0, thread_id=tid)
        assert again == PruneReport(threads=1)
        assert await snapshot(checkpointer, tid, [rid for rid, _ in runs]) == after

    async def test_prune_unknown_thread_and_bad_arguments(self, checkpointer: Checkpointer) -> None:
        store = as_pruner(checkpointer)
        assert await store.prune(thread_id=new_id("thread")) == PruneReport()
        tid, _ = await build_history(checkpointer, [RunStatus.COMPLETED] * 2)
        before = await snapshot(checkpointer, tid, [])
        for bad in (
            {"keep_checkpoints": 0},
            {"keep_checkpoints": -1},
            {"effects_older_than": -1.0},
        ):
            with pytest.raises(ConfigError):
                await store.prune(thread_id=tid, **bad)
        assert await snapshot(checkpointer, tid, []) == before

    async def test_pruned_thread_loads_and_continues(self, checkpointer: Checkpointer) -> None:
        store = as_pruner(checkpointer)
        tid, runs = await build_history(checkpointer, [RunStatus.COMPLETED] * 2)
        head = runs[-1][1][-1]
        await store.prune(keep_checkpoints=1, thread_id=tid)
        assert await checkpointer.get_checkpoint(tid) == head
        thread = await checkpointer.get_thread(tid)
        assert thread is not None
        assert (thread.version, thread.head_checkpoint_id) == (4, head.checkpoint_id)
        rid = new_id("run")
        cp5 = make_checkpoint(tid, rid, 5, parent=head.checkpoint_id, logs={"messages": 5})
        await checkpointer.commit(
            StepCommit(
                thread_id=tid,
                expected_version=4,
                checkpoint=cp5,
                log=[LogEntry("messages", 4, "m4")],
                new_run=make_run(tid, rid),
                clear_task_writes_of=head.checkpoint_id,
            )
        )
        assert await checkpointer.get_checkpoint(tid) == cp5
        assert await checkpointer.read_log(tid, "messages", 5) == [f"m{i}" for i in range(5)]

    async def test_prune_every_thread(self, checkpointer: Checkpointer) -> None:
        # Prunes the whole store: a backend fixture must give each test its own database.
        store = as_pruner(checkpointer)
        threads = [await build_history(checkpointer, [RunStatus.COMPLETED] * 2) for _ in range(3)]
        report = await store.prune(keep_checkpoints=1)
        assert report.threads >= 3
        assert report.checkpoints >= 9
        for tid, runs in threads:
            assert await checkpointer.list_checkpoints(tid) == [runs[-1][1][-1]]

    async def test_prune_racing_commits(self, checkpointer: Checkpointer) -> None:
        store = as_pruner(checkpointer)
        tid, first_run, cp = await start_thread(checkpointer)
        await checkpointer.update_run(first_run, status=RunStatus.COMPLETED)
        steps = 30
        done = asyncio.Event()
        reports: list[PruneReport] = []

        async def write() -> CheckpointRecord:
            head = cp
            for v in range(2, steps + 2):
                rid = new_id("run")
                nxt = make_checkpoint(tid, rid, v, parent=head.checkpoint_id, logs={"messages": v})
                await checkpointer.commit(  # never stale: this is the only writer
                    StepCommit(
                        thread_id=tid,
                        expected_version=v - 1,
                        checkpoint=nxt,
                        log=[LogEntry("messages", v - 2, v)],
                        new_run=make_run(tid, rid),
                        run_status=RunStatus.COMPLETED,
                    )
                )
                head = nxt
                await asyncio.sleep(0)
            done.set()
            return head

        async def prune() -> None:
            while not done.is_set():
                reports.append(await store.prune(keep_checkpoints=1, thread_id=tid))
                await asyncio.sleep(0)

        head, _ = await asyncio.gather(write(), prune())
        reports.append(await store.prune(keep_checkpoints=1, thread_id=tid))
        assert await checkpointer.list_checkpoints(tid) == [head]
        # every checkpoint but the head was deleted exactly once
        assert sum(r.checkpoints for r in reports) == steps
        assert await checkpointer.read_log(tid, "messages", 100) == list(range(2, steps + 2))

    async def test_app_prune_then_resume(self, checkpointer: Checkpointer) -> None:
        from oncegraph import Command

        app = prune_graph(checkpointer)
        tid = new_id("thread")
        cfg = {"thread_id": tid}
        expected: list[str] = []
        for turn in range(4):
            out = await app.ainvoke({"log": [f"u{turn}"]}, cfg)
            expected += [f"u{turn}", "before"]
            assert out["log"] == expected
            if turn < 3:
                out = await app.ainvoke(Command(resume=f"a{turn}"), cfg)
                expected += [f"ask:a{turn}", "after"]
                assert out["log"] == expected
        (open_run,) = await app.aruns(thread_id=tid, limit=1)
        assert open_run.status is RunStatus.INTERRUPTED
        open_cps = await checkpointer.list_checkpoints(tid, run_id=open_run.run_id)
        total = len(await checkpointer.list_checkpoints(tid))
        report = await app.aprune(keep_checkpoints=1, thread_id=tid)
        assert report.checkpoints == total - len(open_cps) > 0
        assert await checkpointer.list_checkpoints(tid) == open_cps
        # a fresh app (no in-process copy of the head) resumes the interrupted run
        again = prune_graph(checkpointer)
        assert (await again.aget_state(cfg)).interrupts[0]["value"] == "approve?"
        out = await again.ainvoke(Command(resume="a3"), cfg)
        expected += ["ask:a3", "after"]
        assert out["log"] == expected
        assert (await again.aget_run(open_run.run_id)).status is RunStatus.COMPLETED
        await again.aprune(thread_id=tid)
        (head,) = await checkpointer.list_checkpoints(tid)
        assert (await again.aget_state(cfg)).values["log"] == expected
        assert head.next == ()

    async def test_app_prune_needs_a_store_that_prunes(self, checkpointer: Checkpointer) -> None:
        app = prune_graph(cast(Checkpointer, _WithoutPrune(checkpointer)))
        with pytest.raises(ConfigError, match="prune"):
            await app.aprune()

    # -- lifecycle --------------------------------------------------------------------

    async def test_async_with_sets_up_and_closes(self, checkpointer: Checkpointer) -> None:
        async with checkpointer as store:  # type: ignore[attr-defined]
            assert store is checkpointer
            tid, _, _ = await start_thread(store)
        # closed on exit; the store opens again on its next use, with the data kept
        thread = await checkpointer.get_thread(tid)
        assert thread is not None and thread.version == 1

    async def test_setup_twice_is_harmless(self, checkpointer: Checkpointer) -> None:
        tid, rid, cp = await start_thread(checkpointer)
        await checkpointer.setup()
        await checkpointer.setup()
        assert await checkpointer.get_checkpoint(tid) == cp
        cp2 = make_checkpoint(tid, rid, 2, parent=cp.checkpoint_id)
        await checkpointer.commit(StepCommit(thread_id=tid, expected_version=1, checkpoint=cp2))
        assert await checkpointer.get_checkpoint(tid) == cp2

    async def test_closed_store_can_be_set_up_again(self, checkpointer: Checkpointer) -> None:
        tid, rid, cp = await start_thread(checkpointer)
        await checkpointer.aclose()
        await checkpointer.aclose()  # closing twice is harmless
        await checkpointer.setup()
        assert await checkpointer.get_checkpoint(tid) == cp
        cp2 = make_checkpoint(tid, rid, 2, parent=cp.checkpoint_id)
        await checkpointer.commit(StepCommit(thread_id=tid, expected_version=1, checkpoint=cp2))
        thread = await checkpointer.get_thread(tid)
        assert thread is not None and thread.version == 2

    async def test_request_hash_key_is_stable_and_shared(
        self, checkpointer: Checkpointer, reopen: Reopen | None
    ) -> None:
        """The ledger's request hashes are keyed by the store (guarantee 6 across processes):
        the key is secret-sized, never changes, and every instance on one database has it."""
        assert isinstance(checkpointer, RequestHashKeys)
        key = await checkpointer.request_hash_key()
        assert isinstance(key, bytes) and len(key) >= 16
        assert await checkpointer.request_hash_key() == key
        if reopen is not None:
            other = await reopen()
            assert isinstance(other, RequestHashKeys)
            assert await other.request_hash_key() == key

    async def test_durable_across_instances(
        self, checkpointer: Checkpointer, reopen: Reopen | None
    ) -> None:
        if reopen is None:
            pytest.skip("this backend keeps nothing across instances (no `reopen` fixture)")
        tid, rid, cp1 = await start_thread(checkpointer, log=[LogEntry("messages", 0, "hello")])
        cp2 = make_checkpoint(tid, rid, 2, parent=cp1.checkpoint_id, logs={"messages": 1})
        effect = make_effect(rid, tid)
        await checkpointer.begin_effect(effect)
        done = effect.replace(status=EffectStatus.COMPLETED, result={"id": 1})
        await checkpointer.commit(
            StepCommit(
                thread_id=tid,
                expected_version=1,
                checkpoint=cp2,
                effects=[done],
                run_status=RunStatus.INTERRUPTED,
            )
        )
        write = TaskWrite(tid, cp2.checkpoint_id, "tools", WriteKind.INTERRUPT, 0, "approve?")
        await checkpointer.put_task_write(write)
        queued = make_run(tid, status=RunStatus.QUEUED, created_at=5_000.0)
        await checkpointer.create_run(queued)
        other = await reopen()
        assert other is not checkpointer
        thread = await other.get_thread(tid)
        assert thread is not None
        assert (thread.version, thread.head_checkpoint_id) == (2, cp2.checkpoint_id)
        assert await other.get_checkpoint(tid) == cp2
        assert await other.list_checkpoints(tid) == [cp2, cp1]
        assert await other.read_log(tid, "messages", 1) == ["hello"]
        assert await other.get_task_writes(tid, cp2.checkpoint_id) == [write]
        assert await other.get_effect(effect.effect_id) == done
        run = await other.get_run(rid)
        assert run is not None and run.status is RunStatus.INTERRUPTED
        assert await other.get_run(queued.run_id) == queued
        # and the new instance continues the CAS chain where the old one stopped
        cp3 = make_checkpoint(tid, rid, 3, parent=cp2.checkpoint_id)
        with pytest.raises(StaleStateError):
            await other.commit(
                StepCommit(
                    thread_id=tid,
                    expected_version=1,
                    checkpoint=make_checkpoint(tid, rid, 2),
                )
            )
        await other.commit(StepCommit(thread_id=tid, expected_version=2, checkpoint=cp3))
        assert await checkpointer.get_checkpoint(tid) == cp3


__all__ = [
    "NESTED",
    "CheckpointerConformance",
    "PruneState",
    "Reopen",
    "as_pruner",
    "build_history",
    "make_checkpoint",
    "make_effect",
    "make_run",
    "new_id",
    "prune_graph",
    "snapshot",
    "start_thread",
]
