"""``SharedReads``: what goes alone, what goes together, and who gets which error.

The reads here read a dict, through a gate that holds the read in flight until the test
lets it go (the PostgreSQL store's own shared reads: tests/backends/test_pg_shared_reads.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from oncegraph.storage.sql import pg_reads
from oncegraph.storage.sql.pg_reads import SharedReads


class Table:
    """Rows by key; every read waits at ``gate``; ``batches`` records each shared read."""

    def __init__(self, **rows: Any) -> None:
        self.rows = dict(rows)
        self.gate = asyncio.Event()
        self.batches: list[list[str]] = []
        self.fail: Exception | None = None

    async def one(self, key: str) -> Any:
        await self.gate.wait()
        return self.rows.get(key)

    async def many(self, keys: Sequence[str]) -> list[Any]:
        self.batches.append(list(keys))
        await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        return [self.rows.get(k) for k in keys]


def _decode(row: Any) -> Any:
    if row == "sealed":
        raise ValueError("sealed with a key this process lacks")
    return row


async def _in_flight(reads: SharedReads[str, Any], key: str) -> asyncio.Future[Any]:
    """A read started alone and held in flight by the gate."""
    first = asyncio.ensure_future(reads.read(key))
    await asyncio.sleep(0)
    return first


async def test_reads_asked_while_one_is_in_flight_go_together_after_it() -> None:
    table = Table(a=1, b=2)
    reads = SharedReads(table.one, table.many, _decode)
    first = await _in_flight(reads, "a")
    later = [asyncio.ensure_future(reads.read(k)) for k in ("b", "a", "b", "zz")]
    await asyncio.sleep(0)
    table.rows["b"] = 3  # committed after they were asked, before their statement went
    table.gate.set()
    assert await first == 1
    assert await asyncio.gather(*later) == [3, 1, 3, None]
    assert table.batches == [["b", "a", "zz"]], "one statement, each key once"
    assert (reads.stats.reads, reads.stats.statements, reads.stats.largest) == (5, 2, 3)


async def test_a_cancelled_read_is_left_out_and_the_others_are_answered() -> None:
    table = Table(a=1, b=2, c=3)
    reads = SharedReads(table.one, table.many, _decode)
    first = await _in_flight(reads, "a")
    gone, kept = asyncio.ensure_future(reads.read("b")), asyncio.ensure_future(reads.read("c"))
    await asyncio.sleep(0)
    gone.cancel()
    table.gate.set()
    assert (await first, await kept) == (1, 3)
    assert gone.cancelled()
    assert table.batches == [["c"]]


async def test_a_failed_statement_fails_each_of_its_reads_and_the_next_goes() -> None:
    table = Table(a=1, b=2)
    reads = SharedReads(table.one, table.many, _decode)
    first = await _in_flight(reads, "a")
    later = [asyncio.ensure_future(reads.read(k)) for k in ("a", "b")]
    await asyncio.sleep(0)
    table.fail = ConnectionError("the server went away")
    table.gate.set()
    assert await first == 1  # the lone read went before the failure
    for read in later:
        with pytest.raises(ConnectionError, match="went away"):
            await read
    table.fail = None
    assert await reads.read("b") == 2, "a failure leaves nothing stuck"


async def test_a_row_that_cannot_be_decoded_fails_its_own_key_only() -> None:
    table = Table(a=1, b="sealed", c=3)
    reads = SharedReads(table.one, table.many, _decode)
    first = await _in_flight(reads, "a")
    later = [asyncio.ensure_future(reads.read(k)) for k in ("b", "c", "b")]
    await asyncio.sleep(0)
    table.gate.set()
    await first
    results = await asyncio.gather(*later, return_exceptions=True)
    assert isinstance(results[0], ValueError) and isinstance(results[2], ValueError)
    assert results[1] == 3


async def test_at_most_max_keys_go_in_one_statement(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pg_reads, "MAX_KEYS", 2)
    table = Table(**{k: k.upper() for k in "abcdef"})
    reads = SharedReads(table.one, table.many, _decode)
    first = await _in_flight(reads, "a")
    later = [asyncio.ensure_future(reads.read(k)) for k in "bcdbef"]
    await asyncio.sleep(0)
    table.gate.set()
    await first
    assert await asyncio.gather(*later) == list("BCDBEF")
    assert table.batches == [["b", "c"], ["d", "e"], ["f"]]


async def test_drain_waits_for_the_read_alone_and_those_waiting_for_it() -> None:
    table = Table(a=1, b=2)
    reads = SharedReads(table.one, table.many, _decode)
    first = await _in_flight(reads, "a")
    second = asyncio.ensure_future(reads.read("b"))
    await asyncio.sleep(0)
    drained = asyncio.ensure_future(reads.drain())
    await asyncio.sleep(0.01)
    assert not drained.done(), "a read is still in flight"
    table.gate.set()
    await drained
    assert first.done() and second.done() and second.result() == 2
