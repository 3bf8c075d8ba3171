"""A Redis hot cache of each thread's latest state: the ``Cache`` storage port.

Invariants:

* The cache is never the source of truth, and never believed on its word. Every entry
  carries a MAC (:class:`~oncegraph.storage.cache.mac.EntryMac`) under a key Redis
  never sees; an entry whose MAC does not verify (forged, tampered with, moved from
  another thread, or written under another database's key) is logged and ignored,
  never served. A cache without a key serves nothing. A reader must still validate
  what it gets against the database's thread version: the cache only saves a read.
* ``put_state`` writes only a NEWER version than the one stored (guarantee 8). The compare
  and the write happen in one Lua script on the server, so two writers racing can
  never regress an entry; value, version, MAC and TTL are set together.
* A version claim is only honoured if it is signed: when the script refuses a write
  because the stored version is newer, the writer checks the stored entry's MAC, and
  replaces an unsigned or forged entry with a second compare-and-set that names the
  distrusted tag (so an authentic entry written in between is never overwritten). A
  forged huge version therefore cannot block real writes.
* Every key expires: a write sets the TTL, and a refused write gives a key without
  one (written behind the cache's back) the TTL too.
* Redis trouble costs latency, never correctness: errors are logged at warning and
  ``put_state`` returns False, ``get_state`` returns None. After an error the cache
  stays quiet for ``cooldown_seconds`` so a dead or hanging Redis does not add a
  timeout to every step.
* The URL's password is kept private: ``url`` and ``repr`` show it as ``***``.
* A ``redis.asyncio`` client is bound to the event loop it first ran on, so there is
  one client per running loop, created on first use in that loop
  (:class:`oncegraph._loopbound.LoopBound`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

try:
    import redis.asyncio as aioredis
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff
    from redis.exceptions import RedisError, ResponseError
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError("RedisCache needs the redis client: pip install 'oncegraph[redis]'") from exc

from oncegraph._loopbound import LoopBound
from oncegraph.storage.cache.mac import EntryMac

log = logging.getLogger("oncegraph.storage.cache.redis")

KeySource = Callable[[], Awaitable[bytes]]
"""An async callable returning the MAC key (the PostgreSQL store reads its database's)."""

# KEYS[1] = hash key; ARGV = version, payload, digest, tag, ttl in milliseconds, and
# the distrusted tag ("" for none, else "m" .. the tag, "m" alone for a missing one).
# Writes {v, p, d, m} + TTL together, only if the stored version is older or the stored
# entry is the distrusted one (an entry whose version is not a number counts as absent,
# a key of another type is removed). A refused write returns the stored claim
# {0, v, d, m} for the caller to verify, and gives the key a TTL if it has none.
_PUT_IF_NEWER = """
local key = KEYS[1]
local kind = redis.call('TYPE', key)['ok']
if kind ~= 'hash' and kind ~= 'none' then
  redis.call('DEL', key)
end
local cur = redis.call('HMGET', key, 'v', 'd', 'm')
local v = tonumber(cur[1])
local distrusted = ARGV[6] ~= '' and ('m' .. (cur[3] or '')) == ARGV[6]
if v and v >= tonumber(ARGV[1]) and not distrusted then
  if redis.call('PTTL', key) == -1 then
    redis.call('PEXPIRE', key, ARGV[5])
  end
  return {0, cur[1], cur[2] or '', cur[3] or ''}
end
redis.call('DEL', key)
redis.call('HSET', key, 'v', ARGV[1], 'p', ARGV[2], 'd', ARGV[3], 'm', ARGV[4])
redis.call('PEXPIRE', key, ARGV[5])
return {1}
"""

_ERRORS = (RedisError, OSError, asyncio.TimeoutError)
# A writer replaces at most this many forged entries per put; past that (someone is
# rewriting the key as fast as we replace it) the put gives up: a miss, never a lie.
_MAX_REPLACEMENTS = 2


def redact_url(url: str) -> str:
    """``url`` with its password (userinfo or ``?password=``) shown as ``***``."""
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if parts.password is not None:
            userinfo, _, hostport = netloc.rpartition("@")
            user = userinfo.split(":", 1)[0]
            netloc = f"{user}:***@{hostport}"
        query = parts.query
        if query:
            pairs = parse_qsl(query, keep_blank_values=True)
            if any(k.lower() == "password" for k, _ in pairs):
                query = urlencode(
                    [(k, "***" if k.lower() == "password" else v) for k, v in pairs], safe="*"
                )
        return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    except ValueError:
        return "<unparsable redis URL>"


@dataclass(frozen=True, slots=True)
class _Conn:
    """One loop's client and its registered put-if-newer script."""

    client: Any
    script: Any


async def _close_conn(conn: _Conn) -> None:
    await conn.client.aclose()


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class RedisCache:
    """``Cache`` over Redis: ``<prefix>state:<thread_id>`` is a hash ``{v, p, d, m}``
    (version, payload, payload digest, MAC).

    ``url`` is a redis URL (``redis://host:6379/0``). ``mac_key`` signs and checks the
    entries: bytes (at least 16, the same in every process sharing the cache) or an
    async callable returning them; left out, the store the cache is given to provides
    one (:class:`~oncegraph.storage.sql.postgres.PgCheckpointer` derives it from its
    database's secret) through :meth:`provide_key`, and until then the cache serves
    nothing. ``socket_timeout`` bounds every call; ``cooldown_seconds`` is how long the
    cache is skipped after an error. Each loop's client holds up to ``max_connections``;
    a call waits up to ``pool_timeout`` for a free one.
    """

    def __init__(
        self,
        url: str,
        *,
        mac_key: bytes | KeySource | None = None,
        ttl_seconds: float = 3600,
        prefix: str = "oncegraph:",
        socket_timeout: float = 0.5,
        cooldown_seconds: float = 1.0,
        max_connections: int = 50,
        pool_timeout: float = 2.0,
    ) -> None:
        if ttl_seconds <= 0:
            raise ValueError("ttl_seconds must be positive")
        self._url = url
        self.ttl_seconds = ttl_seconds
        self.prefix = prefix
        self.socket_timeout = socket_timeout
        self.cooldown_seconds = cooldown_seconds
        self.max_connections = max_connections
        self.pool_timeout = pool_timeout
        self._conns: LoopBound[_Conn] = LoopBound()
        self._quiet_until = 0.0
        self._mac: EntryMac | None = None
        self._key_source: KeySource | None = None
        self._warned_keyless = False
        if isinstance(mac_key, bytes | bytearray):
            self._mac = EntryMac(bytes(mac_key))
        elif mac_key is not None:
            self._key_source = mac_key

    @property
    def url(self) -> str:
        """The Redis URL with its password shown as ``***``."""
        return redact_url(self._url)

    def __repr__(self) -> str:
        return f"RedisCache({self.url!r}, prefix={self.prefix!r})"

    def key(self, thread_id: str) -> str:
        return f"{self.prefix}state:{thread_id}"

    def provide_key(self, source: bytes | KeySource) -> None:
        """Give the cache its MAC key unless it already has one (the first key wins)."""
        if self._mac is not None or self._key_source is not None:
            return
        if isinstance(source, bytes | bytearray):
            self._mac = EntryMac(bytes(source))
        else:
            self._key_source = source

    @property
    def verifies_entries(self) -> bool:
        """True: every entry this cache serves has passed its MAC check."""
        return True

    # -- the Cache port ------------------------------------------------------------------

    async def get_state(self, thread_id: str) -> tuple[int, bytes] | None:
        """``(version, payload)`` of the thread, or None when absent, unverifiable, or
        Redis fails."""
        if self._cooling():
            return None
        mac = await self._entry_mac()
        if mac is None:
            return None
        try:
            found = await self._client().hmget(self.key(thread_id), ["v", "p", "d", "m"])
        except ResponseError as exc:  # e.g. WRONGTYPE: a key someone else wrote
            log.warning(
                "redis cache entry for thread %r is unreadable (%s); ignored", thread_id, exc
            )
            return None
        except _ERRORS as exc:
            self._failed("get_state", exc)
            return None
        version, payload, digest, tag = found
        if version is None and payload is None:
            return None
        try:
            number = int(version)
        except (TypeError, ValueError):
            number = None
        if (
            number is None
            or payload is None
            or digest is None
            or tag is None
            or not mac.entry_ok(thread_id, number, bytes(payload), digest, tag)
        ):
            log.warning(
                "redis cache entry for thread %r (version %r) fails its MAC check and is "
                "ignored: it was forged or altered, or written under another database's key "
                "(is the Redis prefix shared?)",
                thread_id,
                _text(version)[:40] if version is not None else "missing",
            )
            return None
        return number, bytes(payload)

    async def put_state(self, thread_id: str, version: int, payload: bytes) -> bool:
        """Store ``payload`` unless the cache holds an authentic ``version`` or newer;
        True if written."""
        if self._cooling():
            return False
        mac = await self._entry_mac()
        if mac is None:
            return False
        version = int(version)
        digest = mac.digest(payload)
        tag = mac.tag(thread_id, version, digest)
        ttl_ms = max(1, int(self.ttl_seconds * 1000))
        key = self.key(thread_id)
        distrusted = b""
        try:
            script = self._script()
            for _ in range(_MAX_REPLACEMENTS + 1):
                found = await script(
                    keys=[key], args=[version, payload, digest, tag, ttl_ms, distrusted]
                )
                if int(found[0]) == 1:
                    return True
                stored_version, stored_digest, stored_tag = found[1], found[2], found[3]
                if _signed_claim(mac, thread_id, stored_version, stored_digest, stored_tag):
                    return False  # a real newer (or equal) version: nothing to do
                log.warning(
                    "redis cache entry for thread %r claims version %r without a valid MAC "
                    "(forged, or written under another database's key); replacing it",
                    thread_id,
                    _text(stored_version)[:40],
                )
                distrusted = b"m" + bytes(stored_tag)
        except _ERRORS as exc:
            self._failed("put_state", exc)
            return False
        log.warning(
            "redis cache entry for thread %r was rewritten with forged versions %d times in "
            "a row; not cached this time",
            thread_id,
            _MAX_REPLACEMENTS + 1,
        )
        return False

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
            self._url,
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

    async def _entry_mac(self) -> EntryMac | None:
        """The MAC, resolving the key source once; None (serve nothing) without a key."""
        if self._mac is not None:
            return self._mac
        source = self._key_source
        if source is None:
            if not self._warned_keyless:
                self._warned_keyless = True
                log.warning(
                    "RedisCache %s has no MAC key, so it serves nothing: pass mac_key=... or "
                    "give it to a PgCheckpointer (cache=...), which provides its database's",
                    self.url,
                )
            return None
        try:
            self._mac = EntryMac(await source())
        except Exception as exc:  # the key comes from a database: a failure is a miss
            self._failed("key lookup", exc)
            return None
        return self._mac

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


def _signed_claim(mac: EntryMac, thread_id: str, version: Any, digest: Any, tag: Any) -> bool:
    """Whether a stored ``(version, digest, tag)`` is a version claim made with our key."""
    try:
        number = int(version)
    except (TypeError, ValueError):
        return False
    return bool(tag) and mac.claim_ok(thread_id, number, digest or b"", tag)


__all__ = ["KeySource", "RedisCache", "redact_url"]
