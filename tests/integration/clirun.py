"""Run the ``oncegraph`` command as a real process (``python -m oncegraph ...``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

SRC = Path(__file__).parents[2] / "src"
SHOP = Path(__file__).parent / "_cli_shop.py"


def og(
    *args: str, env: dict[str, str] | None = None, input: str | None = None, columns: int = 200
) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k != "ONCEGRAPH_DATABASE"}  # only ours
    full.update({"COLUMNS": str(columns), **(env or {})})
    full["PYTHONPATH"] = os.pathsep.join([str(SRC), *sys.path])
    return subprocess.run(
        [sys.executable, "-m", "oncegraph", *args],
        capture_output=True,
        text=True,
        env=full,
        input=input if input is not None else "",
        timeout=300,  # a hang detector
    )


def ok(*args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    out = og(*args, **kw)
    assert out.returncode == 0, f"{args}: rc={out.returncode}\n{out.stdout}\n{out.stderr}"
    return out


def as_json(*args: str, **kw: Any) -> Any:
    return json.loads(ok(*args, "--json", **kw).stdout)


def assert_user_error(out: subprocess.CompletedProcess[str], *needles: str) -> str:
    """One or two lines on stderr, exit 1 or 2, no traceback; returns the message."""
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert out.returncode in (1, 2), (out.returncode, out.stdout, out.stderr)
    assert "Traceback" not in out.stderr + out.stdout, out.stderr
    assert 1 <= len(lines) <= 2, out.stderr
    message = " ".join(lines)
    for needle in needles:
        assert needle in message, (needle, message)
    return message


__all__ = ["SHOP", "as_json", "assert_user_error", "og", "ok"]
