"""A parent command with an effect, across a real SIGKILL: the charge happens once.

``_parent_command_worker.py`` runs a parent whose subgraph node charges (an effect on
a provider-side log that survives the kill) and returns ``Command(graph=
Command.PARENT, goto="receipt")``. The process is SIGKILLed by oncegraph itself at a
commit boundary of that path; a FRESH process resumes the run with ``invoke(None)`` /
``stream(None)`` and the provider holds one charge:

* ``before_checkpoint:2``: the subgraph's first step was committed (hit 1); the charge
  ran and its result was recorded when the command left the subgraph; the parent's
  step with the command's update is not written. The resume runs the subgraph's node
  again, which finds the charge in the ledger.
* ``after_checkpoint:2``: the parent's step is written; the resume runs ``receipt``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from oncegraph.testing.crash import run_in_subprocess

pytestmark = pytest.mark.slow

WORKER = Path(__file__).with_name("_parent_command_worker.py")


@pytest.mark.parametrize("stateful", [False, True], ids=["subgraph", "stateful"])
@pytest.mark.parametrize("path", ["invoke", "stream"])
@pytest.mark.parametrize("point", ["before_checkpoint", "after_checkpoint"])
def test_a_killed_parent_command_charges_once(
    tmp_path: Path, point: str, path: str, stateful: bool
) -> None:
    args = [str(tmp_path / "runs.db"), str(tmp_path), path]
    extra = ["stateful"] if stateful else []
    crashed = run_in_subprocess(WORKER, [*args, "start", *extra], crash_at=(point, 2))
    assert crashed.killed, crashed.describe()
    charges = tmp_path / "charges.log"
    assert charges.read_text().splitlines() == ["charged ada"]
    resumed = run_in_subprocess(WORKER, [*args, "resume", *extra])
    assert resumed.returncode == 0, resumed.describe()
    assert resumed.json() == {"log": ["in", "charged ada", "receipt"]}
    assert charges.read_text().splitlines() == ["charged ada"]  # one charge at the provider
