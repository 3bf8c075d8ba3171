"""A store's request-hash key, for whoever hashes requests against that store.

Request hashes are keyed (:mod:`oncegraph.ledger.keys` says why). The key is a store
capability: ``await store.request_hash_key()``, derived from the per-database secret for
SQL stores and a random per-store secret in memory. The ledger hashes with it before a
call, and the run loop with it when it plans the next step's intents, so both read it
here.
"""

from __future__ import annotations

import logging
from typing import Any

# The warning belongs with the ledger's other messages: same logger name as before.
log = logging.getLogger("oncegraph.ledger")

_warned: set[str] = set()


async def hash_key(store: Any) -> bytes | None:
    """The store's request-hash key (``await store.request_hash_key()``); None, with a
    warning once per store type, for a store that has none (its hashes stay unkeyed)."""
    source = getattr(store, "request_hash_key", None)
    if source is None:
        name = type(store).__name__
        if name not in _warned:
            _warned.add(name)
            log.warning(
                "%s has no request_hash_key(): its request hashes are unkeyed sha256, which "
                "can give masked arguments back; implement request_hash_key()",
                name,
            )
        return None
    key = await source()
    return bytes(key)


__all__ = ["hash_key"]
