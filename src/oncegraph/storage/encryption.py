"""Encryption at rest: AES-GCM with a key ring, applied at the row boundary.

With ``encryption=EncryptionKeys({"k1": key}, current="k1")`` a store (memory, SQLite,
PostgreSQL) encrypts what a database dump must not show: checkpoint state and
metadata, log entries (the message log), task writes (interrupt questions and answers,
finished siblings' updates), a run's input and error, effect requests, recipients,
results, provider references, errors and attempts, audit reasons and details, and the
HTTP server's stored answers to idempotent requests. Ids (thread ids included: do not
put personal data in them), statuses, timestamps, hashes, actors and other columns the
store queries stay in clear. One codec does it (:mod:`oncegraph.storage.sql.rows`), so
every backend and every path shares it; the Redis cache holds the encrypted form too.

A sealed column is text: ``enc2:<key id>:<base64url(nonce || ciphertext || tag)>``,
with a fresh 96-bit nonce per value and, as AES-GCM's associated data, the place the
value belongs to (:func:`place`: its table, column and row key). A value copied to
another row, column or table (another tenant's run, say) therefore fails to
authenticate and is a corrupt row, never read as genuine. Values sealed by an older
oncegraph (``enc1:``, no associated data) are still read; ``oncegraph db encrypt``
re-seals them bound to their place. While a store has keys, a value in a sealed column
that is not sealed at all is refused (:class:`PlaintextError`) naming that command,
which seals every clear value of a database written before the keys were configured.
Keys rotate by id: new values are sealed with ``current``; any key still in the ring
opens what it sealed. A stored key id missing from the ring is an
:class:`~oncegraph.errors.EncryptionKeyError` naming it; a value that fails to
authenticate (tampered, moved, or another key under the same id) is a corrupt row.

Needs the ``cryptography`` package: ``pip install 'oncegraph[encryption]'``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from collections.abc import Mapping
from typing import Any

from oncegraph._json import dumps_str
from oncegraph.errors import ConfigError, EncryptionKeyError, PlaintextError

PREFIX = "enc1:"
"""Values sealed without associated data (read, and re-sealed by ``oncegraph db encrypt``)."""
BOUND = "enc2:"
"""Values sealed bound to their place (table, column, row key)."""
ENCRYPT_COMMAND = "oncegraph db encrypt --database PATH_OR_DSN --keys-file FILE"
INSTALL_HINT = "pip install 'oncegraph[encryption]'"
_NONCE = 12
_MAC_PURPOSE = b"oncegraph key:audit-chain"
_KEY_SIZES = (16, 24, 32)


def _aesgcm() -> Any:
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError as exc:
        raise ConfigError(
            f"encryption at rest needs the cryptography package: {INSTALL_HINT}"
        ) from exc
    return AESGCM


class EncryptionKeys:
    """A key ring: ``{key_id: key}`` (16, 24 or 32 raw bytes each, AES-128/192/256) and
    the id of the ``current`` key, which seals new values.

    Generate a key with ``EncryptionKeys.new_key()`` (32 random bytes) and keep it
    outside the database. To rotate, add a new key and make it current; keep the old ones
    while rows sealed with them exist.
    """

    __slots__ = ("_ciphers", "_macs", "current", "key_ids")

    def __init__(self, keys: Mapping[str, bytes], *, current: str) -> None:
        if not isinstance(keys, Mapping) or not keys:
            raise ConfigError("EncryptionKeys needs at least one key: {key_id: key_bytes}")
        aesgcm = _aesgcm()
        ciphers = {}
        macs = {}
        for key_id, key in keys.items():
            if not isinstance(key_id, str) or not key_id or ":" in key_id:
                raise ConfigError(
                    f"key id {key_id!r} must be a non-empty string without ':' (e.g. '2026-11')"
                )
            if not isinstance(key, bytes | bytearray) or len(key) not in _KEY_SIZES:
                size = len(key) if isinstance(key, bytes | bytearray) else type(key).__name__
                raise ConfigError(
                    f"key {key_id!r} must be 16, 24 or 32 raw bytes (got {size}); make one "
                    "with EncryptionKeys.new_key()"
                )
            ciphers[key_id] = aesgcm(bytes(key))
            macs[key_id] = hmac.new(bytes(key), _MAC_PURPOSE, hashlib.sha256).digest()
        if current not in ciphers:
            raise ConfigError(
                f"current={current!r} is not one of the key ids {sorted(ciphers)}"
            )
        self._ciphers = ciphers
        self._macs = macs
        self.current = current
        self.key_ids = tuple(ciphers)

    @staticmethod
    def new_key() -> bytes:
        """32 random bytes from the OS: an AES-256 key."""
        return os.urandom(32)

    def __repr__(self) -> str:  # never the keys themselves
        return f"EncryptionKeys(key_ids={list(self.key_ids)!r}, current={self.current!r})"

    def mac_key(self, key_id: str | None = None) -> bytes:
        """The key that chains the audit log, derived from the key ``key_id`` (default:
        the current one); a key id not in the ring is an EncryptionKeyError."""
        key_id = self.current if key_id is None else key_id
        key = self._macs.get(key_id)
        if key is None:
            raise EncryptionKeyError(self._missing(key_id))
        return key

    def seal(self, text: str, place: str | None = None) -> str:
        """``text`` encrypted with the current key: ``enc2:<key id>:<base64url>`` bound to
        ``place`` (:func:`place`), or ``enc1:...`` with no place (an older format)."""
        nonce = os.urandom(_NONCE)
        aad = None if place is None else place.encode()
        sealed = self._ciphers[self.current].encrypt(nonce, text.encode(), aad)
        body = base64.urlsafe_b64encode(nonce + sealed).decode("ascii")
        return f"{PREFIX if place is None else BOUND}{self.current}:{body}"

    def open(self, text: str, place: str | None = None) -> str:
        """The plaintext of a sealed value. With ``place``, an ``enc2:`` value must have
        been sealed for that place, and a value that is not sealed at all is a
        :class:`PlaintextError`; without it (a caller that has no place), a value that is
        not sealed is returned as it is."""
        bound = text.startswith(BOUND)
        if not bound and not text.startswith(PREFIX):
            if place is None:
                return text
            raise PlaintextError(
                f"{describe(place)} holds a value that is not encrypted, but this store "
                "encrypts at rest: a database written before its keys were configured must "
                f"be sealed first, with {ENCRYPT_COMMAND} (it seals every clear value in "
                "place). Nothing was changed.",
                place=place,
            )
        key_id, _, body = text[len(BOUND) :].partition(":")
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise EncryptionKeyError(self._missing(key_id))
        aad = (place or "").encode() if bound else None
        try:
            raw = base64.urlsafe_b64decode(body.encode("ascii"))
            plain: bytes = cipher.decrypt(raw[:_NONCE], raw[_NONCE:], aad)
        except Exception as exc:  # InvalidTag: tampered, moved, or another key under this id
            where = "" if place is None else f" for {describe(place)}"
            raise ValueError(
                f"the value encrypted with key id {key_id!r} does not authenticate{where} "
                "(tampered, moved from another row or column, or a different key under the "
                "same id)"
            ) from exc
        return plain.decode()

    def _missing(self, key_id: str) -> str:
        return (
            f"a stored value was encrypted with key id {key_id!r}, which is not in this "
            f"store's key ring (key ids: {sorted(self._ciphers)}); add that key to "
            "EncryptionKeys({...}) to read it. Nothing was changed."
        )


def place(table: str, column: str, *key: Any) -> str:
    """The associated data of a sealed value: its table, its column and its row key,
    as ``table:column:<JSON array of the key's columns>`` (unambiguous for any key)."""
    return f"{table}:{column}:{dumps_str(list(key))}"


def describe(where: str) -> str:
    """A :func:`place` in words: ``oncegraph_effects.recipient (row ["e1"])``."""
    table, _, rest = where.partition(":")
    column, _, key = rest.partition(":")
    return f"{table}.{column} (row {key})"


def is_sealed(text: str) -> bool:
    return text.startswith((BOUND, PREFIX))


def open_plain(text: str, place: str | None = None) -> str:
    """What a store without encryption reads: a sealed value is an error naming the fix."""
    if is_sealed(text):
        key_id = text[len(PREFIX) :].partition(":")[0]
        raise EncryptionKeyError(
            f"a stored value is encrypted (key id {key_id!r}) and this store has no keys: "
            "open it with encryption=EncryptionKeys({...}, current=...)"
        )
    return text


__all__ = [
    "BOUND",
    "ENCRYPT_COMMAND",
    "INSTALL_HINT",
    "PREFIX",
    "EncryptionKeys",
    "PlaintextError",
    "describe",
    "is_sealed",
    "open_plain",
    "place",
]
