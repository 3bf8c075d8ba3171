"""Guarantee 13, one attempt in flight, with SECOND actors: real processes, real stores.

* Two processes resume one crashed run (crash before the intent, after it, inside the
  tool). The first resumer is held inside the protocol (the tool body or its reconcile
  hook waits at a gate file); the second is refused with ``RunBusyError`` before anything
  runs. Witnesses: the provider's effects, the log of tool-body runs across ALL
  processes, and the ledger.
* A timed-out irreversible call, sync and async, whose reconcile says "not done", is sent
  once: never again automatically (the old code re-sent it until node_timeout).
* A parked parallel step: the caller hears ``NeedsReviewError`` only once its sibling
  call has ended and been recorded.
* ``begin_effect`` races between two processes never fail and create each effect once.
* A process that uses ``PgCheckpointer`` exits, with a call cut off at teardown, without
  closing anything (12 fresh processes).
"""

from __future__ import annotations

import asyncio
import os
import textwrap
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from test_crash_matrix import (
    THREAD,
    TOOL_NAMES,
    World,
    both,
    world,  # noqa: F401 - the per-test world fixture
)

from oncegraph import (
    END,
    START,
    NeedsReviewError,
    Reconciled,
    StateGraph,
    ToolNode,
    add_messages,
    current_effect,
    tool,
)
from oncegraph.runtime.portal import run_sync
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import EffectRecord, EffectStatus, RunStatus
from oncegraph.testing.crash import run_in_subprocess, start_in_subprocess
from oncegraph.testing.provider import FakeProvider, ProviderClient

HERE = Path(__file__).parent
WORKER = HERE / "crash_worker.py"

pytestmark = pytest.mark.slow


def _wait_for(what: str, check: Any, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)


# -- two resumers ------------------------------------------------------------------------

RESUMER_POINTS = ("before_intent", "after_intent", "in_tool")


@pytest.mark.parametrize(
    ("backend", "point"), [case for p in RESUMER_POINTS for case in both(p)]
)
def test_two_resumers_one_body_run_and_one_refusal(world: World, point: str) -> None:  # noqa: F811
    tool_kind = "irreversible"
    world.crash(point, tool=tool_kind, path="invoke")
    body_runs_before = len(world.calls())

    gate, inside = world.tmp / "gate", world.tmp / "inside"
    common = [
        *world.store_args(),
        "--provider",
        world.provider.url,
        "--calls-log",
        str(world.calls_log),
        "--thread",
        THREAD,
        "--mode",
        "resume",
        "--tool",
        tool_kind,
    ]
    first = start_in_subprocess(WORKER, [*common, "--gate", str(gate), "--inside", str(inside)])
    try:
        # the first resumer holds the run: it is inside the tool body or its reconcile
        _wait_for("the first resumer to reach the gate", inside.exists)
        second = run_in_subprocess(WORKER, common, timeout=300)
        assert second.returncode == 0, second.describe()
        refused = second.json()
        assert refused["outcome"] == "error", refused
        assert refused["error_type"] == "RunBusyError", refused
        assert "being executed by another process" in refused["error"]
        gate.touch()
        done = first.wait(300)
    finally:
        gate.touch()
        first.kill()
    assert done.returncode == 0, done.describe()
    report = done.json()
    assert report["outcome"] == "completed", report
    # ONE body run of the irreversible tool across the crashed process and both resumers
    assert len(world.calls()) == 1, world.calls()
    assert len(world.calls()) - body_runs_before == (0 if point == "in_tool" else 1)
    effects = world.provider_effects()
    assert len(effects) == 1, effects
    (record,) = world.ledger(TOOL_NAMES[tool_kind])
    assert record.status is EffectStatus.COMPLETED
    assert effects[0]["idempotency_key"] == record.effect_id


# -- timeouts: an irreversible call that timed out is never re-sent automatically ----------


class S(TypedDict, total=False):
    messages: Annotated[list[dict[str, Any]], add_messages]
    done: str


def _agent(checkpointer: Checkpointer | None, tools: list[Any], calls: list[dict[str, Any]]) -> Any:
    async def agent(state: S) -> dict[str, Any]:
        last = state["messages"][-1]
        if last["role"] == "tool":
            return {"done": "yes"}
        return {"messages": [{"role": "assistant", "content": "", "tool_calls": calls}]}

    g = StateGraph(S)
    g.add_node("agent", agent)
    g.add_node("tools", ToolNode(tools))
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", lambda s: END if "done" in s else "tools", ["tools", END])
    g.add_edge("tools", "agent")
    return g.compile(checkpointer=checkpointer)


