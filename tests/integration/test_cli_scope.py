"""The CLI goes through the run service's one door: ``effect ID --app`` refuses another
app's effect (the service's scope check), and ``show RUN --json`` prints the run with
what a tool declared secret masked in its input and error. Real ``python -m oncegraph``
processes over one SQLite database."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import _cli_scope_apps as apps
import pytest
from clirun import as_json, og

from oncegraph.errors import ModelCallError

HERE = Path(__file__).parent / "_cli_scope_apps.py"


@pytest.fixture
def failed_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, str], str]:
    """A ``shop`` run that called the refund (the card masked) and failed quoting the card;
    (the environment naming the database, the run id)."""
    db = str(tmp_path / "scope.db")
    monkeypatch.setenv("SCOPE_DB", db)
    app = apps.shop()
    try:
        with pytest.raises(ModelCallError, match="ledger refused"):
            app.invoke(apps.USER, {"thread_id": "t-scope"})
        (run,) = app.runs(thread_id="t-scope")
        stored = asyncio.run(app.store.get_run(run.run_id))
    finally:
        app.close()
    assert run.status == "failed"
    # as stored, the input and the error hold the card: a view that did not mask shows it
    assert stored is not None and apps.CARD in (stored.error or "")
    assert apps.CARD in json.dumps(stored.input)
    return {"SCOPE_DB": db}, run.run_id


def test_another_apps_effect_is_refused_by_effect_with_app(
    failed_run: tuple[dict[str, str], str],
) -> None:
    env, run_id = failed_run
    app = apps.shop()
    try:
        (refund,) = [e for e in app.effects(run_id=run_id) if e.effect_type == "refund"]
    finally:
        app.close()
    own = as_json("effect", refund.effect_id, "--app", f"{HERE}:shop", env=env)
    assert own["effect_id"] == refund.effect_id and own["status"] == "completed"
    assert "***" in json.dumps(own["request"]) and apps.CARD not in json.dumps(own)

    refused = og("effect", refund.effect_id, "--app", f"{HERE}:other", env=env)
    assert refused.returncode == 1, refused
    assert "belongs to app 'shop'" in refused.stderr and "nothing was read" in refused.stderr
    assert refund.effect_id not in refused.stdout and apps.CARD not in refused.stdout
    assert apps.CARD not in refused.stderr


@pytest.mark.parametrize("with_app", [True, False])
def test_show_json_masks_a_secret_in_the_runs_input_and_error(
    failed_run: tuple[dict[str, str], str], with_app: bool
) -> None:
    env, run_id = failed_run
    where = ["--app", f"{HERE}:shop"] if with_app else ["--database", env["SCOPE_DB"]]
    shown = as_json("show", run_id, *where, env=env)
    assert shown["run"]["run_id"] == run_id and shown["run"]["status"] == "failed"
    assert "ledger refused card ***" in shown["run"]["error"]
    assert "to card ***" in json.dumps(shown["run"]["input"])
    assert apps.CARD not in json.dumps(shown)
