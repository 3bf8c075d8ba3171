"""The whole storage contract with encryption at rest on: every backend passes the
conformance suite with an ``EncryptionKeys`` ring (the codec sits at the row boundary,
so nothing else may notice it)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import test_postgres

from oncegraph.storage.checkpointer import InMemoryCheckpointer, SqliteCheckpointer
from oncegraph.storage.encryption import EncryptionKeys
from oncegraph.testing.conformance import CheckpointerConformance

KEYS = EncryptionKeys({"old": bytes(32), "new": bytes(range(32))}, current="new")


class TestEncryptedInMemory(CheckpointerConformance):
    @pytest.fixture
    async def checkpointer(self) -> AsyncIterator[InMemoryCheckpointer]:
        store = InMemoryCheckpointer(encryption=KEYS)
        await store.setup()
        yield store
        await store.aclose()


class TestEncryptedSqlite(CheckpointerConformance):
    @pytest.fixture
    async def checkpointer(self, tmp_path: Path) -> AsyncIterator[SqliteCheckpointer]:
        store = SqliteCheckpointer(tmp_path / "conformance.db", encryption=KEYS)
        await store.setup()
        yield store
        await store.aclose()


class TestEncryptedPg(test_postgres.TestPgConformance):
    OPTIONS: dict[str, Any] = {"encryption": KEYS}
