"""The in-memory checkpointer passes the conformance suite."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from oncegraph.storage.checkpointer import InMemoryCheckpointer
from oncegraph.testing.conformance import CheckpointerConformance


class TestInMemory(CheckpointerConformance):
    @pytest.fixture
    async def checkpointer(self) -> AsyncIterator[InMemoryCheckpointer]:
        store = InMemoryCheckpointer()
        await store.setup()
        yield store
        await store.aclose()
