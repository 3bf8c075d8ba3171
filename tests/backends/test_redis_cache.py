"""RedisCache against the real Redis server, and PgCheckpointer given a ``redis_url``.

The cache must keep only newer versions (server-side compare-and-set), expire, survive
a flush, never serve an entry whose MAC does not verify, never let a forged version
block real writes, and cost nothing but latency when Redis is down or hangs.
PgCheckpointer accepts ``redis_url=`` and does not use it (measured: the cache saved no
read; see benchmarks/README.md): it reads the database's truth whatever Redis holds.

Redis comes from ``redis_fixtures`` (ONCEGRAPH_TEST_REDIS_URL, default database 15):
every test uses its own key prefix and deletes only its own keys; tests that flush
start a Redis server of their own.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, TypedDict

import pytest
import redis
from redis_fixtures import MAC_KEY, private_redis, unused_port

from oncegraph import END, START, Command, StateGraph, interrupt
from oncegraph.storage.cache.mac import EntryMac
from oncegraph.storage.cache.redis import RedisCache
from oncegraph.storage.protocols import Cache, Checkpointer
from oncegraph.storage.records import StepCommit
from oncegraph.storage.sql.postgres import PgCheckpointer
from oncegraph.testing.conformance import (
    CheckpointerConformance,
    Reopen,
    make_checkpoint,
    start_thread,
)


def patient(url: str, prefix: str, **kwargs: Any) -> RedisCache:
    """A cache for tests that are not about timeouts: generous socket and pool timeouts,
    so a loaded test machine does not turn a slow connect into a (correct) cache miss."""
    kwargs.setdefault("mac_key", MAC_KEY)
    return RedisCache(url, prefix=prefix, socket_timeout=30, pool_timeout=30, **kwargs)


@pytest.fixture
async def cache(redis_url: str, prefix: str) -> AsyncIterator[RedisCache]:
    store = patient(redis_url, prefix)
    yield store
    await store.aclose()


@pytest.fixture
def raw(redis_url: str) -> Any:
    """A plain client for writing behind the cache's back (only under a test's prefix)."""
    client = redis.Redis.from_url(redis_url, socket_timeout=30)
    yield client
    client.close()


pytestmark = pytest.mark.redis


# -- the cache alone ---------------------------------------------------------------------


async def test_is_a_cache(cache: RedisCache) -> None:
    assert isinstance(cache, Cache)


async def test_newer_version_wins_older_is_refused(cache: RedisCache) -> None:
    assert await cache.get_state("t") is None
    assert await cache.put_state("t", 2, b"two") is True
    assert await cache.put_state("t", 1, b"one") is False
    assert await cache.put_state("t", 2, b"two again") is False
    assert await cache.get_state("t") == (2, b"two")
    assert await cache.put_state("t", 3, b"three") is True
    assert await cache.get_state("t") == (3, b"three")
    assert await cache.get_state("other") is None


async def test_racing_writers_never_regress(
    redis_url: str, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Many tasks over several clients write shuffled versions; the newest stays."""
    caplog.set_level(logging.WARNING, logger="oncegraph.storage.cache.redis")
    caches = [patient(redis_url, prefix) for _ in range(4)]
    versions = list(range(1, 201))
    random.Random(7).shuffle(versions)
    try:
        results = await asyncio.gather(
            *(
                caches[i % len(caches)].put_state("t", v, f"payload {v}".encode())
                for i, v in enumerate(versions)
            ),
            # and one writer climbing while another descends, interleaved
            *(caches[0].put_state("u", v, b"%d" % v) for v in range(1, 101)),
            *(caches[1].put_state("u", v, b"%d" % v) for v in range(100, 0, -1)),
        )
        assert await caches[2].get_state("t") == (200, b"payload 200")
        assert await caches[3].get_state("u") == (100, b"100")
        written = [v for v, ok in zip(versions, results, strict=False) if ok]
        assert 200 in written
        # every accepted write was newer than every write accepted before it
        for v in range(1, 200):
            assert await caches[v % 4].put_state("t", v, b"late") is False
        # refused by the version guard, not by an error (which also returns False)
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    finally:
        for c in caches:
            await c.aclose()


async def test_ttl_is_set_with_the_value(redis_url: str, prefix: str) -> None:
    cache = patient(redis_url, prefix, ttl_seconds=30)
    client = redis.Redis.from_url(redis_url)
    try:
        assert await cache.put_state("t", 1, b"x")
        ttl = client.pttl(cache.key("t"))
        assert 0 < ttl <= 30_000
        assert await cache.put_state("t", 2, b"y")
        assert 0 < client.pttl(cache.key("t")) <= 30_000
    finally:
        client.close()
        await cache.aclose()


