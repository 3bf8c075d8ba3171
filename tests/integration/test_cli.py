"""The oncegraph command: the demo (the README's main job) and the schema commands."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from oncegraph.cli.commands import app

runner = CliRunner()


@pytest.mark.slow
def test_demo_crashes_resumes_and_refunds_once(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    out = subprocess.run(
        [sys.executable, "-m", "oncegraph.cli", "demo", "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=600,  # a hang detector: the demo starts two processes and a provider
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "killed by SIGKILL" in out.stdout
    assert "refunds performed at the provider: 1" in out.stdout
    assert "exactly once." in out.stdout


def test_db_verify_says_what_to_do_and_migrate_fixes_it(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    sqlite3.connect(db).close()
    result = runner.invoke(app, ["db", "verify", "--sqlite", str(db)])
    assert result.exit_code == 1
    assert "oncegraph db migrate" in result.output
    assert runner.invoke(app, ["db", "migrate", "--sqlite", str(db)]).exit_code == 0
    result = runner.invoke(app, ["db", "verify", "--sqlite", str(db)])
    assert result.exit_code == 0
    assert "up to date" in result.output


def test_db_commands_need_exactly_one_store() -> None:
    result = runner.invoke(app, ["db", "verify"])
    assert result.exit_code != 0
    assert "--sqlite" in result.output
