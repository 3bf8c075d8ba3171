"""Idempotency keys of requests: the record a store keeps per ``(scope, key)``.

A surface that acts for a client (the HTTP server's ``Idempotency-Key`` header) claims
the client's key before it acts, in ONE atomic insert (:meth:`~oncegraph.storage.
protocols.IdempotencyStore.claim_request`): of two requests with one key, exactly one
creates the record; the other reads it. The record then says what a retry of that
request gets:

* ``status_code is None``: the first request is in flight, or its process died before
  it answered (the surface tells them apart with a liveness lock that dies with its
  holder, as it does for runs). ``run_id`` is the run it was bound to before anything
  started, so a retry after a crash finds that run (or starts it under that id, if the
  crash came first) instead of starting a second one;
* otherwise it finished: ``status_code`` and ``response`` (JSON) are its answer, given
  again to a retry with the same request (``request_hash``); another request under the
  same key is refused.

A record is kept until ``expires_at`` (the first request's time plus the surface's
window); an expired record is replaced by the next claim of its key, and pruned.
``scope`` keeps one client's keys apart from another's (the surface builds it from who
is asking: app, tenant, principal), so a key is never a way to read another caller's
answer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from oncegraph.errors import ConfigError

MAX_KEY = 255
"""The longest key a store keeps (the IETF draft leaves it to the server)."""


def check_key(key: object) -> str:
    """``key`` if it can be an idempotency key: 1 to :data:`MAX_KEY` printable ASCII
    characters (a UUID is the usual choice); else ``ConfigError`` saying so."""
    if (
        not isinstance(key, str)
        or not key
        or len(key) > MAX_KEY
        or not (key.isascii() and key.isprintable())
    ):
        shown = key[:40] + "..." if isinstance(key, str) and len(key) > 40 else key
        raise ConfigError(
            f"an idempotency key must be 1 to {MAX_KEY} printable ASCII characters (a "
            f"random UUID per request is the usual choice); got {shown!r}"
        )
    return key


@dataclass(frozen=True, slots=True)
class IdempotencyRecord:
    """One claimed key (see the module docstring)."""

    scope: str
    key: str
    request_hash: str
    created_at: float
    expires_at: float
    run_id: str | None = None  # the run this request starts, bound before it starts
    status_code: int | None = None  # None: in flight (or its process died)
    response: Mapping[str, Any] | None = None  # JSON: the answer, once finished

    def __post_init__(self) -> None:
        check_key(self.key)
        if not isinstance(self.scope, str) or not self.scope:
            raise ConfigError("an idempotency record needs a scope (who the key belongs to)")
        if self.expires_at < self.created_at:
            raise ConfigError("an idempotency record cannot expire before it was created")

    @property
    def finished(self) -> bool:
        return self.status_code is not None

    def replace(self, **changes: Any) -> IdempotencyRecord:
        return dataclasses.replace(self, **changes)


__all__ = ["MAX_KEY", "IdempotencyRecord", "check_key"]
