"""PgCheckpointer against the real PostgreSQL server: the conformance suite on a fresh
database per test, plus what only a real server shows (racing migrations, schema
stamped newer, CAS under real concurrency from tasks and OS processes, fencing under
row locks, one pool per event loop).

The server comes from ONCEGRAPH_TEST_PG_DSN (default: the local ``test`` database);
each test creates ``og_test_<random>`` from there and drops it afterwards. Without a
reachable server the tests skip, except under CI=true where they fail.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import psycopg
import pytest

from oncegraph import END, START, StateGraph, add_messages
from oncegraph.app import CompiledGraph
from oncegraph.errors import LeaseLostError, StaleStateError, StorageError
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import (
    CheckpointRecord,
    EffectClass,
    EffectRecord,
    EffectStatus,
    LogEntry,
    PruneReport,
    RunStatus,
    StepCommit,
    TaskWrite,
)
from oncegraph.storage.sql import postgres, store_runs
from oncegraph.storage.sql.pg_step import StepWriter, numbered, step_script
from oncegraph.storage.sql.postgres import PgCheckpointer
from oncegraph.storage.sql.schema import LATEST_VERSION, SCHEMA_TABLE
from oncegraph.testing.conformance import (
    CheckpointerConformance,
    Reopen,
    build_history,
    make_checkpoint,
    make_effect,
    snapshot,
    start_thread,
)

pytestmark = pytest.mark.postgres

HERE = Path(__file__).parent


def sql(dsn: str, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Run one statement on its own connection (outside the store) and return its rows."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description else []


# -- the contract ----------------------------------------------------------------------


class TestPgConformance(CheckpointerConformance):
    OPTIONS: dict[str, Any] = {}  # PgCheckpointer keywords

    @pytest.fixture
    async def checkpointer(self, fresh_dsn: str) -> AsyncIterator[Checkpointer]:
        store = PgCheckpointer(fresh_dsn, **self.OPTIONS)
        await store.setup()
        yield store
        await store.aclose()

    @pytest.fixture
    async def reopen(self, fresh_dsn: str) -> AsyncIterator[Reopen]:
        opened: list[PgCheckpointer] = []

        async def factory() -> Checkpointer:
            store = PgCheckpointer(postgres_dsn=fresh_dsn, **self.OPTIONS)
            await store.setup()
            opened.append(store)
            return store

        yield factory
        for store in opened:
            await store.aclose()


# The whole contract with prepared_statements=False runs behind a real PgBouncer in
# transaction pooling: test_pgbouncer.py's TestPgBouncerConformance.


async def reap(procs: list[asyncio.subprocess.Process]) -> None:
    """Kill and wait for the worker processes still running (a failed test leaves some)."""
    for proc in procs:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


# -- migrations ------------------------------------------------------------------------

MIGRATE_WORKER = """
import sys
from oncegraph.storage.sql import postgres
sys.stdin.readline()  # start together
state = postgres.migrate(sys.argv[1])
print(state.current, flush=True)
"""


async def test_concurrent_migrations_from_processes_and_tasks_apply_once(fresh_dsn: str) -> None:
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            MIGRATE_WORKER,
            fresh_dsn,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for _ in range(4)
    ]
    stores = [PgCheckpointer(fresh_dsn, auto_migrate=False) for _ in range(6)]
    try:
        for store in stores:  # open the pools first so the migrations really overlap
            assert (await store.verify()).current == 0
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(b"go\n")
        states, outputs = await asyncio.gather(
            asyncio.gather(*(store.migrate() for store in stores)),
            asyncio.gather(*(proc.communicate() for proc in procs)),
        )
    finally:
        for store in stores:
            await store.aclose()
        await reap(procs)
    for state in states:
        assert state.up_to_date
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err.decode()
        assert out.decode().strip() == str(LATEST_VERSION)
    versions = sql(fresh_dsn, f"SELECT version FROM {SCHEMA_TABLE} ORDER BY version")
    assert versions == [(v,) for v in range(1, LATEST_VERSION + 1)]
    assert (await asyncio.to_thread(postgres.verify, fresh_dsn)).up_to_date


async def test_auto_migrate_off_refuses_an_unmigrated_database(fresh_dsn: str) -> None:
    store = PgCheckpointer(fresh_dsn, auto_migrate=False)
    try:
        state = await store.verify()
        assert state.needs_migrate and state.current == 0
        with pytest.raises(StorageError, match="oncegraph db migrate --postgres"):
            await store.setup()
        assert (await store.migrate()).up_to_date
        await store.setup()
    finally:
        await store.aclose()


async def test_database_stamped_newer_is_refused_and_untouched(fresh_dsn: str) -> None:
    assert (await asyncio.to_thread(postgres.migrate, fresh_dsn)).up_to_date
    newer = LATEST_VERSION + 1
    sql(fresh_dsn, f"INSERT INTO {SCHEMA_TABLE} (version, applied_at) VALUES (%s, 0)", (newer,))
    before = sql(fresh_dsn, f"SELECT version, applied_at FROM {SCHEMA_TABLE} ORDER BY version")
    with pytest.raises(StorageError, match=f"schema version {newer}.*Upgrade oncegraph"):
        await asyncio.to_thread(postgres.verify, fresh_dsn)
    with pytest.raises(StorageError, match="newer oncegraph"):
        await asyncio.to_thread(postgres.migrate, fresh_dsn)
    with pytest.raises(RuntimeError, match="inside an event loop"):
        postgres.verify(fresh_dsn)
    for auto in (True, False):
        store = PgCheckpointer(fresh_dsn, auto_migrate=auto)
        try:
            with pytest.raises(StorageError, match="newer oncegraph"):
                await store.setup()
        finally:
            await store.aclose()
    after = sql(fresh_dsn, f"SELECT version, applied_at FROM {SCHEMA_TABLE} ORDER BY version")
    assert after == before


async def test_unreachable_server_is_a_storage_error() -> None:
    store = PgCheckpointer("postgresql://postgres@127.0.0.1:1/test", connect_timeout=1)
    try:
        with pytest.raises(StorageError, match="PostgreSQL"):
            await store.get_thread("t")
    finally:
        await store.aclose()


# -- versioned writes under real concurrency -----------------------------------------


async def race_commits(
    store: PgCheckpointer,
    thread_id: str,
    run_id: str,
    target: int,
    tag: str,
    n_tasks: int,
) -> tuple[list[tuple[int, str]], int]:
    """``n_tasks`` writers advance ``thread_id`` to version ``target`` by racing CAS commits.

    Every attempt reads the head, then commits version head+1 with a checkpoint, one log
    entry and one folded effect all named after the attempt. The first round starts
    behind a barrier, so all writers try the same version at once. Returns the
    ``(version, checkpoint_id)`` pairs this call won and how many attempts were stale.
    """
    barrier = asyncio.Barrier(n_tasks)
    wins: list[tuple[int, str]] = []
    stale = 0

    async def writer(n: int) -> None:
        nonlocal stale
        first = True
        while True:
            head = await store.get_checkpoint(thread_id)
            assert head is not None
            if first:
                first = False
                await barrier.wait()
            v = head.version
            if v >= target:
                return
            name = f"{tag}-{n}-{v}"
            commit = StepCommit(
                thread_id=thread_id,
                expected_version=v,
                checkpoint=CheckpointRecord(
                    checkpoint_id=name,
                    thread_id=thread_id,
                    run_id=run_id,
                    step=v - 1,
                    version=v + 1,
                    parent_checkpoint_id=head.checkpoint_id,
                    values={"writer": name},
                    logs={"messages": v},
                    next=("agent",),
                ),
                log=[LogEntry("messages", v - 1, name)],
                effects=[
                    EffectRecord(
                        effect_id=f"eff-{name}",
                        effect_type="tool:t",
                        effect_class=EffectClass.WRITE,
                        command_id=name,
                        run_id=run_id,
                        thread_id=thread_id,
                        node="tools",
                        request_hash="sha256:" + name,
                        status=EffectStatus.COMPLETED,
                        result={"by": name},
                    )
                ],
            )
            try:
                await store.commit(commit)
            except StaleStateError:
                stale += 1
            else:
                wins.append((v + 1, name))

    await asyncio.gather(*(writer(n) for n in range(n_tasks)))
    return wins, stale


async def start_race_thread(store: PgCheckpointer) -> tuple[str, str]:
    thread_id, run_id, _ = await start_thread(store)
    return thread_id, run_id


def assert_race_outcome(dsn: str, thread_id: str, wins: list[tuple[int, str]], target: int) -> None:
    """Each version 2..target won exactly once, and the database holds exactly the
    winners' rows: checkpoints chained by parent, one log entry per version, one effect."""
    won = dict(wins)
    assert sorted(v for v, _ in wins) == list(range(2, target + 1))
    thread = sql(
        dsn,
        "SELECT version, head_checkpoint_id FROM oncegraph_threads WHERE thread_id=%s",
        (thread_id,),
    )
    assert thread == [(target, won[target])]
    cps = sql(
        dsn,
        "SELECT version, checkpoint_id, parent_checkpoint_id FROM oncegraph_checkpoints "
        "WHERE thread_id = %s AND version >= 2 ORDER BY version",
        (thread_id,),
    )
    assert [(v, c) for v, c, _ in cps] == sorted(won.items())
    for v, _, parent in cps[1:]:
        assert parent == won[v - 1]
    total = sql(
        dsn, "SELECT count(*) FROM oncegraph_checkpoints WHERE thread_id = %s", (thread_id,)
    )
    assert total == [(target,)]
    log = sql(
        dsn,
        "SELECT seq, value FROM oncegraph_log WHERE thread_id = %s ORDER BY seq",
        (thread_id,),
    )
    assert log == [(v - 2, json.dumps(won[v])) for v in range(2, target + 1)]
    effects = sql(
        dsn,
        "SELECT effect_id FROM oncegraph_effects WHERE thread_id = %s ORDER BY effect_id",
        (thread_id,),
    )
    assert effects == sorted((f"eff-{name}",) for name in won.values())


