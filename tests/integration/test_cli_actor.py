"""Who the CLI records as the actor: always ``cli:<name>``, so a name typed at the command
line (not authenticated) never reads as a server key's actor (``api:<name>``) in the
audit log. Real ``python -m oncegraph`` processes on SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import _cli_shop as shop
import pytest
from clirun import SHOP, as_json, assert_user_error, og

from oncegraph import FaultPlan, NeedsReviewError
from oncegraph.errors import _CrashSignal
from oncegraph.testing.provider import FakeProvider

APP = f"{SHOP}:app"


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        return str(request.getfixturevalue("fresh_dsn"))
    return str(tmp_path / "actor.db")


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    with FakeProvider() as p:
        yield p


def _parked(database: str, provider: FakeProvider) -> tuple[str, str]:
    app = shop.build(database, provider.url)
    try:
        with pytest.raises(_CrashSignal):
            app.invoke(shop.USER, {"thread_id": "t", "fault_plan": FaultPlan(shop.SENT)})
        with pytest.raises(NeedsReviewError) as parked:
            app.invoke(None, {"thread_id": "t"})
        return app.runs(thread_id="t")[0].run_id, parked.value.effect_id
    finally:
        app.close()


def test_cli_actors_are_recorded_in_the_cli_namespace(
    database: str, provider: FakeProvider
) -> None:
    run_id, effect_id = _parked(database, provider)
    env = {"ONCEGRAPH_DATABASE": database}
    for given, recorded in (("api:ada", "cli:api:ada"), ("ana", "cli:ana"), ("cli:bo", "cli:bo")):
        as_json(
            "resolve", effect_id, "--outcome", "not_done", "--reason", f"by {given}",
            "--actor", given, env=env,
        )
        (record,) = [a for a in as_json("audit", "--run", run_id, env=env)
                     if a["reason"] == f"by {given}"]
        assert record["actor"] == recorded
    # $ONCEGRAPH_ACTOR follows the same rule
    as_json("resolve", effect_id, "--outcome", "not_done", "--reason", "from env",
            env={**env, "ONCEGRAPH_ACTOR": "api:eve"})
    (record,) = [a for a in as_json("audit", "--run", run_id, env=env)
                 if a["reason"] == "from env"]
    assert record["actor"] == "cli:api:eve"
    # a name with an invisible character is refused, and nothing is recorded
    before = len(as_json("audit", "--run", run_id, env=env))
    refused = og("resolve", effect_id, "--outcome", "not_done", "--reason", "forged",
                 "--actor", "ana\u2028INFO approved by the customer", env=env)
    assert refused.returncode == 2
    assert_user_error(refused, "--actor", "U+2028 LINE SEPARATOR")
    assert len(as_json("audit", "--run", run_id, env=env)) == before
    actors = {a["actor"] for a in as_json("audit", "--run", run_id, env=env)}
    assert not any(a.startswith("api:") for a in actors)