# -- MACs: a forged entry is never served, a forged version never pins a key ------------


def forge(raw: Any, key: str, **fields: Any) -> None:
    """Write fields of a cache entry behind the cache's back (a party with Redis access)."""
    raw.hset(key, mapping=fields)


def entry(raw: Any, key: str) -> dict[str, bytes]:
    return {k.decode(): v for k, v in raw.hgetall(key).items()}


async def test_entries_carry_a_verifiable_mac(cache: RedisCache, raw: Any) -> None:
    assert await cache.put_state("t", 7, b"payload")
    stored = raw.hgetall(cache.key("t"))
    assert set(stored) == {b"v", b"p", b"d", b"m"}
    mac = EntryMac(MAC_KEY)
    assert stored[b"d"].decode() == mac.digest(b"payload")
    assert mac.entry_ok("t", 7, stored[b"p"], stored[b"d"], stored[b"m"])
    assert b"payload" not in repr(cache).encode() and "test key" not in repr(cache)


async def test_a_forged_or_altered_entry_is_ignored_and_logged(
    cache: RedisCache, raw: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="oncegraph.storage.cache.redis")
    key = cache.key("t")
    assert await cache.put_state("t", 3, b'{"amount": 59.0}')
    genuine = entry(raw, key)
    altered = b'{"amount": 5.0}'
    cases: list[dict[str, Any]] = [
        {"p": altered},  # the payload changed, digest and tag kept
        {"p": altered, "d": EntryMac.digest(altered)},  # digest recomputed, no key for a tag
        {"v": 4},  # another version claimed for the genuine payload
        {"m": "0" * 64},
        {"m": EntryMac(b"another database's key, 32 bytes").tag("t", 3, genuine["d"].decode())},
    ]
    for fields in cases:
        raw.delete(key)
        forge(raw, key, **{**genuine, **fields})
        caplog.clear()
        assert await cache.get_state("t") is None, fields
        assert any("fails its MAC check" in r.getMessage() for r in caplog.records), fields
    # an entry without any MAC (written the way an older oncegraph did, or by hand)
    raw.delete(key)
    forge(raw, key, v=3, p=altered)
    assert await cache.get_state("t") is None
    # a genuine entry of another thread, moved to this thread's key
    assert await cache.put_state("other", 3, altered)
    raw.delete(key)
    forge(raw, key, **entry(raw, cache.key("other")))
    assert await cache.get_state("t") is None
    # a key of another type is no entry either, and does not block writes
    raw.delete(key)
    raw.set(key, "not a hash")
    assert await cache.get_state("t") is None
    assert await cache.put_state("t", 3, b"real")
    assert await cache.get_state("t") == (3, b"real")