async def test_cas_race_between_twenty_tasks(fresh_dsn: str) -> None:
    target = 60
    store = PgCheckpointer(fresh_dsn, max_size=20)
    try:
        thread_id, run_id = await start_race_thread(store)
        wins, stale = await race_commits(store, thread_id, run_id, target, "task", 20)
        assert stale >= 19  # the barrier round alone has 19 losers
        # reading back through the store agrees with the raw rows
        head = await store.get_checkpoint(thread_id)
        assert head is not None and head.version == target
        assert await store.read_log(thread_id, "messages", target) == [
            name for _, name in sorted(wins)
        ]
    finally:
        await store.aclose()
    assert_race_outcome(fresh_dsn, thread_id, wins, target)


RACE_WORKER = """
import asyncio, json, sys
sys.path.insert(0, sys.argv[1])
from test_postgres import race_commits
from oncegraph.storage.sql.pg_step import StepWriter, numbered, step_script
from oncegraph.storage.sql.postgres import PgCheckpointer

async def main():
    dsn, thread_id, run_id, target, tag, n = sys.argv[2:8]
    store = PgCheckpointer(dsn, max_size=int(n))
    await store.setup()
    await store.get_thread(thread_id)
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    wins, stale = await race_commits(store, thread_id, run_id, int(target), tag, int(n))
    await store.aclose()
    print(json.dumps({"wins": wins, "stale": stale}), flush=True)

asyncio.run(main())
"""


