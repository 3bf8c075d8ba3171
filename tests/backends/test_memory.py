"""The in-memory checkpointer passes the conformance suite."""

from __future__ import annotations

import subprocess
import sys
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


# -- the public import point ------------------------------------------------------------


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, timeout=300
    )


def test_importing_checkpointers_never_imports_psycopg() -> None:
    done = _python(
        "import sys\n"
        "from oncegraph.storage.checkpointer import InMemoryCheckpointer, SqliteCheckpointer\n"
        "print('psycopg' in sys.modules, 'psycopg_pool' in sys.modules)\n"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"]


def test_pg_checkpointer_without_psycopg_gives_install_hint() -> None:
    done = _python(
        "import sys\n"
        "sys.modules['psycopg'] = None  # as if it were not installed\n"
        "import oncegraph.storage.checkpointer as m\n"
        "try:\n"
        "    m.PgCheckpointer\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
        "else:\n"
        "    raise SystemExit('no ImportError')\n"
    )
    assert done.returncode == 0, done.stderr
    assert 'pip install "oncegraph[postgres]"' in done.stdout


def test_pg_checkpointer_resolves_lazily() -> None:
    pytest.importorskip("psycopg")
    from oncegraph.storage import checkpointer
    from oncegraph.storage.sql.postgres import PgCheckpointer

    assert checkpointer.PgCheckpointer is PgCheckpointer
    with pytest.raises(AttributeError):
        _ = checkpointer.NoSuchCheckpointer
