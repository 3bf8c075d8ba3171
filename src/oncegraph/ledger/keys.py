"""The ledger's keys: command ids, effect ids (= idempotency keys) and request hashes.

One place computes each (docs/ledger.md):

* ``command_id``: the agent's intent inside a run: ``<assistant message id>:<tool_call_id>``
  for a tool call (message ids are persisted before tools run, so the pair is stable) or
  ``<node>:<step>:<n>`` for the n-th effect made directly inside a node;
* ``effect_id``: ``sha256(run_id : effect_type : command_id)``, hex: every attempt at one
  external result, and the idempotency key handed to providers;
* ``request_hash``: ``hmac-sha256:`` of the canonical JSON of the request, keyed (guarantee 6:
  the same key must carry the same request).

Ids from providers and models are free text: a ``tool_call_id`` may hold NUL (which
PostgreSQL text cannot keep: every commit of the run would fail) or a lone surrogate
(which no store can encode). :func:`storable_id` gives such an id a form every store
keeps, the same on every store and every time, and distinct from any other id; an id
without those characters is left exactly as it was, so keys of existing runs do not move.

The request hash is keyed because views show it next to masked arguments: an unsalted
digest of ``{"card": "4111..."}`` gives a card number back to anyone who knows its first
six and last four digits. The key is the store's (:func:`oncegraph.storage.keys.hash_key`,
re-exported here as :func:`hash_key`): derived from the per-database secret for SQL stores
(so every process on one database computes the same hash and guarantee 6 holds across
them), a random per-store secret in memory. Records written before keyed hashes carry
``sha256:<hex>``; :func:`same_request` checks those with the
old digest, so runs from before an upgrade resume.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import TYPE_CHECKING, Any

from oncegraph._json import canonical
from oncegraph.ids import CommandId, EffectId
from oncegraph.storage.keys import hash_key

if TYPE_CHECKING:
    from oncegraph.runtime.context import TaskContext


def effect_id_for(run_id: str, effect_type: str, command_id: str) -> EffectId:
    """``sha256(run_id : effect_type : command_id)``, hex; also the provider idempotency key.

    Never raises: text with a lone surrogate is hashed as its surrogate-preserving UTF-8
    (the same bytes as before for every other text)."""
    raw = f"{run_id}:{effect_type}:{command_id}".encode("utf-8", "surrogatepass")
    return EffectId(hashlib.sha256(raw).hexdigest())


def _unstorable(ch: str) -> bool:
    return ch == "\x00" or "\ud800" <= ch <= "\udfff"


def storable_id(value: str) -> str:
    """``value`` if every store can keep it (no NUL, no lone surrogate), else the same id
    with each such character written as an escape (``\\x00``, ``\\udc80``) and
    ``~<12 hex digits of its sha256>`` after it: readable, stable and distinct (two ids
    that differ only in how an escape is spelt do not meet)."""
    if value.isascii() and "\x00" not in value:  # the common case, checked at C speed
        return value
    if not any(_unstorable(ch) for ch in value):
        return value
    shown = "".join(
        (f"\\x{ord(ch):02x}" if ch == "\x00" else f"\\u{ord(ch):04x}") if _unstorable(ch) else ch
        for ch in value
    )
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{shown}~{digest}"


KEYED_PREFIX = "hmac-sha256:"
LEGACY_PREFIX = "sha256:"


def request_hash(value: Any, key: bytes | None = None) -> str:
    """``hmac-sha256:<hex>``: HMAC-SHA256 of the canonical JSON of ``value`` under
    ``key``; without a key (a store that provides none) the old ``sha256:<hex>``."""
    if key is None:
        return LEGACY_PREFIX + hashlib.sha256(canonical(value)).hexdigest()
    return KEYED_PREFIX + hmac.new(key, canonical(value), hashlib.sha256).hexdigest()


def same_request(recorded: str, value: Any, key: bytes | None) -> bool:
    """Does ``recorded`` (a stored request hash) hash ``value``? A hash in the old
    ``sha256:`` form is checked with the old digest (rows written before keyed hashes)."""
    if recorded.startswith(KEYED_PREFIX):
        return key is not None and hmac.compare_digest(recorded, request_hash(value, key))
    if recorded.startswith(LEGACY_PREFIX):
        return hmac.compare_digest(recorded, request_hash(value))
    return False


def tool_command_id(message_id: str, tool_call_id: str) -> CommandId:
    """``<assistant message id>:<tool_call_id>``: stable because message ids are persisted;
    each part as every store keeps it (:func:`storable_id`)."""
    return CommandId(f"{storable_id(message_id)}:{storable_id(tool_call_id)}")


def node_command_id(node: str, step: int, n: int) -> CommandId:
    """``<node>:<step>:<n>`` for effects made directly inside a node, by position."""
    return CommandId(f"{node}:{step}:{n}")


def next_command_id(ctx: TaskContext) -> CommandId:
    """The command id of the next effect the running node makes (by position in it).

    A re-run node makes its effects in the same order, so its n-th effect finds the n-th
    record: keep the order of effects inside a node stable.
    """
    n = ctx.effect_count
    ctx.effect_count += 1
    return node_command_id(ctx.node, ctx.step, n)


__all__ = [
    "KEYED_PREFIX",
    "LEGACY_PREFIX",
    "effect_id_for",
    "hash_key",
    "next_command_id",
    "node_command_id",
    "request_hash",
    "same_request",
    "storable_id",
    "tool_command_id",
]