@pytest.mark.slow
async def test_cas_race_between_four_processes(fresh_dsn: str) -> None:
    target, n_procs, n_tasks = 80, 4, 3
    store = PgCheckpointer(fresh_dsn)
    try:
        thread_id, run_id = await start_race_thread(store)
    finally:
        await store.aclose()
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            RACE_WORKER,
            str(HERE),
            fresh_dsn,
            thread_id,
            run_id,
            str(target),
            f"proc{i}",
            str(n_tasks),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for i in range(n_procs)
    ]
    try:
        for proc in procs:  # every process is connected before any starts racing
            assert proc.stdout is not None
            line = await asyncio.wait_for(proc.stdout.readline(), 60)
            assert line == b"ready\n", line
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(b"go\n")
        outputs = await asyncio.gather(*(proc.communicate() for proc in procs))
    finally:
        await reap(procs)
    wins: list[tuple[int, str]] = []
    stale = 0
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err.decode()
        result = json.loads(out)
        wins += [(int(v), str(name)) for v, name in result["wins"]]
        stale += int(result["stale"])
    assert stale >= 1
    assert len({name.split("-")[0] for _, name in wins}) >= 2  # more than one process won
    assert_race_outcome(fresh_dsn, thread_id, wins, target)


# -- fencing ---------------------------------------------------------------------------