def _call(name: str, call_id: str = "call_1", order: str = "1042") -> dict[str, Any]:
    return {"id": call_id, "name": name, "args": {"order_id": order}}


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_timed_out_irreversible_call_with_not_done_reconcile_is_sent_once(
    checkpointer: Checkpointer, kind: str
) -> None:
    bodies: list[str] = []
    checks: list[str] = []
    with FakeProvider() as provider:
        client = ProviderClient(provider.url)
        # The provider performs at once but answers late: the call times out.
        client.set_faults(delay_seconds=0.6)

        def charge_sync(order_id: str) -> str:
            bodies.append(order_id)
            client.charge(10, "eur", order_id, idempotency_key=current_effect().idempotency_key)
            return "charged"

        async def charge_async(order_id: str) -> str:
            bodies.append(order_id)
            key = current_effect().idempotency_key
            await asyncio.to_thread(client.charge, 10, "eur", order_id, idempotency_key=key)
            return "charged"

        def lagging_reconcile(record: EffectRecord) -> Reconciled:
            checks.append(record.effect_id)
            return Reconciled.not_done()  # the recipient has not shown it yet

        charge = tool(
            name="charge",
            description="Charge an order.",
            effect="irreversible",
            reconcile=lagging_reconcile,
        )(charge_sync if kind == "sync" else charge_async)
        app = _agent(checkpointer, [charge], [_call("charge")])
        cfg = {"thread_id": "t", "tool_timeout": 0.1, "tool_grace": 0.05}
        with pytest.raises(NeedsReviewError) as parked:
            app.invoke({"messages": ["charge it"]}, cfg)
        # the late answer lands at the provider; nothing else is ever sent
        _wait_for("the charge to be performed", lambda: client.stats()["performed"] == 1)
        time.sleep(0.7)  # past the provider's delay: a re-send would have landed by now
        assert client.stats()["performed"] == 1
        assert bodies == ["1042"]
        assert app.runs(thread_id="t")[0].status is RunStatus.NEEDS_REVIEW
        (record,) = app.effects(thread_id="t")
        assert parked.value.effect_id == record.effect_id
        if kind == "async":  # cancelled, so it ended: reconcile was asked once, said no
            assert checks == [record.effect_id]
            assert "may still arrive" in str(parked.value)
        else:  # the thread was still running after the grace: no reconcile at all
            assert checks == []
            assert "still running" in str(parked.value)


def test_timed_out_sync_call_that_ends_within_the_grace_is_recorded(
    checkpointer: Checkpointer,
) -> None:
    bodies: list[str] = []
    with FakeProvider() as provider:
        client = ProviderClient(provider.url)
        client.set_faults(delay_seconds=0.3)

        @tool(effect="irreversible", reconcile=lambda r: Reconciled.not_done())
        def charge(order_id: str) -> str:
            """Charge an order."""
            bodies.append(order_id)
            key = current_effect().idempotency_key
            return str(client.charge(10, "eur", order_id, idempotency_key=key)["id"])

        app = _agent(checkpointer, [charge], [_call("charge")])
        cfg = {"thread_id": "t", "tool_timeout": 0.05, "tool_grace": 30}
        out = app.invoke({"messages": ["charge it"]}, cfg)
        assert out["done"] == "yes"
        (record,) = app.effects(thread_id="t")
        assert record.status is EffectStatus.COMPLETED
        assert record.result == client.effects()[0]["id"]
        assert bodies == ["1042"] and client.stats()["performed"] == 1


# -- a parked parallel step leaves no call running -----------------------------------------


def test_parked_parallel_step_waits_for_its_sibling_and_records_it(
    checkpointer: Checkpointer, run_path: Any
) -> None:
    with FakeProvider() as provider:
        client = ProviderClient(provider.url)

        @tool(effect="irreversible")
        async def blind(order_id: str) -> str:
            """Refund, with no way to ask what happened."""
            await asyncio.sleep(30)  # times out: unknown outcome, no reconcile -> parks
            return "never"

        @tool(effect="write", timeout=30)
        def slow(order_id: str) -> str:
            """Refund slowly."""
            time.sleep(0.5)  # still running when its sibling parks
            key = current_effect().idempotency_key
            return str(client.charge(5, "eur", order_id, idempotency_key=key)["id"])

        app = _agent(checkpointer, [blind, slow], [_call("blind"), _call("slow", "call_2")])
        cfg = {"thread_id": "t", "tool_timeout": 0.05, "tool_grace": 0.05}
        with pytest.raises(NeedsReviewError):
            run_path(app, {"messages": ["refund both"]}, cfg)
        # at the moment the caller heard about the park, the sibling had ended...
        assert client.stats()["performed"] == 1
        records = {r.effect_type: r for r in app.effects(thread_id="t")}
        # ...and it is recorded: the ledger never says "may not have" for a done effect
        assert records["slow"].status is EffectStatus.COMPLETED
        assert records["slow"].result == client.effects()[0]["id"]
        assert records["blind"].status is EffectStatus.PENDING


# -- begin_effect races between two processes ----------------------------------------------

