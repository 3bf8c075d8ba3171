"""Redis for the tests, without touching anybody's data.

* The shared server comes from ONCEGRAPH_TEST_REDIS_URL, by default database 15 of
  127.0.0.1:6379 (not 0, where a developer's own data usually lives). Tests on it only
  ever read and write keys under their own random prefix (:func:`prefix`) and delete
  exactly those keys afterwards; no test runs FLUSHDB, FLUSHALL, SCRIPT FLUSH or any
  other database- or server-wide command there.
* A test that needs a server-wide command (a flush, a forgotten script) or a password
  starts its own ``redis-server`` on a free port (:func:`private_redis`), which it owns
  entirely and stops afterwards.

Without a reachable server (or without the ``redis-server`` binary for a private one)
the tests skip, except under CI=true where they fail.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

REDIS_URL = os.environ.get("ONCEGRAPH_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
MAC_KEY = b"a test key, 32 bytes long......."
CI = os.environ.get("CI") == "true"


def _unavailable(reason: str) -> None:
    if CI:
        pytest.fail(f"Redis is required under CI=true: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def redis_url() -> str:
    try:
        client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=10, socket_timeout=10)
        try:
            client.ping()
        finally:
            client.close()
    except (redis.RedisError, OSError) as exc:
        _unavailable(f"Redis unreachable ({exc}); set ONCEGRAPH_TEST_REDIS_URL")
    return REDIS_URL


def delete_prefixed(url: str, prefix: str) -> int:
    """Delete the keys under ``prefix`` (this test's own), nothing else; returns how many."""
    client = redis.Redis.from_url(url, socket_timeout=30)
    try:
        keys = list(client.scan_iter(match=prefix + "*", count=1000))
        return int(client.delete(*keys)) if keys else 0
    finally:
        client.close()


@pytest.fixture
def prefix(redis_url: str) -> Iterator[str]:
    """A key prefix of this test; its keys are deleted afterwards."""
    value = f"og_test:{uuid.uuid4().hex}:"
    yield value
    delete_prefixed(redis_url, value)


def unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@contextlib.contextmanager
def private_redis(workdir: Path, password: str | None = None) -> Iterator[str]:
    """A ``redis-server`` of this test alone (no persistence), stopped afterwards; yields
    its URL (with the password in it when one is set)."""
    binary = shutil.which("redis-server")
    if binary is None:
        _unavailable("no redis-server binary for a private Redis")
        raise AssertionError("unreachable")
    port = unused_port()
    args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    args += ["--dir", str(workdir)]
    if password is not None:
        args += ["--requirepass", password]
    log = (workdir / f"redis-{port}.log").open("wb")
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    auth = f":{password}@" if password is not None else ""
    url = f"redis://{auth}127.0.0.1:{port}/0"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                client = redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=5)
                try:
                    client.ping()
                finally:
                    client.close()
                break
            except (redis.RedisError, OSError):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(
                        f"private redis-server did not start: {log.name}"
                    ) from None
                time.sleep(0.05)  # polling the server's readiness, not waiting out a delay
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)
        log.close()