async def test_stale_fencing_token_writes_nothing(fresh_dsn: str) -> None:
    store = PgCheckpointer(fresh_dsn)
    try:
        tid, rid, cp1 = await start_thread(store)
        write = TaskWrite(tid, cp1.checkpoint_id, "tools", "writes", 0, {"x": 1})
        await store.put_task_write(write)
        effect = make_effect(rid, tid)
        await store.begin_effect(effect)
        # another worker takes the lease: the token moves from 0 to 1
        sql(fresh_dsn, "UPDATE oncegraph_runs SET fencing_token = 1 WHERE run_id = %s", (rid,))
        before = await snapshot(store, tid, [rid])
        with pytest.raises(LeaseLostError):
            await store.commit(
                StepCommit(
                    thread_id=tid,
                    expected_version=1,
                    checkpoint=make_checkpoint(tid, rid, 2, parent=cp1.checkpoint_id),
                    log=[LogEntry("messages", 0, "late")],
                    effects=[effect.replace(status=EffectStatus.COMPLETED, result=1)],
                    run_status=RunStatus.COMPLETED,
                    clear_task_writes_of=cp1.checkpoint_id,
                    fence=0,
                )
            )
        assert await snapshot(store, tid, [rid]) == before
        assert await store.get_task_writes(tid, cp1.checkpoint_id) == [write]
        stored = await store.get_effect(effect.effect_id)
        assert stored is not None and stored.status is EffectStatus.PENDING
        with pytest.raises(LeaseLostError):
            await store.update_run(rid, status=RunStatus.FAILED, fence=0)
        # the current holder writes
        cp2 = make_checkpoint(tid, rid, 2, parent=cp1.checkpoint_id)
        await store.commit(StepCommit(thread_id=tid, expected_version=1, checkpoint=cp2, fence=1))
        assert await store.get_checkpoint(tid) == cp2
    finally:
        await store.aclose()


async def test_lease_taken_while_commit_waits_on_the_run_row(fresh_dsn: str) -> None:
    """A takeover that holds the run row when the commit arrives wins: the commit waits
    for the lock, re-checks the token after the takeover commits, and writes nothing."""
    store = PgCheckpointer(fresh_dsn)
    try:
        tid, rid, cp1 = await start_thread(store)
        taker = await psycopg.AsyncConnection.connect(fresh_dsn)
        try:
            await taker.execute(
                "UPDATE oncegraph_runs SET fencing_token = fencing_token + 1 WHERE run_id = %s",
                (rid,),
            )  # transaction left open: the run row is locked
            cp2 = make_checkpoint(tid, rid, 2, parent=cp1.checkpoint_id)
            pending = asyncio.create_task(
                store.commit(
                    StepCommit(
                        thread_id=tid,
                        expected_version=1,
                        checkpoint=cp2,
                        run_status=RunStatus.COMPLETED,
                        fence=0,
                    )
                )
            )
            await asyncio.sleep(0.3)
            assert not pending.done()  # blocked behind the takeover's row lock
            await taker.commit()
            with pytest.raises(LeaseLostError):
                await pending
        finally:
            await taker.close()
        thread = await store.get_thread(tid)
        assert thread is not None and thread.version == 1
        assert await store.get_checkpoint(tid, cp2.checkpoint_id) is None
        run = await store.get_run(rid)
        assert run is not None and run.status is RunStatus.RUNNING and run.fencing_token == 1
    finally:
        await store.aclose()


