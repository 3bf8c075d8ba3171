"""The redelivery confirmation: proof that this actor saw this preview of this effect.

A redelivery sends an effect again, so the send must follow a preview that a person
looked at. The preview hands out a token; only a token the preview handed out confirms
the send. Every surface (the app, the CLI, the HTTP API and the web UI) goes through
:meth:`~oncegraph.runs.commands.Commands.redeliver`, so they all mint and check it here.

Format: ``rc1.<payload>.<mac>``, both parts base64url without padding. The payload is
the canonical JSON of what the token vouches for: the effect id, its ``row_version`` at
the preview, the actor it was issued to, the key choice (same key or new key) and when it
expires. The MAC is HMAC-SHA256 of ``rc1.<payload>`` under :func:`key_for` (a key of
:mod:`oncegraph.runs.signing`).

Invariants:

* **Unforgeable without the store's secret.** The key is derived from the
  per-database secret (SQL stores) or a random per-store secret (memory): whoever can
  read what a viewer sees (the effect id, the row version, the actor's name) still
  cannot compute a token. Every process on one database derives the same key, so a
  server restart or another replica accepts an open preview.
* **One send per preview.** The token names the row version it saw; a send changes the
  row version, so the same token is stale afterwards (and two concurrent sends with one
  token meet the effect's compare-and-set: one of them writes nothing).
* **Bound to its actor and its options**, and valid for :data:`TTL` seconds.

A refusal says which of these failed and that nothing was sent.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import math
import time
from dataclasses import dataclass
from typing import Any

import orjson

from oncegraph.errors import RunStateError
from oncegraph.runs.signing import REDELIVERY, signing_key

TTL = 600.0
"""Seconds a preview's token stays valid: long enough to check at the recipient."""

_PREFIX = "rc1"


def clock() -> float:
    """Now, in seconds since the epoch: when a token is minted and checked."""
    return time.time()


@dataclass(frozen=True, slots=True)
class Claim:
    """What a confirmation vouches for."""

    effect_id: str
    row_version: int
    actor: str
    new_key: bool


async def key_for(store: Any) -> bytes:
    """The MAC key of confirmations for ``store``."""
    return await signing_key(store, REDELIVERY)


def mint(key: bytes, claim: Claim, *, at: float, ttl: float = TTL) -> tuple[str, float]:
    """A token for ``claim``, and when it expires (seconds since the epoch)."""
    expires = math.floor(at + ttl)
    payload = _b64(
        orjson.dumps(
            {
                "e": claim.effect_id,
                "v": claim.row_version,
                "a": claim.actor,
                "n": claim.new_key,
                "x": expires,
            },
            option=orjson.OPT_SORT_KEYS,
        )
    )
    return f"{_PREFIX}.{payload}.{_mac(key, payload)}", float(expires)


def check(key: bytes, token: str, claim: Claim, *, at: float) -> float:
    """When ``token`` expires; refused (``RunStateError``, nothing sent) unless it was
    minted for ``claim`` and has not expired at ``at``."""
    fields = _verified(key, token)
    refused = _refusal(fields, claim, at)
    if refused is not None:
        raise RunStateError(
            f"{refused} Nothing was sent; open the preview again and confirm from it."
        )
    assert fields is not None
    return float(fields["x"])


def _refusal(fields: dict[str, Any] | None, claim: Claim, at: float) -> str | None:
    """Why the token's ``fields`` (None: not a token of ours) do not confirm ``claim`` at
    ``at``; None when they do."""
    effect = claim.effect_id
    if fields is None:
        return (
            f"the confirmation of the redelivery of effect {effect} is not one that a "
            "preview of this server handed out."
        )
    if fields.get("e") != effect:
        return f"the confirmation is for another effect, not {effect}."
    if fields.get("a") != claim.actor:
        return (
            f"the confirmation of effect {effect} was handed out to another actor; "
            f"{claim.actor} needs a preview of their own."
        )
    if fields.get("n") is not claim.new_key:
        wanted = "a new key" if claim.new_key else "the same key"
        return f"the confirmation of effect {effect} was for the other key choice, not {wanted}."
    expires = fields.get("x")
    if not isinstance(expires, int) or at > expires:
        return (
            f"the confirmation of effect {effect} has expired (a preview is valid for "
            f"{TTL / 60:g} minutes)."
        )
    if fields.get("v") != claim.row_version:
        return (
            f"effect {effect} changed since the preview (it was sent, resolved or checked "
            "since), so the confirmation no longer matches it."
        )
    return None


def _verified(key: bytes, token: str) -> dict[str, Any] | None:
    """The token's fields if its MAC is ours, else ``None``."""
    if not isinstance(token, str) or not token.isascii():
        return None
    prefix, _, rest = token.partition(".")
    payload, _, mac = rest.partition(".")
    if prefix != _PREFIX or not payload or not hmac.compare_digest(mac, _mac(key, payload)):
        return None
    try:
        fields = orjson.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (binascii.Error, ValueError):
        return None
    return fields if isinstance(fields, dict) else None


def _mac(key: bytes, payload: str) -> str:
    return _b64(hmac.new(key, f"{_PREFIX}.{payload}".encode(), hashlib.sha256).digest())


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


__all__ = ["TTL", "Claim", "check", "clock", "key_for", "mint"]
