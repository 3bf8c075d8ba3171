"""``oncegraph compensate`` as a real process, on SQLite and PostgreSQL: it shows what it
will undo and asks; ``--yes`` compensates once; a second time is refused naming
``--again``; ``--again`` makes a second compensation; ``--json`` errors are JSON."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from _cli_shop import store
from _compensation_app import Shop
from clirun import og, ok

from oncegraph.testing.provider import FakeProvider

pytestmark = pytest.mark.slow  # real OS processes: scheduled first under -n auto

APP = f"{Path(__file__).with_name('_cli_compensation.py')}:app"


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        return str(request.getfixturevalue("fresh_dsn"))
    return str(tmp_path / "comp.db")


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    with FakeProvider() as p:
        yield p


def test_compensate_asks_then_once_then_again(database: str, provider: FakeProvider) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    shop = Shop(store(database), provider.url)
    charge = shop.book().effect_id
    shop.app.close()
    env = {"CLI_COMP_DB": database, "CLI_COMP_PROVIDER": provider.url}
    where = ["--app", APP]

    asked = og("compensate", charge, "--reason", "customer cancelled", *where, env=env, input="n\n")
    assert asked.returncode == 1 and "not confirmed" in asked.stderr
    assert "refund (irreversible)" in asked.stdout and '"card": "***"' in asked.stdout

    done = ok(
        "compensate",
        charge,
        "--reason",
        "customer cancelled",
        "--yes",
        "--json",
        "--args",
        '{"note": "by phone"}',
        *where,
        env=env,
    )
    report = json.loads(done.stdout)
    assert report["compensates"] == charge and report["effect"]["status"] == "completed"
    assert report["effect"]["effect_type"] == "refund" and report["resumed"] is False
    tickets = [e for e in provider.effects() if e["kind"] == "ticket"]
    assert len(tickets) == 1 and tickets[0]["body"]["text"] == "by phone"

    refused = og("compensate", charge, "--reason", "again?", "--yes", "--json", *where, env=env)
    assert refused.returncode == 1
    error = json.loads(refused.stdout or refused.stderr)["error"]
    assert "already compensated" in error["message"] and "--again" in error["message"]

    again = ok(
        "compensate", charge, "--reason", "the card was closed", "--yes", "--again", *where, env=env
    )
    assert "compensates" in again.stdout and charge in again.stdout
    assert len([e for e in provider.effects() if e["kind"] == "ticket"]) == 2
    shown = json.loads(ok("effect", charge, "--json", *where, env=env).stdout)
    assert shown["compensates"] is None and len(shown["compensated_by"]) == 2
    refund = json.loads(
        ok("effect", shown["compensated_by"][0], "--json", "--database", database, env=env).stdout
    )
    assert refund["compensates"] == charge and refund["effect_type"] == "refund"
    audit = [
        a
        for a in json.loads(ok("audit", "--json", "--database", database, env=env).stdout)
        if a["action"] == "compensate"
    ]
    assert len(audit) == 2 and {a["actor"] for a in audit} == {audit[0]["actor"]}
