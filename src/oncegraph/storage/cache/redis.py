"""A Redis hot cache of each thread's latest state: the ``Cache`` storage port.

Invariants:

* The cache is never the source of truth. A reader must validate what it gets against
  the database's thread version; the cache only saves a read.
* ``put_state`` writes only a NEWER version than the one stored (law 8). The compare
  and the write happen in one Lua script on the server, so two writers racing can
  never regress an entry; value, version and TTL are set together.
* Redis trouble costs latency, never correctness: errors are logged at warning and
  ``put_state`` returns False, ``get_state`` returns None. After an error the cache
  stays quiet for ``cooldown_seconds`` so a dead or hanging Redis does not add a
  timeout to every step.
* A ``redis.asyncio`` client is bound to the event loop it first ran on, so there is
  one client per running loop, created on first use in that loop
  (:class:`oncegraph._loopbound.LoopBound`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

try:
    import redis.asyncio as aioredis
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff
    from redis.exceptions import RedisError
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError("RedisCache needs the redis client: pip install 'oncegraph[redis]'") from exc

from oncegraph._loopbound import LoopBound

log = logging.getLogger("oncegraph.storage.cache.redis")

# KEYS[1] = hash key; ARGV = version, payload, ttl in milliseconds.
# Writes value + version + TTL together, only if the stored version is older (an
# entry whose version is not a number counts as absent).
_PUT_IF_NEWER = """
local cur = tonumber(redis.call('HGET', KEYS[1], 'v'))
if cur and cur >= tonumber(ARGV[1]) then
  return 0
end
redis.call('HSET', KEYS[1], 'v', ARGV[1], 'p', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
"""

_ERRORS = (RedisError, OSError, asyncio.TimeoutError)


@dataclass(frozen=True, slots=True)
class _Conn:
    """One loop's client and its registered put-if-newer script."""

    client: Any
    script: Any


async def _close_conn(conn: _Conn) -> None:
    await conn.client.aclose()


class RedisCache:
    """``Cache`` over Redis: ``<prefix>state:<thread_id>`` is a hash ``{v: version, p: payload}``.

    ``url`` is a redis URL (``redis://host:6379/0``). ``socket_timeout`` bounds every
    call; ``cooldown_seconds`` is how long the cache is skipped after an error. Each
    loop's client holds up to ``max_connections``; a call waits up to ``pool_timeout``
    for a free one.
    """

    def __init__(
        self,
        url: str,
        *,
        ttl_seconds: float = 3600,
        prefix: str = "oncegraph:",
        socket_timeout: float = 0.5,
        cooldown_seconds: float = 1.0,
        max_connections: int = 50,
        pool_timeout: float = 2.0,
    ) -> None:
        if ttl_seconds <= 0:
            raise ValueError("ttl_seconds must be positive")
        self.url = url
        self.ttl_seconds = ttl_seconds
        self.prefix = prefix
        self.socket_timeout = socket_timeout
        self.cooldown_seconds = cooldown_seconds
        self.max_connections = max_connections
        self.pool_timeout = pool_timeout
        self._conns: LoopBound[_Conn] = LoopBound()
        self._quiet_until = 0.0

    def key(self, thread_id: str) -> str:
        return f"{self.prefix}state:{thread_id}"

    # -- the Cache port ------------------------------------------------------------------

    async def get_state(self, thread_id: str) -> tuple[int, bytes] | None:
        """``(version, payload)`` of the thread, or None when absent or Redis fails."""
        if self._cooling():
            return None
        try:
            version, payload = await self._client().hmget(self.key(thread_id), ["v", "p"])
        except _ERRORS as exc:
            self._failed("get_state", exc)
            return None
        if version is None or payload is None:
            return None
        try:
            return int(version), bytes(payload)
        except ValueError:
            log.warning("redis cache entry for thread %r has a bad version; ignored", thread_id)
            return None

    async def put_state(self, thread_id: str, version: int, payload: bytes) -> bool:
        """Store ``payload`` unless the cache holds ``version`` or newer; True if written."""
        if self._cooling():
            return False
        ttl_ms = max(1, int(self.ttl_seconds * 1000))
        try:
            script = self._script()
            written = await script(keys=[self.key(thread_id)], args=[version, payload, ttl_ms])
        except _ERRORS as exc:
            self._failed("put_state", exc)
            return False
        return bool(written)

    # -- lifecycle -----------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close every client this cache opened; those of other live loops are closed there."""
        await self._conns.aclose_all(_close_conn, suppress=_ERRORS)

    # -- internals -----------------------------------------------------------------------

    def _client(self) -> Any:
        return self._conns.get(self._connect).client

    def _script(self) -> Any:
        return self._conns.get(self._connect).script

    def _connect(self) -> _Conn:
        """This loop's client (no I/O until its first command)."""
        # A blocking pool: a burst of commits waits for a connection instead of
        # failing with "too many connections".
        pool = aioredis.BlockingConnectionPool.from_url(
            self.url,
            max_connections=self.max_connections,
            timeout=self.pool_timeout,
            socket_timeout=self.socket_timeout,
            socket_connect_timeout=self.socket_timeout,
            retry=Retry(NoBackoff(), 0),
        )
        client = aioredis.Redis.from_pool(pool)
        # register_script runs EVALSHA and falls back to EVAL when the server forgot
        # the script (restart, SCRIPT FLUSH).
        return _Conn(client, client.register_script(_PUT_IF_NEWER))

    def _cooling(self) -> bool:
        return time.monotonic() < self._quiet_until

    def _failed(self, op: str, exc: BaseException) -> None:
        self._quiet_until = time.monotonic() + self.cooldown_seconds
        log.warning(
            "redis cache %s failed (%s: %s); continuing without the cache for %.1fs",
            op,
            type(exc).__name__,
            exc,
            self.cooldown_seconds,
        )


__all__ = ["RedisCache"]
