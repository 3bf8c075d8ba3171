"""Programs from LangGraph's docs, changed only in their imports (and with plain
functions for models), run as they are. Each ends with oncegraph's own checks.

Every program in ``programs/`` runs in a fresh module namespace (``runpy``) with its
stdout captured; a program passes when it runs to the end (its ``assert`` lines hold).
"""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

PROGRAMS = sorted((Path(__file__).parent / "programs").glob("p*.py"))


def test_the_programs_are_there() -> None:
    assert len(PROGRAMS) >= 30


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.stem for p in PROGRAMS])
def test_program_runs_unchanged(program: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runpy.run_path(str(program), run_name="__main__")
    assert capsys.readouterr().out  # every program prints what the docs show
