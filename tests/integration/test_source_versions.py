"""Evidence that says where it came from: a read tool's source version (returned with
``Completed(source_version=)`` or computed by ``@tool(source_version=)``) and the model
version the provider reported are kept on the effect, on memory, SQLite and PostgreSQL;
an evidence replay serves the recorded results without calling anything, and the
versions stay visible. The effect page (UI), the API and ``oncegraph effect`` show it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from oncegraph import tool
from oncegraph.cli.commands import app as cli
from oncegraph.errors import ConfigError
from oncegraph.ledger.outcomes import Completed
from oncegraph.prebuilt.agent import ReactAgent
from oncegraph.prebuilt.models.base import ModelResponse
from oncegraph.prebuilt.models.scripted import ScriptedModel
from oncegraph.storage.checkpointer import SqliteCheckpointer
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import EffectClass

T = "t-src"
USER = {"messages": [{"role": "user", "content": "price and stock of sku 9?"}]}
SERVED = "gpt-x-2026-11-01"  # the model version the provider reports
ETAG = 'W/"41"'


def _agent(checkpointer: Checkpointer, called: list[str]) -> Any:
    @tool(effect="read")
    def price(sku: str) -> Completed:
        """The catalog price of a sku."""
        called.append("price")
        return Completed({"sku": sku, "eur": 12}, source_version="catalog@rev-7")

    @tool(effect="read", source_version=lambda row: row["etag"])
    async def stock(sku: str) -> dict[str, Any]:
        """How many of a sku are left."""
        called.append("stock")
        return {"sku": sku, "left": 3, "etag": ETAG}

    calls = (
        {"id": "c1", "name": "price", "args": {"sku": "9"}},
        {"id": "c2", "name": "stock", "args": {"sku": "9"}},
    )
    model = ScriptedModel.turns(
        ModelResponse(tool_calls=calls, model_version=SERVED),
        ModelResponse(content="12 eur, 3 left", model_version=SERVED),
    )
    return ReactAgent(model=model, tools=[price, stock]).compile(checkpointer=checkpointer)


def _versions(app: Any, run_id: str) -> dict[str, list[str | None]]:
    found: dict[str, list[str | None]] = {}
    for effect in app.effects(run_id=run_id):
        kind = "model" if effect.effect_class is EffectClass.MODEL else effect.effect_type
        found.setdefault(kind, []).append(effect.source_version)
    return found


def test_versions_are_kept_and_an_evidence_replay_serves_the_recorded_results(
    checkpointer: Checkpointer,
) -> None:
    called: list[str] = []
    app = _agent(checkpointer, called)
    out = app.invoke(USER, {"thread_id": T})
    assert out["messages"][-1]["content"] == "12 eur, 3 left"
    run_id = app.runs(thread_id=T)[0].run_id
    assert _versions(app, run_id) == {
        "price": ["catalog@rev-7"],
        "stock": [ETAG],
        "model": [SERVED, SERVED],
    }
    (stock,) = [e for e in app.effects(run_id=run_id) if e.effect_type == "stock"]
    assert stock.result == {"sku": "9", "left": 3, "etag": ETAG}  # the result as returned
    assert stock.attempts[-1].source_version == ETAG  # kept on the attempt that read it

    made = app.replay(run_id, reason="what did it see?", actor="ana")
    assert made.result["messages"][-1]["content"] == "12 eur, 3 left"
    assert sorted(called) == ["price", "stock"], "an evidence replay calls nothing"
    assert _versions(app, run_id)["price"] == ["catalog@rev-7"]


def test_the_api_the_ui_and_the_cli_show_the_source_version(tmp_path: Path) -> None:
    from starlette.testclient import TestClient

    from oncegraph.server import create_app
    from oncegraph.server.auth import COOKIE

    path = tmp_path / "src.db"
    store = SqliteCheckpointer(path)
    app = _agent(store, [])
    app.invoke(USER, {"thread_id": T})
    run_id = app.runs(thread_id=T)[0].run_id
    (price,) = [e for e in app.effects(run_id=run_id) if e.effect_type == "price"]
    keys = {"viewer-key-0001": {"role": "viewer", "name": "vera"}}
    with TestClient(create_app(app, keys=keys)) as client:
        headers = {"Authorization": "Bearer viewer-key-0001"}
        url = f"/api/runs/{run_id}/effects/{price.effect_id}"
        shown = client.get(url, headers=headers)
        assert shown.status_code == 200, shown.text
        assert shown.json()["effect"]["source_version"] == "catalog@rev-7"
        client.cookies.set(COOKIE, "viewer-key-0001")  # logged in, as the UI's login sets
        page = client.get(f"/ui/runs/{run_id}/effects/{price.effect_id}")
        assert page.status_code == 200
        assert 'data-field="source_version">catalog@rev-7<' in page.text
    app.close()
    printed = CliRunner().invoke(cli, ["effect", price.effect_id, "--database", str(path)])
    assert printed.exit_code == 0, printed.output
    assert "source version: catalog@rev-7" in printed.output


def test_a_source_version_that_is_not_a_function_is_refused() -> None:
    def read(sku: str) -> str:
        """Read one."""
        return sku

    with pytest.raises(ConfigError, match=r"source_version= is a function of the tool's result"):
        tool(effect="read", source_version="v1")(read)
