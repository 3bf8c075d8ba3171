"""The pytest-native contract suite every :class:`Checkpointer` backend must pass.

A backend's test module subclasses :class:`CheckpointerConformance` and provides a
``checkpointer`` fixture yielding a set-up store (closing it afterwards)::

    class TestSqlite(CheckpointerConformance):
        @pytest.fixture
        async def checkpointer(self, tmp_path):
            store = SqliteCheckpointer(tmp_path / "db.sqlite")
            await store.setup()
            yield store
            await store.aclose()

        @pytest.fixture
        async def reopen(self, tmp_path):  # optional: enables the durability test
            ...yield an async function returning a NEW set-up store on the same database

Every test uses fresh, random thread and run ids and filters its listings by them, so
the suite may run against a shared database (PostgreSQL) and in parallel. Records use
fixed timestamps where an ordering is asserted, so no test depends on the clock.
"""

from __future__ import annotations

import pytest

from oncegraph.testing import conformance_kit
from oncegraph.testing.conformance_audit import AuditConformance
from oncegraph.testing.conformance_auditchain import AuditChainConformance
from oncegraph.testing.conformance_commits import CommitConformance
from oncegraph.testing.conformance_effects import EffectConformance
from oncegraph.testing.conformance_kit import *  # noqa: F403  (re-exported: see __all__)
from oncegraph.testing.conformance_kit import Reopen
from oncegraph.testing.conformance_order import ThreadOrderConformance
from oncegraph.testing.conformance_prune import PruneConformance
from oncegraph.testing.conformance_requests import IdempotencyConformance
from oncegraph.testing.conformance_runs import RunConformance
from oncegraph.testing.conformance_values import ValueConformance


class CheckpointerConformance(
    CommitConformance,
    RunConformance,
    EffectConformance,
    AuditConformance,
    ValueConformance,
    PruneConformance,
    IdempotencyConformance,
    AuditChainConformance,
    ThreadOrderConformance,
):
    """Contract tests for :class:`~oncegraph.storage.protocols.Checkpointer` backends.

    One class to subclass, its tests written by subject in mixins: commits and their
    compare-and-swap (:mod:`.conformance_commits`), runs (:mod:`.conformance_runs`), the
    effect ledger (:mod:`.conformance_effects`), the audit log (:mod:`.conformance_audit`,
    :mod:`.conformance_auditchain`), stored values (:mod:`.conformance_values`), retention
    (:mod:`.conformance_prune`), idempotency keys (:mod:`.conformance_requests`) and a
    thread's run order (:mod:`.conformance_order`); the store's lifecycle is tested with
    the commits. The ``reopen`` fixture is here."""

    @pytest.fixture
    def reopen(self) -> Reopen | None:
        """Override with a factory of NEW set-up stores on the same database to enable
        the durability test; ``None`` (the default) skips it."""
        return None


# The suite, and the kit's records and helpers a backend's tests build on.
__all__ = ["CheckpointerConformance"]
__all__ += conformance_kit.__all__
