"""The README, the docs pages and the examples stand on their own: they name nothing outside
the repository, their links resolve, and the docs site (mkdocs.yml) lists every page."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
EXAMPLES = sorted(p for p in (ROOT / "examples").iterdir() if p.suffix in {".py", ".md"})
TEXTS = [ROOT / "README.md", *PAGES, *EXAMPLES]
OUTSIDE = re.compile(r"DESIGN\.md|\.\./shared|\bshared/|\blaws? \d", re.I)
LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.mark.parametrize("path", TEXTS, ids=[str(p.relative_to(ROOT)) for p in TEXTS])
def test_names_nothing_outside_the_repository(path: Path) -> None:
    found = [
        f"{path.name}:{n}: {line.strip()}"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert found == []


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_links_of_a_docs_page_stay_in_docs(page: Path) -> None:
    """A relative link names a page of docs/ (the site has nothing else); an anchor on
    another page is checked by ``mkdocs build --strict``."""
    for link in LINK.findall(page.read_text()):
        if "://" in link or link.startswith(("#", "mailto:")):
            continue
        target = (page.parent / link.split("#")[0]).resolve()
        assert target.parent == DOCS and target.is_file(), f"{page.name}: {link}"


def test_the_site_lists_every_page() -> None:
    config = (ROOT / "mkdocs.yml").read_text()
    assert re.search(r"^docs_dir: docs$", config, re.M)
    assert re.search(r"^strict: true$", config, re.M)
    listed = re.findall(r":\s+(\S+\.md)\s*$", config, re.M)
    assert sorted(listed) == sorted(p.name for p in PAGES)
    assert len(set(listed)) == len(listed)


def test_the_docs_extra_installs_the_site_tools() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert {re.split(r"[<>=\[ ]", r)[0] for r in extras["docs"]} >= {"mkdocs", "mkdocs-material"}
