"""A run whose PostgreSQL lock session dies while a node runs (the database restarted,
or an administrator ended the session) is not failed: it stops without writing a status
and is claimed again, and no effect is made twice.

The lock session is ended for real with ``pg_terminate_backend`` from another
connection, as a database restart ends it. The node waits until this process knows the
lock may be gone (its session's next ping fails), then makes its next effect: that
attempt is refused (``LeaseLostError``). Before, the run became ``failed`` and waited
for an operator; now a worker claims it again once its lease runs out, and a caller
without workers continues it with ``invoke(None, config)``. Charges go to the fake
payment provider (a real HTTP server keyed by the effect's idempotency key), and the
charge bodies count their calls, so a repeated call shows even when the provider would
deduplicate it.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypedDict

import psycopg
import pytest

from oncegraph import END, START, StateGraph, aeffect, current_effect
from oncegraph.app import CompiledGraph
from oncegraph.errors import LeaseLostError
from oncegraph.runtime.context import current_task
from oncegraph.runtime.portal import run_sync
from oncegraph.storage.records import RunStatus
from oncegraph.storage.sql.postgres import PgCheckpointer
from oncegraph.testing.provider import FakeProvider, ProviderClient
from oncegraph.worker import Worker

pytestmark = pytest.mark.postgres

RunPath = Callable[..., dict[str, Any]]  # the conftest's run_path fixture
HANG = 120.0  # seconds: a hang detector only


class S(TypedDict, total=False):
    order: str
    charged: list[str]


class Shop:
    """A node that charges twice (``first``, then ``second``); before the second charge
    of its first attempt, the run's lock session is ended (by :meth:`end_lock_session`,
    called from the test once the node is there)."""

    def __init__(self, dsn: str, client: ProviderClient) -> None:
        self.dsn = dsn
        self.calls: dict[str, int] = {"first": 0, "second": 0}
        self.attempts = 0
        self.at_second = threading.Event()
        self.lock_ended = threading.Event()

        def charge(what: str, order: str) -> str:
            self.calls[what] += 1
            key = current_effect().idempotency_key
            return str(client.charge(10, "eur", f"{order}-{what}", idempotency_key=key)["id"])

        async def pay(state: S) -> dict[str, Any]:
            self.attempts += 1
            first = await aeffect(charge, "first", state["order"])
            if self.attempts == 1:
                self.at_second.set()
                ctx = current_task()
                assert ctx is not None and ctx.claim is not None
                deadline = time.monotonic() + HANG
                while not ctx.claim.lost:  # the session's next ping finds it gone
                    assert time.monotonic() < deadline, "the lock was never found lost"
                    await asyncio.sleep(0.02)
            second = await aeffect(charge, "second", state["order"])
            return {"charged": [first, second]}

        g = StateGraph(S)
        g.add_node("pay", pay)
        g.add_edge(START, "pay")
        g.add_edge("pay", END)
        self.store = PgCheckpointer(dsn, claim_timeout=1.5)  # pings its lock every 0.5 s
        self.app: CompiledGraph = g.compile(checkpointer=self.store)

    def end_lock_session(self) -> int:
        """``pg_terminate_backend`` every session holding an advisory lock in this
        database (the run's lock session), once the node waits before its second charge."""
        assert self.at_second.wait(HANG)
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT pg_terminate_backend(l.pid) FROM pg_locks l "
                "WHERE l.locktype = 'advisory' AND l.granted AND l.database = "
                "(SELECT oid FROM pg_database WHERE datname = current_database()) "
                "GROUP BY l.pid"
            ).fetchall()
        assert rows and all(ok for (ok,) in rows)
        return len(rows)


@pytest.fixture
def client() -> Iterator[ProviderClient]:
    with FakeProvider() as running:
        yield ProviderClient(running.url)


@pytest.fixture
def shop(fresh_dsn: str, client: ProviderClient) -> Iterator[Shop]:
    made = Shop(fresh_dsn, client)
    yield made
    run_sync(made.store.aclose(), "aclose")


def _check_once_each(shop: Shop, client: ProviderClient) -> None:
    assert shop.calls == {"first": 1, "second": 1}  # neither body ran twice
    stats = client.stats()
    assert stats["performed"] == 2 and stats["replayed"] == 0
    effects = shop.app.effects(thread_id="t")
    assert sorted((e.effect_type, e.status) for e in effects) == [
        ("charge", "completed"),
        ("charge", "completed"),
    ]


async def test_a_worker_whose_lock_session_is_ended_leaves_the_run_to_be_claimed_again(
    shop: Shop, client: ProviderClient
) -> None:
    app = shop.app
    worker = Worker(app, concurrency=1, lease_seconds=1.5, heartbeat_seconds=0.5,
                    poll_seconds=0.1)
    serving = asyncio.create_task(worker.run_forever())
    try:
        submitted = await app.asubmit({"order": "1042"}, {"thread_id": "t"})
        assert await asyncio.to_thread(shop.end_lock_session) == 1
        deadline = time.monotonic() + HANG
        while (run := await submitted.arun()).status not in (
            RunStatus.COMPLETED,
            RunStatus.FAILED,
            RunStatus.NEEDS_REVIEW,
        ):
            assert time.monotonic() < deadline, f"run stuck {run.status}"
            await asyncio.sleep(0.05)
    finally:
        worker.stop()
        await serving
    assert run.status is RunStatus.COMPLETED, run.error  # claimed again, not failed
    assert run.error is None and shop.attempts == 2
    assert run.fencing_token >= 2  # a second claim took it
    _check_once_each(shop, client)


def test_a_caller_whose_lock_session_is_ended_gets_lease_lost_and_continues(
    shop: Shop, client: ProviderClient, run_path: RunPath
) -> None:
    ender = threading.Thread(target=shop.end_lock_session)
    ender.start()
    try:
        with pytest.raises(LeaseLostError, match="left as it is, not failed"):
            run_path(shop.app, {"order": "1042"}, {"thread_id": "t"})
    finally:
        ender.join()
    (run,) = shop.app.runs(thread_id="t")
    assert run.status is RunStatus.RUNNING and run.error is None  # not failed
    assert shop.calls == {"first": 1, "second": 0}
    out = run_path(shop.app, None, {"thread_id": "t"})  # continue: the same run
    assert len(out["charged"]) == 2
    (after,) = shop.app.runs(thread_id="t")
    assert after.run_id == run.run_id and after.status is RunStatus.COMPLETED
    _check_once_each(shop, client)
