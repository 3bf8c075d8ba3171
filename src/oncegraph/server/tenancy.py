"""The one tenancy check: may a tenant-bound key see a thread (and its runs)?

Until runs carry a ``tenant`` of their own, a tenant's threads are those whose id starts
with ``"<tenant>:"`` (replays and branches fork a thread into ``<thread>~...``, so they
stay with their tenant). A run record with a ``tenant`` attribute set wins over the
prefix. Every route calls :func:`allows`; switch the rule here and nowhere else.
"""

from __future__ import annotations

from typing import Any

from oncegraph.server.auth import Principal

SEPARATOR = ":"


def tenant_of(thread_id: str, run: Any = None) -> str | None:
    """The tenant a thread (or run) belongs to, or ``None`` for no tenant."""
    recorded = getattr(run, "tenant", None) if run is not None else None
    if isinstance(recorded, str) and recorded:
        return recorded
    head, sep, _ = thread_id.partition(SEPARATOR)
    return head if sep and head else None


def allows(principal: Principal, thread_id: str, run: Any = None) -> bool:
    """Whether ``principal`` may see ``thread_id`` (and ``run`` on it)."""
    if principal.tenant is None:
        return True
    return tenant_of(thread_id, run) == principal.tenant


def thread_hint(principal: Principal) -> str:
    """What a tenant's thread ids look like (for error messages)."""
    return f"thread ids of tenant {principal.tenant!r} start with '{principal.tenant}{SEPARATOR}'"


__all__ = ["SEPARATOR", "allows", "tenant_of", "thread_hint"]