# -- the one-message step commit (pg_step) ---------------------------------------------


def test_placeholders_are_numbered_in_order() -> None:
    assert numbered("UPDATE t SET a = ?, b = ? WHERE c = ?") == (
        "UPDATE t SET a = $1, b = $2 WHERE c = $3"
    )
    assert numbered("SELECT 1") == "SELECT 1"


async def test_step_is_one_message_of_prepared_statements(fresh_dsn: str) -> None:
    store = PgCheckpointer(fresh_dsn, min_size=1, max_size=1)
    try:
        tid, rid, cp1 = await start_thread(store)
        cp2 = make_checkpoint(tid, rid, 2, parent=cp1.checkpoint_id)
        script, params = step_script(
            StepCommit(thread_id=tid, expected_version=1, checkpoint=cp2, fence=0), 1.0
        )
        assert "BEGIN" not in script and "COMMIT" not in script  # one implicit transaction
        assert [line.split("(")[0] for line in script.split(";\n")] == [
            "EXECUTE og_thread_cas_checked",  # the CAS and its check, one statement
            "EXECUTE og_run_touch_fenced_checked",  # the fence and its check
            "EXECUTE og_checkpoint_insert",
        ]
        assert "%s" not in script and f"'{cp2.checkpoint_id}'" in script  # bound as literals
        assert len(params) == 5 + 3 + len(postgres.rows.PLAIN.checkpoint_to_params(cp2))
        pool = store._pools.peek()
        assert pool is not None
        async with pool.connection() as conn:
            cur = await conn.execute(
                "SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'og\\_%'"
            )
            assert (await cur.fetchone()) == (11,)
    finally:
        await store.aclose()


async def test_session_that_lost_its_prepared_statements_commits(fresh_dsn: str) -> None:
    """A pooler's DISCARD ALL (or a DBA's DEALLOCATE) between steps costs one re-prepare;
    the failed message committed nothing, so the step is sent again, once."""
    store = PgCheckpointer(fresh_dsn, min_size=1, max_size=1)
    try:
        tid, rid, cp1 = await start_thread(store)
        pool = store._pools.peek()
        assert pool is not None
        async with pool.connection() as conn:
            await conn.execute("DEALLOCATE og_thread_cas_checked", prepare=False)
            await conn.execute("DEALLOCATE og_checkpoint_insert", prepare=False)
        cp2 = make_checkpoint(tid, rid, 2, parent=cp1.checkpoint_id)
        await store.commit(StepCommit(thread_id=tid, expected_version=1, checkpoint=cp2))
        assert await store.get_checkpoint(tid) == cp2
        thread = await store.get_thread(tid)
        assert thread is not None and thread.version == 2
        assert [r[0] for r in sql(fresh_dsn, "SELECT count(*) FROM oncegraph_checkpoints")] == [2]
    finally:
        await store.aclose()


async def test_unprepared_store_prepares_nothing(fresh_dsn: str) -> None:
    store = PgCheckpointer(fresh_dsn, min_size=1, max_size=1, prepared_statements=False)
    try:
        tid, rid, cp = await start_thread(store)
        for version in range(1, 8):  # past psycopg's own threshold of 5 runs
            nxt = make_checkpoint(tid, rid, version + 1, parent=cp.checkpoint_id)
            await store.commit(StepCommit(tid, version, nxt, log=[LogEntry("m", version, 1)]))
            assert await store.get_checkpoint(tid) == nxt
            cp = nxt
        pool = store._pools.peek()
        assert pool is not None
        async with pool.connection() as conn:
            cur = await conn.execute("SELECT name FROM pg_prepared_statements")
            assert await cur.fetchall() == []
        script, _ = step_script(StepCommit(tid, 8, cp), 1.0, prepared=False)
        assert "EXECUTE" not in script
        assert script.startswith("WITH w AS (UPDATE oncegraph_threads")
    finally:
        await store.aclose()


