"""The extras match the documents, and each one's absence says which to install.

Every ``oncegraph[name]`` the package, the README or the docs tell a user to install is
an extra of ``pyproject.toml``; ``pg_checkpoint`` (the seed document's spelling) is
``postgres`` under another name; ``seed`` names what the seed's example needs. Then each
optional part is used in a fresh interpreter with its package hidden (``sys.modules[name]
= None`` makes ``import name`` raise ImportError, as on an install without the extra),
and the error names the extra.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXTRAS: dict[str, list[str]] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
    "optional-dependencies"
]
NAMED = re.compile(r"oncegraph\[([a-z_,]+)\]")


def _texts() -> list[Path]:
    files = [*sorted((ROOT / "src").rglob("*.py")), ROOT / "README.md"]
    return files + sorted((ROOT / "docs").glob("*.md"))


def test_every_extra_a_message_or_a_document_names_exists() -> None:
    named: dict[str, set[str]] = {}
    for path in _texts():
        for found in NAMED.findall(path.read_text()):
            for extra in found.split(","):
                named.setdefault(extra, set()).add(path.relative_to(ROOT).as_posix())
    missing = {extra: sorted(where) for extra, where in named.items() if extra not in EXTRAS}
    assert not missing, f"extras named but not defined in pyproject.toml: {missing}"
    assert {"postgres", "server", "cli", "structured"} <= named.keys()


def test_pg_checkpoint_is_postgres_and_seed_names_the_seed_examples_parts() -> None:
    assert EXTRAS["pg_checkpoint"] == ["oncegraph[postgres]"]
    (seed,) = EXTRAS["seed"]
    assert set(NAMED.fullmatch(seed).group(1).split(",")) >= {"postgres", "google"}  # type: ignore[union-attr]
    assert any(dep.startswith("jsonschema") for dep in EXTRAS["structured"])
    dev = NAMED.match(EXTRAS["dev"][0])
    assert dev is not None and "structured" in dev.group(1).split(",")


# extra -> (the modules its absence hides, code using the part; it must raise or exit)
HIDDEN: dict[str, tuple[tuple[str, ...], str]] = {
    "cli": (("typer", "rich"), "import oncegraph.cli; oncegraph.cli.main()"),
    "server": (
        ("starlette", "uvicorn", "jinja2"),
        "from oncegraph.server import create_app; create_app(None)",
    ),
    "postgres": (
        ("psycopg", "psycopg_pool"),
        "from oncegraph.storage.checkpointer import PgCheckpointer",
    ),
    "openai": (("openai",), "import oncegraph.prebuilt.models.openai"),
    "anthropic": (("anthropic",), "import oncegraph.prebuilt.models.anthropic"),
    "google": (("google", "google.genai"), "import oncegraph.prebuilt.models.google"),
    "mcp": (("mcp",), "from oncegraph.tools.mcp import MCPTools; MCPTools('http://127.0.0.1:9')"),
    "langchain": (
        ("langchain_core", "langchain_core.tools"),
        "from oncegraph.tools.langchain import from_langchain; from_langchain(object())",
    ),
    "encryption": (
        ("cryptography",),
        "from oncegraph.storage.checkpointer import EncryptionKeys\n"
        "EncryptionKeys({'k1': bytes(32)}, current='k1')",
    ),
    "structured": (
        ("jsonschema",),
        "from oncegraph.prebuilt.agent import ReactAgent\n"
        "from oncegraph.prebuilt.models import ScriptedModel\n"
        "ReactAgent(model=ScriptedModel.turns('x'), tools=[],\n"
        "           response_format={'type': 'object', 'properties': {}})",
    ),
}


@pytest.mark.parametrize("extra", sorted(HIDDEN))
def test_a_missing_extra_names_itself(extra: str) -> None:
    hidden, use = HIDDEN[extra]
    code = "import sys\n"
    code += "".join(f"sys.modules[{name!r}] = None\n" for name in hidden)
    code += textwrap.dedent(
        """
        try:
        {use}
        except SystemExit:
            raise
        except BaseException as exc:
            print(f"{{type(exc).__name__}}: {{exc}}")
            raise SystemExit(3)
        raise SystemExit("it worked without the extra")
        """
    ).format(use=textwrap.indent(use, "    "))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    said = done.stdout + done.stderr
    assert done.returncode != 0, said
    assert "it worked without the extra" not in said
    assert f"oncegraph[{extra}]" in said, said
    assert "Traceback" not in said, said  # a message, not a crash
