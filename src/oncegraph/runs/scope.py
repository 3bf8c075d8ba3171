"""Whose runs a run service may see and touch (guarantee 15). Pure: no store, no event loop.

Every run belongs to an app (``RunRecord.app_id``: the compiled graph's name, stable
across deploys; versions are told apart by the fingerprint) and, optionally, a tenant.
A run service has a :class:`Scope`:

* ``Scope(app_id)``: the app's own service (``app.service``, its workers). It sees every
  run of the app, whatever its tenant, and none of another app.
* ``Scope(app_id, tenant)``: a tenant-bound service (``app.for_tenant(tenant)``, e.g.
  one per API key in an HTTP server). Runs it starts carry ``tenant``; it sees only
  runs of its app AND that tenant (a run started without a tenant is not its).
* no scope (``None``): a read-only operator service over the whole database (the CLI's
  listings), with no graph of its own.

A run outside the scope is refused with :class:`~oncegraph.errors.ForeignRunError`
before anything is read or written; listings filter it out in the store's query.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

from oncegraph.errors import ConfigError, ForeignRunError
from oncegraph.storage.records import CheckpointRecord, RunRecord

if TYPE_CHECKING:
    from oncegraph.storage.protocols import CheckpointStore


@dataclass(frozen=True, slots=True)
class Scope:
    app_id: str
    tenant: str | None = None

    def __post_init__(self) -> None:
        if not _named(self.app_id):
            raise ConfigError(f"app_id must be a non-empty string; got {self.app_id!r}")
        if self.tenant is not None and not _named(self.tenant):
            raise ConfigError(f"tenant must be a non-empty string or None; got {self.tenant!r}")

    def admits(self, run: RunRecord) -> bool:
        """Does ``run`` belong to this scope?"""
        return run.app == self.app_id and (self.tenant is None or run.tenant == self.tenant)

    def check(self, run: RunRecord, what: str = "") -> RunRecord:
        """``run`` if it is in scope, else :class:`ForeignRunError` (``what`` names what
        was asked for: ``"thread 't1'"``, ``"effect e1"``; by default the run)."""
        if self.admits(run):
            return run
        asked = what or f"run {run.run_id}"
        if run.app != self.app_id:
            message = (
                f"{asked} belongs to app {run.app!r}, not to this app {self.app_id!r}; "
                "nothing was read or done. Use that app (a graph compiled with "
                f"name={run.app!r}) to read or continue it; apps that share a database "
                "need distinct names (compile(name=...))."
            )
        else:  # same app, another tenant: do not name the other tenant
            message = (
                f"{asked} does not belong to tenant {self.tenant!r} of app "
                f"{self.app_id!r}; nothing was read or done. Use a service bound to its "
                "own tenant, or the app's unbound service (an operator's)."
            )
        raise ForeignRunError(message, run_id=run.run_id, app_id=self.app_id, owner_app=run.app)


def _named(value: object) -> bool:
    return isinstance(value, str) and bool(value.strip())


def listing_filters(scope: Scope | None, tenant: str | None) -> tuple[str | None, str | None]:
    """The ``(app_id, tenant)`` a listing through ``scope`` is limited to; ``tenant`` is
    the caller's filter (a tenant-bound scope lists its own tenant only)."""
    if scope is None:
        return None, tenant
    if scope.tenant is not None and tenant not in (None, scope.tenant):
        raise ConfigError(
            f"this service is bound to tenant {scope.tenant!r}; it lists only that tenant's runs"
        )
    return scope.app_id, scope.tenant or tenant


class Listed(TypedDict):
    """The store's keywords that limit a listing to a scope (:func:`listed_in`)."""

    app_id: str | None
    tenant: str | None


def listed_in(scope: Scope | None, tenant: str | None) -> Listed:
    """:func:`listing_filters` as the store's listing keywords (``**listed_in(...)``)."""
    app_id, tenant = listing_filters(scope, tenant)
    return {"app_id": app_id, "tenant": tenant}


async def check_checkpoints(
    store: CheckpointStore, scope: Scope | None, checkpoints: Iterable[CheckpointRecord]
) -> None:
    """Refuse checkpoints whose run is outside ``scope``. The run, not the thread,
    decides: a subgraph's thread holds checkpoints of its parent's run."""
    if scope is None:
        return
    seen: set[str] = set()
    for cp in checkpoints:
        if cp.run_id in seen:
            continue
        seen.add(cp.run_id)
        run = await store.get_run(cp.run_id)
        if run is not None:
            scope.check(run, f"thread {cp.thread_id!r}")


__all__ = ["Listed", "Scope", "check_checkpoints", "listed_in", "listing_filters"]