RACER = """
import asyncio, json, os, sys, time
from oncegraph.storage.checkpointer import PgCheckpointer, SqliteCheckpointer
from oncegraph.storage.records import EffectClass, EffectRecord, EffectStatus

kind, where, start, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])

async def main():
    store = PgCheckpointer(where) if kind == "postgres" else SqliteCheckpointer(where)
    await store.setup()
    while not os.path.exists(start):
        time.sleep(0.001)
    created, errors = [], []
    for i in range(rounds):
        record = EffectRecord(
            effect_id=f"eff-{i}", effect_type="charge", effect_class=EffectClass.WRITE,
            command_id=f"cmd-{i}", run_id="run-race", thread_id="t-race", node="tools",
            request_hash="sha256:x", status=EffectStatus.PENDING, row_version=1,
        )
        try:
            _, made = await store.begin_effect(record)
            created.append(made)
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
    await store.aclose()
    print(json.dumps({"created": created, "errors": errors}))

asyncio.run(main())
"""


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_two_process_begin_effect_races_never_fail(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    where = (
        str(request.getfixturevalue("fresh_dsn"))
        if backend == "postgres"
        else str(tmp_path / "race.db")
    )
    script = tmp_path / "racer.py"
    script.write_text(textwrap.dedent(RACER))
    start, rounds = tmp_path / "start", 200
    racers = [start_in_subprocess(script, [backend, where, str(start), str(rounds)])]
    racers.append(start_in_subprocess(script, [backend, where, str(start), str(rounds)]))
    time.sleep(0.5)  # both have set up their stores; the race starts together
    start.touch()
    reports = []
    for racer in racers:
        done = racer.wait(300)
        assert done.returncode == 0, done.describe()
        reports.append(done.json())
    assert [r["errors"] for r in reports] == [[], []]
    per_effect = [a + b for a, b in zip(reports[0]["created"], reports[1]["created"], strict=True)]
    assert per_effect == [1] * rounds  # each effect created exactly once, never an error


# -- processes exit without closing anything ------------------------------------------------

EXITER = """
import asyncio, sys
from typing import Annotated, Any, TypedDict
from oncegraph import END, START, StateGraph, ToolNode, add_messages, tool
from oncegraph.storage.checkpointer import PgCheckpointer

class S(TypedDict, total=False):
    messages: Annotated[list[dict[str, Any]], add_messages]
    done: str

@tool(dedup="test double: changes nothing a repeat could double")
async def ship(order: str) -> str:
    "Ship an order."
    await asyncio.sleep(30)
    return "never"

async def agent(state):
    call = {"id": "c1", "name": "ship", "args": {"order": "o"}}
    return {"messages": [{"role": "assistant", "content": "", "tool_calls": [call]}]}

g = StateGraph(S)
g.add_node("agent", agent); g.add_node("tools", ToolNode([ship]))
g.add_edge(START, "agent"); g.add_edge("agent", "tools"); g.add_edge("tools", END)
app = g.compile(checkpointer=PgCheckpointer(sys.argv[1]))

async def main():
    for _ in range(3):
        await app.aruns()
    try:  # the node is cut off by its timeout while its tool call is in flight
        await app.ainvoke({"messages": ["go"]}, {"thread_id": sys.argv[2], "node_timeout": 0.2})
    except Exception as exc:
        print(type(exc).__name__)

asyncio.run(main())
print("exited")
"""


@pytest.mark.postgres
def test_processes_using_postgres_exit_without_closing_anything(
    fresh_dsn: str, tmp_path: Path
) -> None:
    script = tmp_path / "exiter.py"
    script.write_text(textwrap.dedent(EXITER))
    children = [start_in_subprocess(script, [fresh_dsn, f"t{i}"]) for i in range(12)]
    outcomes = []
    for child in children:
        done = child.wait(120)  # a hang is caught here (killed and reported)
        outcomes.append((done.returncode, done.stdout.split(), done.stderr))
    assert [o[:2] for o in outcomes] == [(0, ["NodeTimeoutError", "exited"])] * 12, outcomes
    assert not [o[2] for o in outcomes if "Task was destroyed" in o[2] or "Warning" in o[2]]


# -- a call that outlives its run's event loop keeps the run held, across processes ------

KEEPER_GRAPH = """
import os, pathlib, time
from typing import Annotated, Any, TypedDict

from oncegraph import END, START, StateGraph, ToolNode, add_messages, tool


class S(TypedDict, total=False):
    messages: Annotated[list[dict[str, Any]], add_messages]
    done: str


@tool(timeout=0.2, dedup="test double: changes nothing a repeat could double")
def ship(order_id: str) -> str:
    \"\"\"Ship an order (each execution is logged; it waits at the gate).\"\"\"
    with open(os.environ["KEEPER_CALLS"], "a") as f:
        f.write("ship\\n")
    pathlib.Path(os.environ["KEEPER_INSIDE"]).touch()
    while not pathlib.Path(os.environ["KEEPER_GATE"]).exists():
        time.sleep(0.01)
    return "shipped"


def agent(state: S) -> dict[str, Any]:
    if state["messages"][-1]["role"] == "tool":
        return {"done": "yes"}
    call = {"id": "c1", "name": "ship", "args": {"order_id": "1042"}}
    return {"messages": [{"role": "assistant", "content": "", "tool_calls": [call]}]}


def route(state: S) -> str:
    return END if "done" in state else "tools"


def build(checkpointer: Any) -> Any:
    g = StateGraph(S)
    g.add_node("agent", agent)
    g.add_node("tools", ToolNode([ship]))
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", route, ["tools", END])
    g.add_edge("tools", "agent")
    return g.compile(checkpointer=checkpointer)
"""

KEEPER = """
import asyncio, os, pathlib, sys, time

from keeper_graph import build
from oncegraph.storage.checkpointer import PgCheckpointer

app = build(PgCheckpointer(sys.argv[1]))
try:
    asyncio.run(app.ainvoke({"messages": ["go"]}, {"thread_id": "t", "tool_grace": 0.1}))
except Exception as exc:
    print(type(exc).__name__)
pathlib.Path(os.environ["KEEPER_ENDED"]).touch()  # the loop is closed; the call still runs
while not pathlib.Path(os.environ["KEEPER_GATE"]).exists():
    time.sleep(0.01)
deadline = time.monotonic() + 60
while app.effects(thread_id="t")[0].status.value != "completed":  # recorded late
    assert time.monotonic() < deadline, "the late outcome was never recorded"
    time.sleep(0.01)
print("recorded")
"""


@pytest.mark.postgres
def test_a_call_that_outlives_its_loop_keeps_the_run_from_another_process(
    fresh_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Process A's sync tool times out and keeps running after A's ``asyncio.run`` has
    returned (its loop, and that loop's lock session, are gone). Another process is
    refused the run and a worker's claim query skips it until the call ends and is
    recorded; then the run resumes from the recorded result: one execution."""
    import psycopg

    from oncegraph.errors import RunBusyError
    from oncegraph.storage.checkpointer import PgCheckpointer
    from oncegraph.storage.sql.pg_locks import HELD_BY_OTHERS, TRY_LOCK, UNLOCK

    (tmp_path / "keeper_graph.py").write_text(textwrap.dedent(KEEPER_GRAPH))
    script = tmp_path / "keeper.py"
    script.write_text(textwrap.dedent(KEEPER))
    files = {n: tmp_path / n for n in ("gate", "inside", "ended", "calls")}
    env = {f"KEEPER_{n.upper()}": str(f) for n, f in files.items()}
    for name, value in env.items():  # this process's graph logs to the same file
        monkeypatch.setenv(name, value)
    monkeypatch.syspath_prepend(str(tmp_path))
    import keeper_graph

    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)
    keeper = start_in_subprocess(script, [fresh_dsn], env={**env, "PYTHONPATH": path})
    store = PgCheckpointer(fresh_dsn)
    app = keeper_graph.build(store)
    try:
        _wait_for("A's loop to end with its call still running", files["ended"].exists)
        assert files["inside"].exists()
        (run,) = app.runs(thread_id="t")
        with pytest.raises(RunBusyError, match="being executed by another process"):
            app.invoke(None, {"thread_id": "t"})
        with psycopg.connect(fresh_dsn, autocommit=True) as conn:
            held = conn.execute(
                f"SELECT {HELD_BY_OTHERS} FROM (SELECT %s::text AS run_id) r", (run.run_id,)
            ).fetchone()
            assert held == (True,), "a worker's claim query skips the run"
            # handed over: the run's own key is free, its kept key is what holds it
            assert conn.execute(TRY_LOCK, (run.run_id,)).fetchone() == (True,)
            conn.execute(UNLOCK, (run.run_id,))
        files["gate"].touch()
        done = keeper.wait(120)
    finally:
        files["gate"].touch()
        keeper.kill()
    assert done.returncode == 0, done.describe()
    assert done.stdout.split() == ["ToolTimeoutError", "recorded"], done.describe()
    (record,) = app.effects(thread_id="t")
    assert record.status is EffectStatus.COMPLETED and record.result == "shipped"
    deadline = time.monotonic() + 60
    while True:  # A lets the run go right after the record
        try:
            out = app.invoke(None, {"thread_id": "t"})
            break
        except RunBusyError:
            assert time.monotonic() < deadline, "the run was never let go"
            time.sleep(0.05)
    assert out["done"] == "yes"
    assert files["calls"].read_text().splitlines() == ["ship"], "the tool ran once"
    run_sync(store.aclose(), "aclose")