async def test_statements_lost_again_name_the_switch(fresh_dsn: str) -> None:
    """A proxy that hands each message to another server session loses the prepared
    statements every time: after one re-prepare the error says what to set."""

    class ForgetfulWriter(StepWriter):
        async def _prepare(self, conn: Any) -> None:  # prepares on "another session"
            self._ready.add(conn)

    store = PgCheckpointer(fresh_dsn, min_size=1, max_size=1)
    try:
        tid, rid, cp1 = await start_thread(store)
        pool = store._pools.peek()
        assert pool is not None
        async with pool.connection() as conn:  # the one session: drop what it prepared
            cur = await conn.execute("SELECT name FROM pg_prepared_statements")
            for (name,) in await cur.fetchall():
                if name.startswith("og_"):
                    await conn.execute(f"DEALLOCATE {name}", prepare=False)
        store._commits.steps = ForgetfulWriter()
        cp2 = make_checkpoint(tid, rid, 2, parent=cp1.checkpoint_id)
        with pytest.raises(StorageError, match=r"prepared_statements=False") as caught:
            await store.commit(StepCommit(thread_id=tid, expected_version=1, checkpoint=cp2))
        assert "nothing was written" in str(caught.value)
        thread = await store.get_thread(tid)
        assert thread is not None and thread.version == 1
    finally:
        await store.aclose()


# -- one pool per event loop ---------------------------------------------------------


async def test_one_store_serves_two_event_loops(fresh_dsn: str) -> None:
    """The sync facade runs on its own loop thread while users ``ainvoke`` on theirs."""
    other = asyncio.new_event_loop()
    thread = threading.Thread(target=other.run_forever, daemon=True)
    thread.start()

    async def on_other(coro: Any) -> Any:
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, other))

    store = PgCheckpointer(fresh_dsn)
    try:
        tid, rid, cp1 = await on_other(start_thread(store))
        cp2 = make_checkpoint(tid, rid, 2, parent=cp1.checkpoint_id)
        await store.commit(StepCommit(thread_id=tid, expected_version=1, checkpoint=cp2))
        cp3 = make_checkpoint(tid, rid, 3, parent=cp2.checkpoint_id)
        with pytest.raises(StaleStateError):
            await on_other(store.commit(StepCommit(tid, 1, make_checkpoint(tid, rid, 2))))
        await on_other(store.commit(StepCommit(thread_id=tid, expected_version=2, checkpoint=cp3)))
        assert await store.get_checkpoint(tid) == cp3
        assert await on_other(store.get_checkpoint(tid)) == cp3
    finally:
        await store.aclose()  # closes the other loop's pool on that loop
        other.call_soon_threadsafe(other.stop)
        thread.join(10)
        other.close()
    # the store can be used again afterwards, here
    assert await store.get_checkpoint(tid) == cp3
    await store.aclose()


# -- retention and O(1) storage per step ---------------------------------------------


class Chat(TypedDict, total=False):
    messages: Annotated[list[Any], add_messages]


def _chat_app(store: PgCheckpointer, turns: int) -> CompiledGraph:
    """One node that appends one message per step, looping until ``turns`` messages."""

    def talk(state: Chat) -> dict[str, Any]:
        return {"messages": [{"role": "assistant", "content": "one more line of chat"}]}

    def route(state: Chat) -> str:
        return "talk" if len(state["messages"]) < turns else END

    g = StateGraph(Chat)
    g.add_node("talk", talk)
    g.add_edge(START, "talk")
    g.add_conditional_edges("talk", route)
    return g.compile(checkpointer=store)


