"""Every code block the README and ``docs/*.md`` mark as a complete program runs as written.

A block is marked by an HTML comment on the line before its opening fence (the comment does
not show on a rendered page)::

    <!-- runnable -->
    ```python
    ...
    ```

``<!-- runnable: postgres -->`` marks a block that needs PostgreSQL: it runs with
``ONCEGRAPH_DATABASE`` set to a fresh, empty database (created from
``ONCEGRAPH_TEST_PG_DSN``). Each block is saved as ``snippet.py`` in an empty temporary
directory and run there with ``python`` in a fresh process, with a timeout; it must exit 0.
Blocks without the marker are fragments (they use names a page defines elsewhere).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKER = re.compile(r"^<!-- runnable(?:: (?P<needs>[a-z]+))? -->\n```(?P<lang>\w*)\n", re.M)
NEEDS = {None, "postgres"}
TIMEOUT = 300  # a hang detector on a loaded machine, not a speed test


@dataclass(frozen=True)
class Snippet:
    page: Path
    line: int
    needs: str | None
    code: str

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def snippets(page: Path) -> list[Snippet]:
    """The blocks of ``page`` marked runnable, with the line their code starts on."""
    text = page.read_text()
    found = []
    for mark in MARKER.finditer(text):
        end = text.index("\n```", mark.end() - 1)
        line = text.count("\n", 0, mark.end()) + 1
        assert mark["lang"] == "python", f"{page.name}:{line}: only python blocks run"
        assert mark["needs"] in NEEDS, f"{page.name}:{line}: unknown need {mark['needs']!r}"
        found.append(Snippet(page, line, mark["needs"], text[mark.end() : end + 1]))
    return found


ALL = [snippet for page in PAGES for snippet in snippets(page)]


def test_the_marker_is_found() -> None:
    """The README's quickstart program and at least one block of docs/ are marked."""
    assert any(s.page.name == "README.md" for s in ALL)
    assert any(s.page.parent.name == "docs" for s in ALL)
    # a misspelt marker would silently leave its block untested
    for page in PAGES:
        for line in page.read_text().splitlines():
            if "runnable" in line and line.startswith("<!--"):
                assert MARKER.match(line + "\n```python\n"), f"{page.name}: {line!r}"


def run_snippet(snippet: Snippet, workdir: Path, env: dict[str, str]) -> None:
    script = workdir / "snippet.py"
    script.write_text(snippet.code)
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, (
        f"{snippet.name} exited {done.returncode}\n--- stdout\n{done.stdout}"
        f"\n--- stderr\n{done.stderr}"
    )


@pytest.mark.parametrize("snippet", ALL, ids=[s.name for s in ALL])
def test_snippet_runs(snippet: Snippet, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ONCEGRAPH_")}
    workdir = tmp_path / "work"
    workdir.mkdir()
    if snippet.needs == "postgres":
        env["ONCEGRAPH_DATABASE"] = request.getfixturevalue("fresh_dsn")
    run_snippet(snippet, workdir, env)
