"""A flood of ``NOTIFY oncegraph_runs`` does not keep an idle worker claiming.

Any role that may connect to the database can send the notice (it needs no privilege on
oncegraph's tables): here a role made for the test with LOGIN only. Each notice used to
cost the idle worker one claim statement (about 180 a second). Now, while claims find
nothing, notices wake the worker at most once per ``WAKE_INTERVAL`` (the notices of an
interval are coalesced into one wake at its end), and a run submitted during the flood
is still claimed at once, long before the worker's next poll.

Claims are counted around the worker's own claim call; the notices come from a real
second connection, one statement each, as the flood in the review.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from oncegraph import END, START, MessagesState, StateGraph
from oncegraph.storage.records import RunStatus
from oncegraph.storage.sql.postgres import PgCheckpointer
from oncegraph.worker import Worker
from oncegraph.worker.listen import WAKE_INTERVAL, Wakeups

pytestmark = pytest.mark.postgres

NOTICES = 1000


@pytest.fixture
def nobody(fresh_dsn: str) -> Iterator[str]:
    """A DSN for a role that may log in and nothing else (no table privileges)."""
    role = f"og_nobody_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(fresh_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
    info = psycopg.conninfo.conninfo_to_dict(fresh_dsn)
    info["user"] = role
    info.pop("password", None)
    yield psycopg.conninfo.make_conninfo(**info)
    with psycopg.connect(fresh_dsn, autocommit=True) as conn:
        conn.execute(  # its session may linger a moment after close
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,)
        )
        conn.execute(f"DROP ROLE {role}")


def _flood(dsn: str, n: int) -> float:
    """``n`` notices, one statement each, from a connection of ``dsn``; the seconds taken."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        may_read = conn.execute("SELECT has_table_privilege('oncegraph_runs', 'SELECT')")
        assert may_read.fetchone() == (False,)  # it cannot touch a run
        start = time.monotonic()
        for i in range(n):
            conn.execute("SELECT pg_notify('oncegraph_runs', %s)", (str(i),))
        return time.monotonic() - start


async def test_a_notify_flood_costs_an_idle_worker_at_most_one_claim_per_interval(
    fresh_dsn: str, nobody: str
) -> None:
    store = PgCheckpointer(fresh_dsn)

    def node(state: dict[str, Any]) -> dict[str, Any]:
        return {"messages": [{"role": "assistant", "content": "ok"}]}

    g = StateGraph(MessagesState)
    g.add_node("node", node)
    g.add_edge(START, "node")
    g.add_edge("node", END)
    app = g.compile(checkpointer=store)
    await app.setup()
    worker = Worker(app, concurrency=1, poll_seconds=600)  # no poll during the test
    claims = 0
    claim_runs = worker.queue.claim_runs

    async def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal claims
        claims += 1
        return await claim_runs(*args, **kwargs)

    worker.queue.claim_runs = counted  # type: ignore[method-assign]
    serving = asyncio.create_task(worker.run_forever())
    try:
        await asyncio.wait_for(worker.listening.wait(), 60)
        await asyncio.sleep(0.2)  # the wake of the LISTEN itself has been claimed
        before = claims
        flood = asyncio.create_task(asyncio.to_thread(_flood, nobody, NOTICES))
        await asyncio.sleep(0.05)
        # a real run submitted in the middle of the flood is claimed at once
        submitted = await app.asubmit(
            {"messages": [{"role": "user", "content": "hi"}]}, {"thread_id": "t"}
        )
        took = await flood
        await asyncio.sleep(5 * WAKE_INTERVAL)  # the last interval's coalesced wake
        during = claims - before
        result = await asyncio.wait_for(submitted.aresult(60), 60)
        assert result["messages"][-1]["content"] == "ok"
        assert (await submitted.arun()).status is RunStatus.COMPLETED
    finally:
        worker.stop()
        await serving
        await store.aclose()
    allowed = (took + 5 * WAKE_INTERVAL) / WAKE_INTERVAL + 4  # +4: the run's own claims
    assert during <= allowed, (during, NOTICES, took)
    assert during < NOTICES / 10  # far fewer claims than notices


async def test_wakeups_coalesce_the_notices_of_an_interval_into_one_wake() -> None:
    woke: list[float] = []
    loop = asyncio.get_running_loop()
    gate = Wakeups(lambda: woke.append(loop.time()), interval=0.05)
    gate.notice()  # an idle worker's first notice wakes it at once
    gate.claimed(True)  # and found work: the next notices wake at once too
    gate.notice()
    assert len(woke) == 2
    gate.claimed(False)  # a notice woke it for nothing: from now on, limited
    for _ in range(100):  # a burst: one wake at the interval's end for all of them
        gate.notice()
    assert len(woke) == 2
    await asyncio.sleep(0.2)
    assert len(woke) == 3 and woke[2] - woke[1] >= 0.05 - 1e-3
    assert gate.coalesced == 100
    gate.claimed(False)
    gate.notice()  # within the interval of the last wake: deferred, not lost
    assert len(woke) == 3
    gate.close()  # a worker that stops cancels what was due
    await asyncio.sleep(0.2)
    assert len(woke) == 3
    fresh: list[float] = []
    gate = Wakeups(lambda: fresh.append(loop.time()), interval=0.05)
    gate.notice()  # a submit: claimed, found
    gate.claimed(True)
    gate.claimed(False)  # the run ended, the freed slot's claim found nothing ...
    gate.notice()  # ... which does not hold the next submit's notice back
    assert len(fresh) == 2