async def test_checkpoint_size_is_flat_in_conversation_length(fresh_dsn: str) -> None:
    """Messages live in the log, a checkpoint stores their count: the checkpoint row of
    step 120 is as big as that of step 20, and after a prune one row is left."""
    turns = 120
    store = PgCheckpointer(fresh_dsn)
    try:
        app = _chat_app(store, turns)
        out = await app.ainvoke(
            {"messages": [{"role": "user", "content": "hi"}]},
            {"thread_id": "chat", "recursion_limit": 500},
        )
        assert len(out["messages"]) == turns
        sizes = sql(
            fresh_dsn,
            "SELECT version, pg_column_size(channel_values), pg_column_size(c.*) "
            "FROM oncegraph_checkpoints c WHERE thread_id = %s ORDER BY version",
            ("chat",),
        )
        assert len(sizes) >= turns
        by_version = {v: (values, row) for v, values, row in sizes}
        assert len({values for values, _ in by_version.values()}) == 1, sizes
        early, late = by_version[20], by_version[max(by_version)]
        assert late[0] == early[0]
        assert late[1] <= early[1] + 8  # a few more digits in counts, never the messages
        report = await app.aprune(keep_checkpoints=1, thread_id="chat")
        assert report.checkpoints == len(sizes) - 1
        counts = sql(
            fresh_dsn,
            "SELECT (SELECT count(*) FROM oncegraph_checkpoints WHERE thread_id = %s), "
            "(SELECT count(*) FROM oncegraph_log WHERE thread_id = %s)",
            ("chat", "chat"),
        )
        assert counts == [(1, turns)]
        state = await app.aget_state({"thread_id": "chat"})
        assert len(state.values["messages"]) == turns
    finally:
        await store.aclose()


async def test_prune_pages_through_every_thread(
    fresh_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_runs, "_THREAD_PAGE", 2)  # the shared store pages
    store = PgCheckpointer(fresh_dsn)
    try:
        threads = [await build_history(store, [RunStatus.COMPLETED] * 2) for _ in range(5)]
        report = await store.prune(keep_checkpoints=2)
        assert (report.threads, report.checkpoints, report.task_writes) == (5, 10, 10)
        for tid, runs in threads:
            assert await store.list_checkpoints(tid) == runs[-1][1][::-1]
        assert await store.prune(keep_checkpoints=2) == PruneReport(threads=5)
    finally:
        await store.aclose()


def test_cli_db_prune(fresh_dsn: str) -> None:
    from typer.testing import CliRunner

    from oncegraph.cli.commands import app as cli

    async def seed() -> tuple[str, list[Any], EffectRecord]:
        store = PgCheckpointer(fresh_dsn)
        try:
            tid, runs = await build_history(store, [RunStatus.COMPLETED] * 3)
            effect = make_effect(runs[0][0], tid, status=EffectStatus.COMPLETED)
            await store.begin_effect(effect)
            return tid, runs, effect
        finally:
            await store.aclose()

    tid, runs, effect = asyncio.run(seed())
    runner = CliRunner()
    dry = runner.invoke(cli, ["db", "prune", "--postgres", fresh_dsn, "--keep", "2"])
    assert dry.exit_code == 0, dry.output
    assert "would delete 4 checkpoints" in dry.output and "nothing was deleted" in dry.output
    yes = ["--yes", "--allow-unreplayable"]  # the replays of the pruned runs are given up
    done = runner.invoke(cli, ["db", "prune", "--postgres", fresh_dsn, "--keep", "2", *yes])
    assert done.exit_code == 0, done.output
    assert "deleted 4 checkpoints" in done.output
    effects_left = sql(fresh_dsn, "SELECT effect_id FROM oncegraph_effects")
    assert effects_left == [(effect.effect_id,)]  # no --effects-older-than-days: kept
    done = runner.invoke(
        cli,
        ["db", "prune", "--postgres", fresh_dsn, "--effects-older-than-days", "1", *yes],
    )
    assert done.exit_code == 0, done.output
    assert "deleted 1 checkpoints" in done.output and "1 effect records" in done.output
    assert sql(fresh_dsn, "SELECT count(*) FROM oncegraph_effects") == [(0,)]
    rows_left = sql(
        fresh_dsn, "SELECT checkpoint_id FROM oncegraph_checkpoints WHERE thread_id = %s", (tid,)
    )
    assert rows_left == [(runs[-1][1][-1].checkpoint_id,)]
    bad = runner.invoke(cli, ["db", "prune", "--postgres", fresh_dsn, "--keep", "0"])
    assert bad.exit_code != 0
