"""No secret in any repr, public attribute, error or log line of the stores.

Every log record of every logger (DEBUG and up, psycopg's included) is captured while
the stores work, fail to connect, and are given a DSN libpq cannot parse; the passwords
in the PostgreSQL DSN and in the ``redis_url`` the store accepts (and does not use) must
appear nowhere. PostgreSQL here trusts local connections, so a DSN with a password still
connects.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from psycopg.conninfo import make_conninfo
from redis_fixtures import unused_port

from oncegraph.errors import ConfigError, StorageError
from oncegraph.storage.records import StepCommit
from oncegraph.storage.sql.postgres import PgCheckpointer
from oncegraph.testing.conformance import make_checkpoint, start_thread

PG_PASSWORD = "pg-Secret-4f1d"
REDIS_PASSWORD = "redis-Secret-9c2e"
SECRETS = (PG_PASSWORD, REDIS_PASSWORD)

pytestmark = [pytest.mark.postgres]


@pytest.fixture
def everything(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """Every record of every logger, DEBUG and up."""
    caplog.set_level(logging.DEBUG)
    for name in ("psycopg", "psycopg.pool", "oncegraph"):
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


async def test_stores_at_work_show_no_password(
    fresh_dsn: str, everything: pytest.LogCaptureFixture
) -> None:
    dsn = make_conninfo(fresh_dsn, password=PG_PASSWORD)
    redis_url = f"redis://:{REDIS_PASSWORD}@127.0.0.1:{unused_port()}/0"  # never contacted
    store = PgCheckpointer(dsn, redis_url, cache_prefix="og_secret_test:")
    try:
        tid, rid, cp1 = await start_thread(store)
        cp2 = make_checkpoint(tid, rid, 2, parent=cp1.checkpoint_id)
        await store.commit(StepCommit(thread_id=tid, expected_version=1, checkpoint=cp2))
        assert await store.get_checkpoint(tid) == cp2
        found = leaks(repr(store), str(store), *public_attributes(store), *logged(everything))
        assert not found, found
    finally:
        await store.aclose()


async def test_failures_show_no_password(
    fresh_dsn: str, everything: pytest.LogCaptureFixture
) -> None:
    """A refused connection: the errors and warnings name the place, never the password."""
    errors: list[str] = []
    down = make_conninfo(fresh_dsn, password=PG_PASSWORD, port=unused_port())
    store = PgCheckpointer(down, connect_timeout=2)
    try:
        with pytest.raises(StorageError) as info:
            await store.setup()
        errors += chain(info.value)
    finally:
        await store.aclose()
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
        with pytest.raises(ConfigError, match="could not be parsed") as info:
            await store.setup()
    finally:
        await store.aclose()
    texts = [*chain(info.value), repr(store), *logged(everything)]
    found = [t for t in texts for s in ("4f1d", PG_PASSWORD) if s in t]
    assert not found, found
    assert not [r for r in everything.records if r.name.startswith("psycopg")]
