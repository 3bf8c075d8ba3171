"""The import graph of ``src/oncegraph`` (``benchmarks/structure/imports.py``): the two
adapter cycles stay open (an adapter imports its core, the core never imports the
adapter), the layers below the run service find its masking through what it installs,
and the script itself finds a cycle and an up-pointing import where there is one."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    path = ROOT / "benchmarks" / "structure" / "imports.py"
    spec = importlib.util.spec_from_file_location("_structure_imports", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


imports = _load()


@pytest.fixture(scope="module")
def measured() -> dict[str, Any]:
    result: dict[str, Any] = imports.measure(ROOT / "src")
    return result


@pytest.mark.parametrize(
    "pair",
    [
        ("oncegraph/tools/tool.py", "oncegraph/tools/langchain.py"),
        ("oncegraph/prebuilt/models/base.py", "oncegraph/prebuilt/models/langchain.py"),
    ],
)
def test_adapter_and_core_are_not_a_cycle(measured: dict[str, Any], pair: tuple[str, str]) -> None:
    for cycle in measured["cycles"]:
        files = {f.split("src/", 1)[1] for f in cycle["files"]}
        assert not set(pair) <= files, cycle


@pytest.mark.parametrize("lower", ["oncegraph/ledger/perform.py", "oncegraph/observe/tracing.py"])
def test_masking_is_not_imported_from_below(measured: dict[str, Any], lower: str) -> None:
    up = [r for r in measured["up_pointing"] if r["from"].endswith(lower)]
    assert up == []


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / "oncegraph" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_a_cycle_and_an_up_import_are_found(tmp_path: Path) -> None:
    src = _tree(
        tmp_path,
        {
            "__init__.py": "",
            "storage/__init__.py": "",
            "storage/a.py": "def f():\n    from oncegraph.runs import b\n",
            "runs/__init__.py": "",
            "runs/b.py": "from oncegraph.storage import a\n",
            "runs/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from oncegraph import app\n",
            "app.py": "",
        },
    )
    result = imports.measure(src)
    assert [sorted(c["files"]) for c in result["cycles"]] == [
        sorted([f"{src}/oncegraph/runs/b.py", f"{src}/oncegraph/storage/a.py"])
    ]
    assert [(r["from"], r["lines"], r["kinds"]) for r in result["up_pointing"]] == [
        (f"{src}/oncegraph/storage/a.py", [2], ["fn"])
    ]
    # a type hint only is listed apart, and not counted
    assert result["up_pointing_count"] == 1
    assert [r["from"] for r in result["up_pointing_type_hints_only"]] == [
        f"{src}/oncegraph/runs/c.py"
    ]
