"""Programs from LangGraph's docs, changed only in their imports (and with plain
functions for models), run as they are. Each ends with oncegraph's own checks.

Every program in ``programs/`` runs in a fresh module namespace (``runpy``) with its
stdout captured; a program passes when it runs to the end (its ``assert`` lines hold).
"""

from __future__ import annotations

import contextlib
import runpy
from pathlib import Path

import pytest

from oncegraph.errors import UnkeyedToolWarning

PROGRAMS = sorted((Path(__file__).parent / "programs").glob("p*.py"))


def test_the_programs_are_there() -> None:
    assert len(PROGRAMS) >= 30


# A deliberate difference: LangGraph's bare ``@tool`` is a ``write`` tool here, and one
# whose code never passes its idempotency key to the recipient is told so at compile.
WARNS = {"p11_tool_node": UnkeyedToolWarning}


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.stem for p in PROGRAMS])
def test_program_runs_unchanged(program: Path, capsys: pytest.CaptureFixture[str]) -> None:
    warns = WARNS.get(program.stem)
    with pytest.warns(warns) if warns else contextlib.nullcontext():
        runpy.run_path(str(program), run_name="__main__")
    assert capsys.readouterr().out  # every program prints what the docs show
