"""No secret in any repr, public attribute, error or log line of the stores.

Every log record of every logger (DEBUG and up, psycopg's and redis' included) is
captured while the stores work, fail to connect, and are given a DSN libpq cannot
parse; the passwords in the PostgreSQL DSN and the Redis URL must appear nowhere.
PostgreSQL here trusts local connections, so a DSN with a password still connects; the
Redis server is one this test starts with ``requirepass``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from psycopg.conninfo import make_conninfo
from redis_fixtures import private_redis, unused_port

from oncegraph.errors import StorageError
from oncegraph.storage.cache.redis import RedisCache, redact_url
from oncegraph.storage.records import StepCommit
from oncegraph.storage.sql.postgres import PgCheckpointer
from oncegraph.testing.conformance import make_checkpoint, start_thread

PG_PASSWORD = "pg-Secret-4f1d"
REDIS_PASSWORD = "redis-Secret-9c2e"
SECRETS = (PG_PASSWORD, REDIS_PASSWORD)

pytestmark = [pytest.mark.postgres, pytest.mark.redis]


@pytest.fixture
def everything(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """Every record of every logger, DEBUG and up."""
    caplog.set_level(logging.DEBUG)
    for name in ("psycopg", "psycopg.pool", "redis", "oncegraph"):
        caplog.set_level(logging.DEBUG, logger=name)
    yield caplog


def leaks(*texts: Any) -> list[str]:
    return [f"{s!r} in {t!r}" for t in texts for s in SECRETS if s in str(t)]


def logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [f"{r.name}: {r.getMessage()} {r.exc_text or ''}" for r in caplog.records]


def chain(exc: BaseException) -> list[str]:
    """An error, its cause and context, as a traceback would show them."""
    found: list[str] = []
    seen: BaseException | None = exc
    while seen is not None:
        found.append(f"{type(seen).__name__}: {seen}")
        seen = seen.__cause__ or seen.__context__
    return found


def public_attributes(obj: Any) -> list[str]:
    return [f"{k}={v!r}" for k, v in vars(obj).items() if not k.startswith("_")]


def test_redact_url() -> None:
    assert redact_url("redis://:pw@host:6379/0") == "redis://:***@host:6379/0"
    assert redact_url("rediss://user:pw@host/1") == "rediss://user:***@host/1"
    assert redact_url("redis://host:6379/0?password=pw&db=2") == (
        "redis://host:6379/0?password=***&db=2"
    )
    assert redact_url("redis://host:6379/0") == "redis://host:6379/0"


async def test_stores_at_work_show_no_password(
    fresh_dsn: str,
    tmp_path: Path,
    everything: pytest.LogCaptureFixture,
) -> None:
    dsn = make_conninfo(fresh_dsn, password=PG_PASSWORD)
    with private_redis(tmp_path, password=REDIS_PASSWORD) as redis_url:
        assert REDIS_PASSWORD in redis_url
        store = PgCheckpointer(dsn, redis_url, cache_prefix="og_secret_test:")
        try:
            tid, rid, cp1 = await start_thread(store)
            cp2 = make_checkpoint(tid, rid, 2, parent=cp1.checkpoint_id)
            await store.commit(StepCommit(thread_id=tid, expected_version=1, checkpoint=cp2))
            assert await store.get_checkpoint(tid) == cp2
            # the store does not use Redis; the cache component on its own still may
            cache = RedisCache(redis_url, mac_key=b"k" * 32, prefix="og_secret_test:")
            try:
                assert await cache.put_state(tid, 2, b"payload")  # the password was used
                assert await cache.get_state(tid) is not None
            finally:
                await cache.aclose()
            found = leaks(
                repr(store),
                str(store),
                repr(cache),
                cache.url,
                *public_attributes(store),
                *public_attributes(cache),
                *logged(everything),
            )
            assert not found, found
        finally:
            await store.aclose()


async def test_failures_show_no_password(
    fresh_dsn: str,
    tmp_path: Path,
    everything: pytest.LogCaptureFixture,
) -> None:
    """A refused connection, a wrong Redis password, a Redis that is down: the errors
    and warnings name the place, never the password."""
    errors: list[str] = []
    down = make_conninfo(fresh_dsn, password=PG_PASSWORD, port=unused_port())
    store = PgCheckpointer(down, connect_timeout=2)
    try:
        with pytest.raises(StorageError) as info:
            await store.setup()
        errors += chain(info.value)
    finally:
        await store.aclose()
    with private_redis(tmp_path, password="the right one") as url:
        wrong = url.replace("the right one", REDIS_PASSWORD)
        for redis_url in (wrong, f"redis://:{REDIS_PASSWORD}@127.0.0.1:{unused_port()}/0"):
            cache = RedisCache(redis_url, mac_key=b"k" * 32, socket_timeout=30)
            try:
                assert await cache.put_state("t", 1, b"x") is False
                assert not leaks(repr(cache), *public_attributes(cache))
            finally:
                await cache.aclose()
    assert any("redis cache put_state failed" in line for line in logged(everything))
    found = leaks(*errors, *logged(everything))
    assert not found, found


@pytest.mark.parametrize(
    "dsn",
    [
        # key=value with an unquoted space: libpq's message quotes the part after it
        "host=127.0.0.1 dbname=test user=postgres password=pg-Secret 4f1d",
        f"host=127.0.0.1 dbname=test user=postgres password='{PG_PASSWORD}",  # unterminated
        "postgresql://postgres:pg%zzSecret-4f1d@127.0.0.1:5432/test",  # bad percent-encoding
        f"postgresql://postgres:{PG_PASSWORD}@127.0.0.1:5432/test?{PG_PASSWORD}=1",
    ],
)
async def test_an_unparsable_dsn_is_a_clean_error(
    dsn: str, everything: pytest.LogCaptureFixture
) -> None:
    """psycopg_pool would log libpq's parse error at WARNING on every attempt, quoting
    the token it choked on; the store refuses the DSN first, showing none of it."""
    store = PgCheckpointer(dsn, connect_timeout=2)
    try:
        with pytest.raises(StorageError, match="could not be parsed") as info:
            await store.setup()
    finally:
        await store.aclose()
    texts = [*chain(info.value), repr(store), *logged(everything)]
    found = [t for t in texts for s in ("4f1d", PG_PASSWORD) if s in t]
    assert not found, found
    assert not [r for r in everything.records if r.name.startswith("psycopg")]