async def test_a_huge_forged_version_does_not_pin_the_key(
    cache: RedisCache, raw: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A version compare-and-set alone would refuse every real write below 10**18 and,
    without a TTL, forever. The writer checks the claim's MAC and replaces the forgery."""
    caplog.set_level(logging.WARNING, logger="oncegraph.storage.cache.redis")
    key = cache.key("t")
    forge(raw, key, v=10**18, p=b"forged", d="0" * 64, m="0" * 64)
    assert raw.pttl(key) == -1  # no TTL: it would stay forever
    assert await cache.put_state("t", 3, b"real") is True
    assert await cache.get_state("t") == (3, b"real")
    assert 0 < raw.pttl(key) <= 3_600_000
    assert any("replacing it" in r.getMessage() for r in caplog.records)
    # a genuine tag copied from a real entry does not make a bigger version real either
    forge(raw, key, **{**entry(raw, key), "v": 10**18})
    raw.persist(key)
    assert await cache.put_state("t", 4, b"real 4") is True
    assert await cache.get_state("t") == (4, b"real 4")
    # nor does a claim without a MAC, or a version that is not a number
    for fields in ({"v": 10**18, "p": b"x"}, {"v": "9" * 400, "p": b"x", "d": "", "m": ""}):
        raw.delete(key)
        forge(raw, key, **fields)
        assert await cache.put_state("t", 5, b"real 5") is True
        assert await cache.get_state("t") == (5, b"real 5")


async def test_a_genuine_newer_version_still_wins(
    redis_url: str,
    prefix: str,
    raw: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Another process with the same key wrote a newer version: it stays, no warning,
    and a key that lost its TTL gets it back on the refused write."""
    caplog.set_level(logging.WARNING, logger="oncegraph.storage.cache.redis")
    one, two = patient(redis_url, prefix), patient(redis_url, prefix)
    try:
        assert await one.put_state("t", 9, b"nine")
        raw.persist(one.key("t"))
        assert await two.put_state("t", 8, b"eight") is False
        assert await two.get_state("t") == (9, b"nine")
        assert 0 < raw.pttl(one.key("t")) <= 3_600_000
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    finally:
        await one.aclose()
        await two.aclose()


async def test_a_cache_without_a_key_serves_nothing(
    redis_url: str,
    prefix: str,
    raw: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    keyed = patient(redis_url, prefix)
    keyless = patient(redis_url, prefix, mac_key=None)
    try:
        assert await keyed.put_state("t", 1, b"x")
        with caplog.at_level(logging.WARNING, logger="oncegraph.storage.cache.redis"):
            assert await keyless.get_state("t") is None
            assert await keyless.put_state("t", 2, b"y") is False
        assert [r.getMessage() for r in caplog.records if "no MAC key" in r.getMessage()]
        assert raw.hget(keyed.key("t"), "v") == b"1"
        keyless.provide_key(MAC_KEY)
        assert await keyless.get_state("t") == (1, b"x")
        keyless.provide_key(b"a later key never replaces the first one")
        assert await keyless.get_state("t") == (1, b"x")
    finally:
        await keyed.aclose()
        await keyless.aclose()


async def test_racing_writers_replace_a_forgery_and_never_regress(
    redis_url: str,
    prefix: str,
    raw: Any,
) -> None:
    caches = [patient(redis_url, prefix) for _ in range(4)]
    forge(raw, caches[0].key("t"), v=10**12, p=b"forged", m="")
    versions = list(range(1, 101))
    random.Random(3).shuffle(versions)
    try:
        await asyncio.gather(
            *(caches[i % 4].put_state("t", v, b"%d" % v) for i, v in enumerate(versions))
        )
        assert await caches[1].get_state("t") == (100, b"100")
    finally:
        for c in caches:
            await c.aclose()


async def test_flush_between_puts_is_harmless(tmp_path: Path, prefix: str) -> None:
    """A flush (and a forgotten script) on a Redis server this test starts and owns."""
    with private_redis(tmp_path) as url:
        cache = patient(url, prefix)
        client = redis.Redis.from_url(url)
        try:
            assert await cache.put_state("t", 5, b"five")
            client.flushdb()
            client.script_flush()  # the compare-and-set script is gone too
            assert await cache.get_state("t") is None
            assert await cache.put_state("t", 3, b"three") is True  # nothing newer is known
            assert await cache.get_state("t") == (3, b"three")
            assert await cache.put_state("t", 2, b"two") is False
        finally:
            client.close()
            await cache.aclose()


async def test_redis_down_costs_nothing_but_a_miss(
    prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    cache = RedisCache(f"redis://127.0.0.1:{unused_port()}/0", prefix=prefix, mac_key=MAC_KEY)
    try:
        with caplog.at_level(logging.WARNING, logger="oncegraph.storage.cache.redis"):
            assert await asyncio.wait_for(cache.put_state("t", 1, b"x"), 10) is False
            assert await asyncio.wait_for(cache.get_state("t"), 10) is None
        assert any("redis cache put_state failed" in r.getMessage() for r in caplog.records)
    finally:
        await cache.aclose()


async def test_hanging_redis_times_out_then_stays_quiet(prefix: str) -> None:
    """A Redis that accepts but never answers costs one socket timeout, then the cache
    skips Redis for the cooldown instead of paying the timeout on every call."""
    accepted: list[asyncio.StreamWriter] = []

    async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)

    server = await asyncio.start_server(swallow, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    cache = RedisCache(
        f"redis://127.0.0.1:{port}/0",
        prefix=prefix,
        socket_timeout=0.2,
        cooldown_seconds=60,
        mac_key=MAC_KEY,
    )
    try:
        assert await asyncio.wait_for(cache.put_state("t", 1, b"x"), 10) is False
        seen = len(accepted)
        assert seen >= 1
        for _ in range(5):
            assert await cache.put_state("t", 2, b"y") is False
            assert await cache.get_state("t") is None
        assert len(accepted) == seen  # no further connection attempts while cooling down
    finally:
        await cache.aclose()
        for writer in accepted:
            writer.close()
        server.close()
        await server.wait_closed()


# -- PgCheckpointer with the cache -----------------------------------------------------


@pytest.mark.postgres
class TestPgRedisConformance(CheckpointerConformance):
    """The whole contract holds with the cache in front of PostgreSQL."""

    @pytest.fixture
    async def checkpointer(
        self,
        fresh_dsn: str,
        redis_url: str,
        prefix: str,
    ) -> AsyncIterator[Checkpointer]:
        store = PgCheckpointer(postgres_dsn=fresh_dsn, redis_url=redis_url, cache_prefix=prefix)
        await store.setup()
        yield store
        await store.aclose()

    @pytest.fixture
    async def reopen(
        self,
        fresh_dsn: str,
        redis_url: str,
        prefix: str,
    ) -> AsyncIterator[Reopen]:
        opened: list[PgCheckpointer] = []

        async def factory() -> Checkpointer:
            store = PgCheckpointer(fresh_dsn, redis_url, cache_prefix=prefix)
            await store.setup()
            opened.append(store)
            return store

        yield factory
        for store in opened:
            await store.aclose()


async def three_versions(store: PgCheckpointer) -> tuple[str, list[Any]]:
    tid, rid, cp1 = await start_thread(store)
    cp2 = make_checkpoint(tid, rid, 2, parent=cp1.checkpoint_id, values={"n": 2})
    await store.commit(StepCommit(thread_id=tid, expected_version=1, checkpoint=cp2))
    cp3 = make_checkpoint(tid, rid, 3, parent=cp2.checkpoint_id, values={"n": 3})
    await store.commit(StepCommit(thread_id=tid, expected_version=2, checkpoint=cp3))
    return tid, [cp1, cp2, cp3]


def keys_under(raw: Any, prefix: str) -> list[bytes]:
    return list(raw.scan_iter(match=prefix + "*"))


@pytest.mark.postgres
async def test_the_store_neither_writes_nor_reads_the_cache(
    fresh_dsn: str, redis_url: str, prefix: str, raw: Any
) -> None:
    """Measured (benchmarks/cache_bench.py): a verified hit still reads the thread row,
    so the cache saved no read and cost a Redis round trip per step. ``redis_url=`` is
    accepted (the seed example passes it) and Redis is left alone."""
    store = PgCheckpointer(fresh_dsn, redis_url=redis_url, cache_prefix=prefix)
    try:
        await store.setup()
        tid, (_, _, cp3) = await three_versions(store)
        assert await store.get_checkpoint(tid) == cp3
        assert keys_under(raw, prefix) == []  # nothing written, on commit or on read
        assert redis_url not in repr(store)
    finally:
        await store.aclose()


@pytest.mark.postgres
async def test_checkpointer_works_with_redis_down(
    fresh_dsn: str,
    prefix: str,
) -> None:
    store = PgCheckpointer(
        fresh_dsn, redis_url=f"redis://127.0.0.1:{unused_port()}/0", cache_prefix=prefix
    )
    try:
        await store.setup()
        tid, (_, _, cp3) = await three_versions(store)
        assert await store.get_checkpoint(tid) == cp3
    finally:
        await store.aclose()


class Refund(TypedDict, total=False):
    order: str
    amount: float
    approved: bool


def refund_app(store: PgCheckpointer) -> Any:
    def quote(state: Refund) -> dict[str, Any]:
        return {"amount": 59.0}

    def approve(state: Refund) -> dict[str, Any]:
        return {"approved": bool(interrupt({"refund": state["amount"]}))}

    g = StateGraph(Refund)
    g.add_node("quote", quote)
    g.add_node("approve", approve)
    g.add_edge(START, "quote")
    g.add_edge("quote", "approve")
    g.add_edge("approve", END)
    return g.compile(checkpointer=store)


@pytest.mark.postgres
async def test_a_forged_entry_never_reaches_get_state(
    fresh_dsn: str,
    redis_url: str,
    prefix: str,
    raw: Any,
) -> None:
    """The review's attack: at an approval interrupt someone with Redis access writes a
    head showing 5.00 instead of 59.00 where the cache used to keep it, with a huge
    version. The approver sees 59.00 and the run goes on from the database."""
    store = PgCheckpointer(fresh_dsn, redis_url, cache_prefix=prefix)
    cfg = {"thread_id": "refund-1042"}
    try:
        app = refund_app(store)
        await app.ainvoke({"order": "1042"}, cfg)
        key = RedisCache(redis_url, prefix=prefix).key("refund-1042")
        forged = b'{"amount": 5.0}'
        forge(raw, key, v=10**18, p=forged, d=EntryMac.digest(forged), m="0" * 64)
        assert (await app.aget_state(cfg)).values["amount"] == 59.0
        out = await app.ainvoke(Command(resume=True), cfg)
        assert out["approved"] is True and out["amount"] == 59.0
        assert keys_under(raw, prefix) == [key.encode()]  # only the forgery, untouched
    finally:
        await store.aclose()
