"""The server's loader opens a SQLite path without PostgreSQL's driver installed (a wheel
installed with ``[cli,server]`` only), and a PostgreSQL URL without it names the extra."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# psycopg made unimportable, as on a machine without the postgres extra
WITHOUT_PSYCOPG = """
import sys
sys.modules["psycopg"] = None
sys.modules["psycopg_pool"] = None
from oncegraph.server.loading import checkpointer_for
store = checkpointer_for(sys.argv[1])
print(type(store).__name__)
"""


def _load(database: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_PSYCOPG, database],
        capture_output=True, text=True, cwd=cwd, timeout=120,
    )


def test_a_sqlite_database_needs_no_postgres_driver(tmp_path: Path) -> None:
    out = _load(str(tmp_path / "runs.db"), tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "SqliteCheckpointer"


def test_a_postgres_url_without_the_driver_names_the_extra(tmp_path: Path) -> None:
    out = _load("postgresql://postgres@127.0.0.1:5432/test", tmp_path)
    assert out.returncode != 0
    assert 'pip install "oncegraph[postgres]"' in out.stderr
