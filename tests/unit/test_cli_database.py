"""Which database a CLI value names, and libpq's connection errors as cause and fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from oncegraph.cli.database import ENV, Database, choose, classify, explain_connect
from oncegraph.cli.output import CliError
from oncegraph.errors import ConfigError
from oncegraph.loading import load_app


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        ("runs.db", "sqlite"),
        ("/var/lib/og/runs.db", "sqlite"),
        ("./a=b.db", "sqlite"),
        ("postgresql://u@h/db", "postgres"),
        ("postgres://u@h/db", "postgres"),
        ("host=127.0.0.1 dbname=og", "postgres"),
        ("  dbname=og", "postgres"),
    ],
)
def test_classify(value: str, kind: str) -> None:
    assert classify(value).kind == kind


def test_choose_prefers_flags_then_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, "env.db")
    assert choose(None) == Database("sqlite", "env.db")
    assert choose("flag.db") == Database("sqlite", "flag.db")
    holder = tmp_path / "dsn"
    holder.write_text("postgresql://u:secret@h/db\n")
    assert choose(None, holder) == Database("postgres", "postgresql://u:secret@h/db")
    with pytest.raises(CliError) as twice:
        choose("a.db", holder)
    assert twice.value.code == 2
    monkeypatch.delenv(ENV)
    with pytest.raises(CliError, match=ENV):
        choose(None)
    holder.write_text("  \n")
    with pytest.raises(CliError, match="empty"):
        choose(None, holder)


def test_a_dsn_is_described_without_its_password() -> None:
    shown = Database("postgres", "postgresql://u:s3cret@db.local:6543/og").describe()
    assert "s3cret" not in shown and "'og'" in shown and "db.local:6543" in shown


@pytest.mark.parametrize(
    ("libpq", "needles"),
    [
        ('connection failed: FATAL:  database "og" does not exist', ("createdb", "'og'")),
        ("connection failed: Connection refused\n\tIs the server running", ("refused",)),
        ("connection failed: timeout expired", ("within",)),
        ("could not translate host name \"nohost\" to address", ("unknown PostgreSQL host",)),
        ('FATAL:  password authentication failed for user "u"', ("--database-file",)),
        ("something else\nsecond line", ("something else",)),
    ],
)
def test_connection_errors_name_the_fix(libpq: str, needles: tuple[str, ...]) -> None:
    message = explain_connect(libpq, "postgresql://u:s3cret@db.local:6543/og")
    assert "s3cret" not in message and "\n" not in message
    for needle in needles:
        assert needle in message


def test_load_app_refuses_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="module:attribute"):
        load_app("nocolon")
    with pytest.raises(ConfigError, match="no Python file"):
        load_app(f"{tmp_path / 'missing.py'}:app")
    module = tmp_path / "notapp.py"
    module.write_text("app = 42\ndef broken():\n    raise RuntimeError('boom')\n")
    with pytest.raises(ConfigError, match="not a compiled app"):
        load_app(f"{module}:app")
    with pytest.raises(ConfigError, match="has no attribute"):
        load_app(f"{module}:other")
    with pytest.raises(ConfigError, match="RuntimeError: boom"):
        load_app(f"{module}:broken")
    failing = tmp_path / "failing.py"
    failing.write_text("raise ImportError('needs a thing')\n")
    with pytest.raises(ConfigError, match="needs a thing"):
        load_app(f"{failing}:app")
