"""Message authentication of cache entries: a cache that anyone can write is never believed.

A Redis server is often shared, reachable by more parties than the database, and
without authentication. An entry is therefore only believed if it carries a MAC made
with a key the reader holds (the PostgreSQL store derives it from its per-database
secret, :mod:`oncegraph.storage.sql.dbsecret`).

Invariants:

* The tag is ``HMAC-SHA256(key, "oncegraph-cache/1" | thread_id | version | digest)``
  with ``digest = sha256(payload)`` and every field length-prefixed, so no two
  different (thread, version, payload) triples share a tag: an entry cannot be moved
  to another thread, given another version or another payload.
* The tag covers the digest rather than the payload, so a writer can check a stored
  entry's version claim (is this newer version real?) from ``(version, digest, tag)``
  alone without fetching the payload; a reader also checks the digest against the
  payload.
* Tags are compared in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field

_DOMAIN = b"oncegraph-cache/1"


def _field(value: bytes) -> bytes:
    return b"%d:" % len(value) + value


def _raw(value: str | bytes) -> bytes:
    return value if isinstance(value, bytes) else value.encode("utf-8", "surrogatepass")


@dataclass(frozen=True, slots=True)
class EntryMac:
    """Signs and checks cache entries with ``key`` (never shown in a repr)."""

    key: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if len(self.key) < 16:
            raise ValueError("a cache MAC key needs at least 16 bytes")

    @staticmethod
    def digest(payload: bytes) -> str:
        """The sha256 of a payload, hex: what the tag covers in the payload's place."""
        return hashlib.sha256(payload).hexdigest()

    def tag(self, thread_id: str, version: int, digest: str) -> str:
        """The entry's tag, hex."""
        message = b"".join(
            (
                _DOMAIN,
                _field(thread_id.encode("utf-8", "surrogatepass")),
                _field(str(int(version)).encode()),
                _field(digest.encode()),
            )
        )
        return hmac.new(self.key, message, hashlib.sha256).hexdigest()

    def claim_ok(self, thread_id: str, version: int, digest: str | bytes, tag: str | bytes) -> bool:
        """Whether ``(version, digest)`` was signed for ``thread_id`` with this key."""
        try:
            expected = self.tag(thread_id, version, _raw(digest).decode("ascii"))
        except UnicodeDecodeError:
            return False
        return hmac.compare_digest(expected.encode(), _raw(tag))

    def entry_ok(
        self, thread_id: str, version: int, payload: bytes, digest: str | bytes, tag: str | bytes
    ) -> bool:
        """Whether the whole entry is authentic: the digest fits the payload and is signed."""
        return hmac.compare_digest(self.digest(payload).encode(), _raw(digest)) and self.claim_ok(
            thread_id, version, digest, tag
        )


__all__ = ["EntryMac"]
