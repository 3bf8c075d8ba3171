"""Every program in ``examples/`` runs as a user would run it: ``python examples/X.py`` in
a fresh process, from a directory of its own, and prints what its docstring promises; it
removes the temporary directory it worked in."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # real OS processes: scheduled first under -n auto

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
PROGRAMS = sorted(p.name for p in EXAMPLES.glob("*.py") if p.name != "mcp_refund_server.py")


def run_example(name: str, cwd: Path) -> str:
    """Run ``examples/<name>`` to the end; its stdout (fails on a non-zero exit, or when it
    leaves anything in the temporary directory it was given)."""
    env = {k: v for k, v in os.environ.items() if k != "ONCEGRAPH_CRASH_AT"}
    scratch = cwd.parent / f"{cwd.name}-tmp"
    scratch.mkdir()
    env["TMPDIR"] = str(scratch)
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,  # a hang detector on a loaded machine, not a speed test
    )
    assert done.returncode == 0, f"{name} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    assert list(scratch.iterdir()) == [], f"{name} left its temporary files behind"
    return done.stdout


def test_every_example_is_tested_here() -> None:
    tested = {"support_agent_approval.py", "mcp_tool.py", "map_reduce.py", "crash_and_resume.py"}
    assert set(PROGRAMS) == tested, "a new example needs a test in this file"
    listed = (EXAMPLES / "README.md").read_text()
    assert all(f"]({name})" in listed for name in PROGRAMS), "examples/README.md lists each"


def test_support_agent_approval(tmp_path: Path) -> None:
    out = run_example("support_agent_approval.py", tmp_path)
    assert "[approve] model: Outcome: Refunded 59.00 for order 1042" in out
    assert "[approve] kept in state: approve by alice@shop" in out
    assert "[edit] model: Outcome: Refunded 40.00 for order 1042" in out
    assert "[edit] kept in state: edit by bob@shop" in out
    assert "[reject] model: Outcome: Rejected by the reviewer: Refunds over 50.00" in out
    assert "[reject] kept in state: reject by carol@shop" in out
    assert "refunds at the payment provider: [('1042', 40.0), ('1042', 59.0)]" in out
    assert list(tmp_path.iterdir()) == [], "it works in a temporary directory of its own"


def test_mcp_tool(tmp_path: Path) -> None:
    if os.environ.get("CI") != "true":
        pytest.importorskip("mcp", reason='needs the MCP SDK: pip install "oncegraph[mcp]"')
    out = run_example("mcp_tool.py", tmp_path)
    assert "tools: order_status (read), create_refund (write)" in out
    assert '"refund_id":"re_1"' in out and '"replayed":false' in out
    assert "model: Order 1042 is refunded." in out
    assert re.search(r"ledger: create_refund write completed, idempotency key [0-9a-f]{12}", out)


def test_map_reduce(tmp_path: Path) -> None:
    out = run_example("map_reduce.py", tmp_path)
    assert "child exit -9" in out
    after = out.split("after the resume, warehouses: ", 1)[1].splitlines()[0]
    for region in ("apac", "eu", "us"):
        assert f"{region}: " in after and re.search(rf"{region}: \d request\(s\), 1 hold", after)
    assert re.search(r"\w+: 1 request\(s\)", after), "the recorded branch was not asked again"
    assert "report: apac: stock held for 1042; eu: stock held for 1042; us: stock held" in out
    assert "ledger: 3 hold_stock effects, all completed" in out


def test_crash_and_resume(tmp_path: Path) -> None:
    out = run_example("crash_and_resume.py", tmp_path)
    assert "1. child process exit -9" in out
    assert "2. ledger: send_refund is pending; provider: 1 refund(s)" in out
    assert "3. resumed: The refund of 59.00 for order 1042 is done." in out
    assert "attempts ['unknown', 'reconciled']" in out
    assert "provider: 1 refund(s) from 1 call(s)" in out
    assert "resume parks the run as needs_review" in out
    assert "the provider got this refund 1 time(s)" in out
