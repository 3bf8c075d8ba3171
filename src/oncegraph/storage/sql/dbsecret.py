"""The per-database secret, and the keys derived from it.

One random secret lives in each database (table ``oncegraph_secrets``, migration 2).
Keys for keyed digests are derived from it, one per purpose, so every process that
opens the database computes the same keys with no configuration to distribute.

Invariants:

* The secret is created on first need by whichever process asks first: an
  ``INSERT ... ON CONFLICT DO NOTHING`` of a fresh random value, then a read of what
  the table holds. Racing processes therefore agree on one value, and it never changes
  afterwards (nothing updates or deletes it).
* Keys are ``HMAC-SHA256(secret, "oncegraph key:" + purpose)``: a key for one purpose
  (the request hashes, the audit chain) says nothing about the key for another.
* What it protects against: a party who sees an operator view (a request hash next to masked
  arguments) but cannot read the database. Whoever can read the database can read the
  secret (and, without encryption at rest, the arguments themselves).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets as _random
from typing import Any

from oncegraph.errors import StorageError

SECRET_NAME = "database"
REQUEST_HASH_PURPOSE = "request-hash"
"""Purpose of the key of the ledger's request hashes (:mod:`oncegraph.ledger.keys`)."""

SECRET_INSERT = (
    "INSERT INTO oncegraph_secrets (name, value, created_at) VALUES (?, ?, ?) "
    "ON CONFLICT (name) DO NOTHING"
)
SECRET_SELECT = "SELECT value FROM oncegraph_secrets WHERE name = ?"

_SECRET_BYTES = 32


def new_secret() -> str:
    """A fresh secret, as stored: 32 random bytes from the OS, in hex."""
    return _random.token_hex(_SECRET_BYTES)


def secret_from_row(row: Any, where: str = "the database") -> bytes:
    """The secret from a :data:`SECRET_SELECT` row; a missing or malformed one is an error."""
    value = None if row is None else row[0]
    try:
        secret = bytes.fromhex(value) if isinstance(value, str) else b""
    except ValueError:
        secret = b""
    if len(secret) != _SECRET_BYTES:
        raise StorageError(
            f"{where}: the row {SECRET_NAME!r} of oncegraph_secrets is missing or malformed "
            f"(expected {_SECRET_BYTES * 2} hex digits). It is written once and never "
            "changed; restore it from a backup, or delete the row to start a new secret "
            "(keyed digests made with the old one then no longer verify)."
        )
    return secret


def derive_key(secret: bytes, purpose: str) -> bytes:
    """The key for ``purpose``: HMAC-SHA256 of the purpose under the database secret."""
    return hmac.new(secret, b"oncegraph key:" + purpose.encode(), hashlib.sha256).digest()


__all__ = [
    "REQUEST_HASH_PURPOSE",
    "SECRET_INSERT",
    "SECRET_NAME",
    "SECRET_SELECT",
    "derive_key",
    "new_secret",
    "secret_from_row",
]
