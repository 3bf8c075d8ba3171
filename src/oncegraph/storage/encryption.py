"""Encryption at rest: AES-GCM with a key ring, applied at the row boundary.

With ``encryption=EncryptionKeys({"k1": key}, current="k1")`` a store (memory, SQLite,
PostgreSQL) encrypts what a database dump must not show: checkpoint state and
metadata, log entries (the message log), task writes (interrupt questions and answers,
finished siblings' updates), a run's input, effect requests, results, errors and
attempts, and audit details. Ids, statuses, timestamps, hashes and other columns the
store queries stay in clear. One codec does it (:mod:`oncegraph.storage.sql.rows`), so
every backend and every path shares it; the Redis cache holds the encrypted form too.

A sealed column is text: ``enc1:<key id>:<base64url(nonce || ciphertext || tag)>``,
with a fresh 96-bit nonce per value. JSON never starts with ``enc1:``, so a row written
before encryption was turned on is read as it is (and is written encrypted next time
it is written). Keys rotate by id: new values are sealed with ``current``; any key
still in the ring opens what it sealed. A stored key id missing from the ring is an
:class:`~oncegraph.errors.EncryptionKeyError` naming it; a value that fails to
authenticate (tampered, or another key under the same id) is a corrupt row.

Needs the ``cryptography`` package: ``pip install 'oncegraph[encryption]'``.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping
from typing import Any

from oncegraph.errors import ConfigError, EncryptionKeyError

PREFIX = "enc1:"
INSTALL_HINT = "pip install 'oncegraph[encryption]'"
_NONCE = 12
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

    __slots__ = ("_ciphers", "current", "key_ids")

    def __init__(self, keys: Mapping[str, bytes], *, current: str) -> None:
        if not isinstance(keys, Mapping) or not keys:
            raise ConfigError("EncryptionKeys needs at least one key: {key_id: key_bytes}")
        aesgcm = _aesgcm()
        ciphers = {}
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
        if current not in ciphers:
            raise ConfigError(
                f"current={current!r} is not one of the key ids {sorted(ciphers)}"
            )
        self._ciphers = ciphers
        self.current = current
        self.key_ids = tuple(ciphers)

    @staticmethod
    def new_key() -> bytes:
        """32 random bytes from the OS: an AES-256 key."""
        return os.urandom(32)

    def __repr__(self) -> str:  # never the keys themselves
        return f"EncryptionKeys(key_ids={list(self.key_ids)!r}, current={self.current!r})"

    def seal(self, text: str) -> str:
        """``text`` encrypted with the current key, as ``enc1:<key id>:<base64url>``."""
        nonce = os.urandom(_NONCE)
        sealed = self._ciphers[self.current].encrypt(nonce, text.encode(), None)
        body = base64.urlsafe_b64encode(nonce + sealed).decode("ascii")
        return f"{PREFIX}{self.current}:{body}"

    def open(self, text: str) -> str:
        """The plaintext of a sealed value; a value that is not sealed, as it is."""
        if not text.startswith(PREFIX):
            return text
        key_id, _, body = text[len(PREFIX) :].partition(":")
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise EncryptionKeyError(
                f"a stored value was encrypted with key id {key_id!r}, which is not in this "
                f"store's key ring (key ids: {sorted(self._ciphers)}); add that key to "
                "EncryptionKeys({...}) to read it. Nothing was changed."
            )
        raw = base64.urlsafe_b64decode(body.encode("ascii"))
        try:
            plain: bytes = cipher.decrypt(raw[:_NONCE], raw[_NONCE:], None)
        except Exception as exc:  # InvalidTag: tampered, or another key under this id
            raise ValueError(
                f"the value encrypted with key id {key_id!r} does not authenticate "
                "(tampered, or a different key under the same id)"
            ) from exc
        return plain.decode()


def open_plain(text: str) -> str:
    """What a store without encryption reads: a sealed value is an error naming the fix."""
    if text.startswith(PREFIX):
        key_id = text[len(PREFIX) :].partition(":")[0]
        raise EncryptionKeyError(
            f"a stored value is encrypted (key id {key_id!r}) and this store has no keys: "
            "open it with encryption=EncryptionKeys({...}, current=...)"
        )
    return text


__all__ = ["INSTALL_HINT", "PREFIX", "EncryptionKeys", "open_plain"]
