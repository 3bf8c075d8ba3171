"""The SDK adapters' per-loop client: one per live loop, closed when its loop ends."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from oncegraph.prebuilt.models._client import PerLoopClient


class Clients:
    """A factory that records what it built and what was closed."""

    def __init__(self) -> None:
        self.built: list[object] = []
        self.closed: list[object] = []

    def build(self) -> object:
        client = object()
        self.built.append(client)
        return client

    async def close(self, client: object) -> None:
        self.closed.append(client)


@pytest.fixture
def other_loop() -> Iterator[asyncio.AbstractEventLoop]:
    """A second event loop running in its own thread (as the sync facade's is)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.run_until_complete(loop.shutdown_asyncgens())  # as asyncio.run ends a loop
    loop.close()


def on(loop: asyncio.AbstractEventLoop, coro: Any) -> Any:
    return asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))


def test_two_live_loops_keep_one_client_each(other_loop: asyncio.AbstractEventLoop) -> None:
    seen = Clients()
    clients = PerLoopClient(seen.build, seen.close)

    async def alternate() -> tuple[set[int], set[int]]:
        here, there = set(), set()
        for _ in range(4):
            here.add(id(await clients.get()))
            there.add(id(await on(other_loop, clients.get())))
        return here, there

    here, there = asyncio.run(alternate())
    assert len(here) == len(there) == 1 and here != there
    assert len(seen.built) == 2, "switching loops must not build a client per switch"
    # asyncio.run's loop has ended: its client is closed; the live loop's is not
    assert seen.closed == [next(c for c in seen.built if id(c) in here)]


def test_successive_loops_each_close_their_client() -> None:
    seen = Clients()
    clients = PerLoopClient(seen.build, seen.close)
    for _ in range(3):
        asyncio.run(clients.get())
    assert len(seen.built) == 3
    assert seen.closed == seen.built


def test_aclose_closes_only_the_running_loops_client(
    other_loop: asyncio.AbstractEventLoop,
) -> None:
    seen = Clients()
    clients = PerLoopClient(seen.build, seen.close)

    async def main() -> None:
        mine = await clients.get()
        await on(other_loop, clients.get())
        await clients.aclose()
        assert seen.closed == [mine]
        assert await clients.get() is not mine  # a new one after aclose
        await clients.aclose()

    asyncio.run(main())
    assert len(seen.built) == 3 and len(seen.closed) == 2


def test_a_callers_client_is_never_closed() -> None:
    own = object()
    clients: PerLoopClient[object] = PerLoopClient(lambda: own, None)

    async def main() -> None:
        assert await clients.get() is own
        await clients.aclose()

    asyncio.run(main())
    asyncio.run(main())
