"""RedisCache against the real Redis server, and PgCheckpointer reading through it.

The cache must keep only newer versions (server-side compare-and-set), expire, survive
a flush, and cost nothing but latency when Redis is down or hangs. The checkpointer
must read back the database's truth whatever the cache holds.

Redis comes from ONCEGRAPH_TEST_REDIS_URL (default ``redis://127.0.0.1:6379/0``); every
test uses its own key prefix. Flush tests flush a separate database index (the one
after the configured one) so that parallel tests keep their keys. Without a reachable
server the tests skip, except under CI=true where they fail.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import socket
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import redis

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

REDIS_URL = os.environ.get("ONCEGRAPH_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


@pytest.fixture(scope="session")
def redis_url() -> str:
    try:
        client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=10, socket_timeout=10)
        try:
            client.ping()
        finally:
            client.close()
    except (redis.RedisError, OSError) as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"Redis is required under CI=true: {exc}")
        pytest.skip(f"Redis unreachable ({exc}); set ONCEGRAPH_TEST_REDIS_URL")
    return REDIS_URL


@pytest.fixture
def flush_url(redis_url: str) -> str:
    """A URL to the database index after the configured one, which tests may flush."""
    pool = redis.ConnectionPool.from_url(redis_url)
    db = int(pool.connection_kwargs.get("db", 0))
    pool.disconnect()
    base = redis_url.rsplit("/", 1)[0] if redis_url.count("/") > 2 else redis_url
    return f"{base}/{(db + 1) % 16}"


@pytest.fixture
def prefix(redis_url: str) -> Iterator[str]:
    """A key prefix of this test; its keys are deleted afterwards."""
    value = f"og_test:{uuid.uuid4().hex}:"
    yield value
    client = redis.Redis.from_url(redis_url)
    try:
        keys = list(client.scan_iter(match=value + "*"))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


def patient(url: str, prefix: str, **kwargs: Any) -> RedisCache:
    """A cache for tests that are not about timeouts: generous socket and pool timeouts,
    so a loaded test machine does not turn a slow connect into a (correct) cache miss."""
    return RedisCache(url, prefix=prefix, socket_timeout=30, pool_timeout=30, **kwargs)


@pytest.fixture
async def cache(redis_url: str, prefix: str) -> AsyncIterator[RedisCache]:
    store = patient(redis_url, prefix)
    yield store
    await store.aclose()


def unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


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


async def test_flush_between_puts_is_harmless(flush_url: str, prefix: str) -> None:
    cache = patient(flush_url, prefix)
    client = redis.Redis.from_url(flush_url)
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
    cache = RedisCache(f"redis://127.0.0.1:{unused_port()}/0", prefix=prefix)
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
        f"redis://127.0.0.1:{port}/0", prefix=prefix, socket_timeout=0.2, cooldown_seconds=60
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


@pytest.fixture
async def pg_cached(
    fresh_dsn: str,
    flush_url: str,
    prefix: str,
) -> AsyncIterator[PgCheckpointer]:
    cache = patient(flush_url, prefix)
    store = PgCheckpointer(postgres_dsn=fresh_dsn, cache=cache)
    await store.setup()
    yield store
    await store.aclose()
    await cache.aclose()


async def three_versions(store: PgCheckpointer) -> tuple[str, list[Any]]:
    tid, rid, cp1 = await start_thread(store)
    cp2 = make_checkpoint(tid, rid, 2, parent=cp1.checkpoint_id, values={"n": 2})
    await store.commit(StepCommit(thread_id=tid, expected_version=1, checkpoint=cp2))
    cp3 = make_checkpoint(tid, rid, 3, parent=cp2.checkpoint_id, values={"n": 3})
    await store.commit(StepCommit(thread_id=tid, expected_version=2, checkpoint=cp3))
    return tid, [cp1, cp2, cp3]


@pytest.mark.postgres
async def test_commit_writes_the_head_into_the_cache(pg_cached: PgCheckpointer) -> None:
    tid, (_, _, cp3) = await three_versions(pg_cached)
    assert pg_cached.cache is not None
    entry = await pg_cached.cache.get_state(tid)
    assert entry is not None and entry[0] == 3
    assert await pg_cached.get_checkpoint(tid) == cp3


@pytest.mark.postgres
async def test_state_is_correct_after_flush(pg_cached: PgCheckpointer, flush_url: str) -> None:
    tid, (_, cp2, cp3) = await three_versions(pg_cached)
    client = redis.Redis.from_url(flush_url)
    try:
        client.flushdb()
        assert await pg_cached.get_checkpoint(tid) == cp3  # from the database, re-cached
        assert pg_cached.cache is not None
        assert (await pg_cached.cache.get_state(tid) or (0,))[0] == 3
        client.flushdb()
        cp4 = make_checkpoint(tid, cp3.run_id, 4, parent=cp3.checkpoint_id)
        await pg_cached.commit(StepCommit(thread_id=tid, expected_version=3, checkpoint=cp4))
        client.flushdb()
        assert await pg_cached.get_checkpoint(tid) == cp4
        assert await pg_cached.get_checkpoint(tid, cp2.checkpoint_id) == cp2
    finally:
        client.close()


@pytest.mark.postgres
async def test_poisoned_cache_is_never_trusted(pg_cached: PgCheckpointer, flush_url: str) -> None:
    tid, (cp1, cp2, cp3) = await three_versions(pg_cached)
    cache = pg_cached.cache
    assert isinstance(cache, RedisCache)
    stale = (await cache.get_state(tid) or (0, b""))[1]
    client = redis.Redis.from_url(flush_url)
    key = cache.key(tid)
    try:
        # an older version, written behind the version guard's back
        cp2_payload = stale.replace(cp3.checkpoint_id.encode(), cp2.checkpoint_id.encode())
        client.hset(key, mapping={"v": 2, "p": cp2_payload})
        assert await pg_cached.get_checkpoint(tid) == cp3
        # the right version number with another checkpoint's payload
        client.hset(key, mapping={"v": 3, "p": cp2_payload})
        assert await pg_cached.get_checkpoint(tid) == cp3
        # a version from the future (another database sharing the prefix)
        client.hset(key, mapping={"v": 99, "p": stale})
        assert await pg_cached.get_checkpoint(tid) == cp3
        # garbage
        client.hset(key, mapping={"v": 3, "p": b"\xff not json"})
        assert await pg_cached.get_checkpoint(tid) == cp3
        client.hset(key, mapping={"v": "three", "p": stale})
        assert await pg_cached.get_checkpoint(tid) == cp3
        # and the chain goes on from the database's version, whatever the cache says
        cp4 = make_checkpoint(tid, cp1.run_id, 4, parent=cp3.checkpoint_id)
        await pg_cached.commit(StepCommit(thread_id=tid, expected_version=3, checkpoint=cp4))
        assert await pg_cached.get_checkpoint(tid) == cp4
    finally:
        client.close()


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
