"""The README's quickstart, step by step as written: its program is saved as ``example.py``
in a fresh directory, killed mid-refund (SIGKILL through ``ONCEGRAPH_CRASH_AT``), looked at
with ``oncegraph effects``, and run again: it refunds once, and says so as the README shows.
(tests/docs/test_snippets.py runs the program once, uncrashed, with every other runnable
block.) The README itself links only to files inside the repository."""

from __future__ import annotations

import asyncio
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from oncegraph.testing.crash import run_in_subprocess

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
ANSWER = "I have refunded 59.00 for order 1042."
RESUMED = "continuing the run a crash cut short"
COUNT = "refunds at the provider: 1"


def quickstart() -> str:
    """The README's quickstart section."""
    return README.read_text().split("\n## Quickstart", 1)[1].split("\n## ", 1)[0]


def use_example() -> str:
    """The quickstart's program (its python block), exactly as written."""
    found = re.search(r"```python\n(.*?)```", quickstart(), flags=re.S)
    assert found, "the quickstart has a python block"
    return found.group(1)


def shown(lang: str, after: str) -> str:
    """The quickstart's first ``lang`` block after the text ``after``."""
    section = quickstart().split(after, 1)[1]
    found = re.search(rf"```{lang}\n(.*?)```", section, flags=re.S)
    assert found, f"a {lang} block after {after!r}"
    return found.group(1)


def refunds(workdir: Path) -> list[tuple[str, str, float]]:
    with sqlite3.connect(workdir / "payments.db") as db:
        return list(db.execute("SELECT * FROM refunds"))


def refund_attempts(workdir: Path) -> int:
    """How often the ledger says the refund tool was called (from the example's runs.db)."""
    from oncegraph import END, START, StateGraph
    from oncegraph.storage.checkpointer import SqliteCheckpointer

    store = SqliteCheckpointer(workdir / "runs.db")
    graph = StateGraph(dict)
    graph.add_node("n", lambda state: {})
    graph.add_edge(START, "n")
    graph.add_edge("n", END)
    try:
        # runs belong to their app: read the example's ledger as its app (by its name)
        app = graph.compile(checkpointer=store, name="react_agent")
        effects = app.effects(thread_id="refund-1042")
        (refund,) = [e for e in effects if e.effect_type == "refund_order"]
        return len(refund.attempts)
    finally:
        asyncio.run(store.aclose())


@pytest.fixture
def example(tmp_path: Path) -> Path:
    script = tmp_path / "example.py"
    script.write_text(use_example())
    return script


def test_the_quickstart_steps_as_written(example: Path) -> None:
    """Kill it, look at the ledger, resume it, run it once more: what the README says."""
    kill = shown("bash", "**3. Kill it**").split("#")[0].strip()
    assert kill == "ONCEGRAPH_CRASH_AT=after_tool_return:4 python example.py"
    crashed = run_in_subprocess(example, cwd=example.parent, crash_at=("after_tool_return", 4))
    assert crashed.killed, crashed.describe()
    assert len(refunds(example.parent)) == 1, "killed after the provider answered"

    look = shown("bash", "the ledger knows only").split("#")[0].split()
    assert look[:2] == ["oncegraph", "effects"], look
    env = {k: v for k, v in os.environ.items() if not k.startswith("ONCEGRAPH_")}
    ledger = subprocess.run(
        [sys.executable, "-m", "oncegraph.cli", *look[1:]],
        cwd=example.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ledger.returncode == 0, ledger.stderr
    (row,) = [line for line in ledger.stdout.splitlines() if "refund_order" in line]
    assert "pending" in row, ledger.stdout

    resumed = run_in_subprocess(example, cwd=example.parent, timeout=300)
    assert resumed.returncode == 0, resumed.describe()
    assert resumed.stdout.strip() == shown("text", "**4. Resume it**").strip()
    assert resumed.stdout.splitlines() == [RESUMED, ANSWER, COUNT]
    again = run_in_subprocess(example, cwd=example.parent, timeout=300)
    assert again.returncode == 0, again.describe()
    assert again.stdout.splitlines() == [ANSWER, COUNT], "a finished conversation is not run again"
    assert len(refunds(example.parent)) == 1


def test_importing_the_use_example_runs_nothing(example: Path) -> None:
    """``oncegraph serve example.py:app`` imports the module for its ``app``: a crashed
    conversation must not be continued (nor a new one started) by the import alone."""
    crashed = run_in_subprocess(example, cwd=example.parent, crash_at=("after_intent", 1))
    assert crashed.killed, crashed.describe()
    importer = example.parent / "importer.py"
    importer.write_text("import example\nprint(type(example.app).__name__)\n")
    imported = run_in_subprocess(importer, cwd=example.parent, timeout=300)
    assert imported.returncode == 0, imported.describe()
    assert imported.stdout.strip() == "CompiledGraph"
    payments = example.parent / "payments.db"
    assert not payments.exists() or refunds(example.parent) == [], "the import made no refund"
    assert refund_attempts(example.parent) == 0, "the import started no attempt"


def test_the_irreversible_snippet_declares_a_tool() -> None:
    """The README's ``irreversible`` snippet compiles into a tool (its provider stands in)."""
    section = README.read_text().split("A tool declares what it does to the world", 1)[1]
    found = re.search(r"```python\n(.*?)```", section, flags=re.S)
    assert found, "the section has a python block"
    space: dict[str, object] = {}
    exec(compile(found.group(1), "README.md", "exec"), space)  # a NameError on psp is late
    charge: Any = space["charge"]
    assert (charge.effect, charge.mask, charge.recipient) == (
        "irreversible",
        ("card",),
        "payments",
    ) and charge.reconcile is not None


@pytest.mark.slow
@pytest.mark.parametrize(
    ("point", "attempts"),
    [
        ("after_tool_return:4", 2),  # the refund was made, its result not yet recorded
        ("after_intent:1", 2),  # the refund's intent is recorded, the call not yet made
        ("before_checkpoint:4", 2),  # made, its result folded into a step not yet committed
        ("after_checkpoint:4", 1),  # the refund step committed; the final answer not asked
    ],
)
def test_use_example_killed_mid_refund_refunds_once(
    example: Path, point: str, attempts: int
) -> None:
    name, nth = point.split(":")
    crashed = run_in_subprocess(example, cwd=example.parent, crash_at=(name, int(nth)))
    assert crashed.killed, crashed.describe()
    resumed = run_in_subprocess(example, cwd=example.parent, timeout=300)
    assert resumed.returncode == 0, resumed.describe()
    assert resumed.stdout.splitlines() == [RESUMED, ANSWER, COUNT]
    (refund,) = refunds(example.parent)
    assert refund[1:] == ("1042", 59.0)
    assert refund_attempts(example.parent) == attempts


def test_readme_links_stay_inside_the_repository() -> None:
    text = README.read_text()
    links = re.findall(r"\]\(([^)]+)\)", text)
    assert links, "the README links to its docs"
    for link in links:
        assert "://" not in link and not link.startswith(("/", "..")), link
        assert (ROOT / link.split("#")[0]).exists(), f"{link} does not exist"
    assert "shared" not in text and "DESIGN.md" not in text


def test_set_up_keeps_its_two_commands() -> None:
    setup = README.read_text().split("\n## Set up\n", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```bash\n(.*?)```", setup, flags=re.S)
    assert [c.strip() for c in commands] == [
        'pip install -e ".[cli]" && oncegraph demo',
        'pip install -e ".[dev]" && python -m pytest -n auto',
    ]
