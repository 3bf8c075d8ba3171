"""Keys for the MACs the run service and its surfaces hand out, one key per purpose.

A key is ``HMAC-SHA256(root, "oncegraph key:" + purpose)`` where ``root`` is the store's
request-hash key (:func:`oncegraph.ledger.keys.hash_key`): for SQL stores it is derived
from the per-database secret, so every process on one database (a restarted server,
another replica, the CLI) derives the same keys with nothing to configure; in memory it
is random per store.

Invariants:

* A key for one purpose says nothing about the key for another, nor about the root.
* Request hashes are HMACs of canonical JSON under the root, and canonical JSON never
  starts with ``oncegraph key:``: no derived key is ever a hash that a view shows.
* Whoever can read the database can read the secret (and so derive the keys); whoever
  sees only what the server shows cannot.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Any

from oncegraph.ledger.keys import hash_key

REDELIVERY = "redelivery-confirmation"
"""The redelivery confirmation (:mod:`oncegraph.runs.confirm`)."""
UI_FORMS = "ui-forms"
"""The web UI's form tokens and flash messages (:mod:`oncegraph.server.forms`)."""

# A store with no request-hash key (a third-party store): a root for this process only;
# what it signs stops verifying when the process ends.
_PROCESS_ROOT = secrets.token_bytes(32)


async def signing_key(store: Any, purpose: str) -> bytes:
    """The key for ``purpose`` on ``store``."""
    root = await hash_key(store)
    return hmac.new(
        root or _PROCESS_ROOT, b"oncegraph key:" + purpose.encode(), hashlib.sha256
    ).digest()


__all__ = ["REDELIVERY", "UI_FORMS", "signing_key"]
