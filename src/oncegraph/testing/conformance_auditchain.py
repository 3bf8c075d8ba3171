"""Contract tests of :class:`~oncegraph.storage.protocols.AuditChain`, mixed into
:class:`~oncegraph.testing.conformance.CheckpointerConformance` (every bundled store
chains its audit log). Fixture as there: ``checkpointer`` (a set-up store). A store's
audit log may be shared with other tests, so the counts are lower bounds.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid

import pytest

from oncegraph.errors import StorageError
from oncegraph.storage.protocols import AuditChain, Checkpointer
from oncegraph.storage.records import AuditRecord


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def _chain(checkpointer: Checkpointer) -> AuditChain:
    assert isinstance(checkpointer, AuditChain)
    return checkpointer


def _record(i: int) -> AuditRecord:
    return AuditRecord(
        audit_id=new_id("aud"),
        actor="cli:ada",
        action="abandon",
        target_kind="run",
        target_id=f"run_{i}",
        run_id=f"run_{i}",
        thread_id="t-chain",
        reason=f"reason {i}: naïve ✓",
        details={"i": i, "list": [1, 2.5, None], "n": {"nested": True}},
        at=6_000.0 + i,
    )


class AuditChainConformance:
    """Contract tests of the audit chain (see the module docstring)."""

    async def test_chains_its_audit_log(self, checkpointer: Checkpointer) -> None:
        report = await _chain(checkpointer).verify_audit()
        assert report.ok, report.describe()

    async def test_appended_records_verify_in_order(self, checkpointer: Checkpointer) -> None:
        for i in range(5):
            await checkpointer.append_audit(_record(i))
        first = _record(9)
        await checkpointer.append_audit(first)
        with pytest.raises(StorageError):  # a record is never replaced, and the chain holds
            await checkpointer.append_audit(dataclasses.replace(first, reason="rewritten"))
        report = await _chain(checkpointer).verify_audit()
        assert report.ok, report.describe()
        assert report.records >= 6
        assert report.describe().startswith("audit log ok, ")

    async def test_concurrent_appends_make_one_chain(self, checkpointer: Checkpointer) -> None:
        await asyncio.gather(*(checkpointer.append_audit(_record(i)) for i in range(12)))
        report = await _chain(checkpointer).verify_audit()
        assert report.ok, report.describe()
        assert report.records >= 12


__all__ = ["AuditChainConformance"]
