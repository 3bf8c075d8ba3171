"""An operator at the command line, on SQLite and PostgreSQL: a run parked needs_review
is found, its effect inspected (payload masked), resolved from the database alone, then
continued with the app; an effect is redelivered only after its preview is confirmed;
a replay and a branch are new runs with lineage; every action is in the audit log.

The app is ``tests/integration/_cli_shop.py``; the provider is the fake payment
provider (a real HTTP server counting effects per key). Every command is a real
``python -m oncegraph`` process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import _cli_shop as shop
import pytest
from clirun import SHOP, as_json, assert_user_error, og, ok

from oncegraph import FaultPlan, NeedsReviewError
from oncegraph.errors import _CrashSignal
from oncegraph.loading import load_app
from oncegraph.testing.provider import FakeProvider, ProviderClient

pytestmark = pytest.mark.slow  # real OS processes: scheduled first under -n auto

APP = f"{SHOP}:app"


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        return str(request.getfixturevalue("fresh_dsn"))
    return str(tmp_path / "ops.db")


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    with FakeProvider() as p:
        yield p


def park(database: str, provider: FakeProvider) -> tuple[str, str]:
    """Crash inside the refund, resume: the run parks. Returns (run_id, effect_id)."""
    app = shop.build(database, provider.url)
    try:
        with pytest.raises(_CrashSignal):
            app.invoke(shop.USER, {"thread_id": "t-ops", "fault_plan": FaultPlan(shop.SENT)})
        with pytest.raises(NeedsReviewError) as parked:
            app.invoke(None, {"thread_id": "t-ops"})
        return app.runs(thread_id="t-ops")[0].run_id, parked.value.effect_id
    finally:
        app.close()


def test_find_resolve_continue_redeliver_replay_branch(
    database: str, provider: FakeProvider
) -> None:
    run_id, effect_id = park(database, provider)
    client = ProviderClient(provider.url)
    env = {"ONCEGRAPH_DATABASE": database, "CLI_SHOP_DB": database,
           "CLI_SHOP_PROVIDER": provider.url}
    app_env = {k: v for k, v in env.items() if k != "ONCEGRAPH_DATABASE"}

    # the parked run is found, and its effect inspected
    parked = as_json("runs", "--status", "needs_review", env=env)
    assert [r["run_id"] for r in parked] == [run_id]
    hidden = as_json("effect", effect_id, env=env)  # no app: masks unknown, payload hidden
    assert hidden["status"] == "pending" and hidden["payload_hidden"] is True
    assert hidden["request"] is None
    masked = as_json("effect", effect_id, "--app", APP, env=app_env)
    assert masked["request"] == {"order_id": "1042", "card": "***"}
    shown = ok("effect", effect_id, "--app", APP, env=app_env).stdout
    assert '"card": "***"' in shown and shop.CARD not in shown
    assert effect_id in ok("show", run_id, env=env).stdout

    # Continue before anyone checked: it parks again, and says what to do
    assert_user_error(
        og("continue", run_id, "--app", APP, env=app_env), f"oncegraph resolve {effect_id}"
    )

    # resolve from the database alone, then continue with the app
    resolved = as_json(
        "resolve", effect_id, "--outcome", "done", "--reason", "seen in the PSP",
        "--result", '"ch_1"', "--actor", "ana", env=env,
    )
    assert resolved["status"] == "completed"
    still = as_json("runs", "--status", "needs_review", env=env)  # resolved, nothing ran
    assert [r["run_id"] for r in still] == [run_id]
    out = as_json("continue", run_id, "--app", APP, "--reason", "resolved", "--actor", "ana",
                  env=app_env)
    assert out["values"]["messages"][-1]["content"] == "Refunded."
    assert as_json("show", run_id, env=env)["run"]["status"] == "completed"
    assert client.stats()["performed"] == 1  # the refund happened once, before the crash

    # redeliver: the preview first; declined, nothing is sent
    declined = og("redeliver", effect_id, "--reason", "customer asked", "--app", APP,
                  env=app_env, input="n\n")
    assert_user_error(declined, "nothing was sent")
    assert "card" in declined.stdout and '"***"' in declined.stdout  # the preview, masked
    assert "same key " + effect_id in declined.stdout
    assert client.stats()["replayed"] == 0
    preview = as_json("redeliver", effect_id, "--reason", "r", "--preview", "--app", APP,
                      env=app_env)
    assert preview["payload"] == {"order_id": "1042", "card": "***"}
    assert preview["recipient"] == "payments" and preview["dedup"] == f"same key {effect_id}"
    refused = og("redeliver", effect_id, "--reason", "r", "--json", "--app", APP, env=app_env)
    assert refused.returncode == 2  # under --json, the error is JSON on stdout
    assert "--yes" in json.loads(refused.stdout)["error"]["message"]
    assert client.stats()["replayed"] == 0
    before = len(as_json("effect", effect_id, env=env)["attempts"])
    ok("redeliver", effect_id, "--reason", "customer asked", "--app", APP, env=app_env,
       input="y\n")
    assert client.stats()["replayed"] == 1 and client.stats()["performed"] == 1  # same key
    assert len(as_json("effect", effect_id, env=env)["attempts"]) == before + 1
    scripted = as_json("redeliver", effect_id, "--reason", "again", "--yes", "--app", APP,
                       env=app_env)
    assert scripted["effect"]["effect_id"] == effect_id
    assert scripted["effect"]["request"]["card"] == "***"

    # replay (evidence: nothing sent) and branch: new runs with lineage
    replay = as_json("replay", run_id, "--reason", "audit check", "--app", APP, env=app_env)
    assert replay["run"]["parent_run_id"] == run_id and replay["run"]["mode"] == "evidence"
    assert client.stats()["replayed"] == 2 and client.stats()["performed"] == 1
    patch = '{"messages": [{"role": "user", "content": "and order 1043?"}]}'
    branch = as_json("branch", run_id, "--patch", patch, "--reason", "what if",
                     "--app", APP, env=app_env)
    assert branch["run"]["status"] == "paused" and branch["run"]["parent_run_id"] == run_id
    assert [c["channel"] for c in branch["diff"]] == ["messages"]
    history = as_json("history", "t-ops", "--app", APP, env=app_env)
    assert {h["run_id"] for h in history} == {run_id}

    # every action is in the audit log, newest first, with its actor and reason
    audit = as_json("audit", "--run", run_id, env=env)
    actions: list[tuple[str, Any]] = [(a["action"], a["reason"]) for a in reversed(audit)]
    assert ("resolve_effect", "seen in the PSP") in actions
    assert ("continue", "resolved") in actions
    assert [a for a, _ in actions].count("redeliver") == 2
    assert any(a["actor"] == "cli:ana" for a in audit)  # the CLI's namespace


INTERRUPTING = """
import os
from typing import TypedDict

from oncegraph import END, START, StateGraph, interrupt
from oncegraph.storage.checkpointer import SqliteCheckpointer


class State(TypedDict, total=False):
    answer: str


def ask(state: State) -> State:
    return {"answer": interrupt("ship it?")}


g = StateGraph(State)
g.add_node("ask", ask)
g.add_edge(START, "ask")
g.add_edge("ask", END)
app = g.compile(checkpointer=SqliteCheckpointer(os.environ["ASK_DB"]))
"""


def test_continue_answers_an_interrupt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = tmp_path / "ask_app.py"
    module.write_text(INTERRUPTING)
    db = str(tmp_path / "ask.db")
    env = {"ASK_DB": db}
    monkeypatch.setenv("ASK_DB", db)
    app = load_app(f"{module}:app")  # the same file the command loads
    app.invoke({}, {"thread_id": "t-ask"})
    app.close()
    (waiting,) = as_json("runs", "-d", db, "--status", "interrupted")
    app_arg = f"{module}:app"
    refused = og("continue", waiting["run_id"], "--app", app_arg, env=env)
    assert_user_error(refused, "answer")
    done = as_json("continue", waiting["run_id"], "--answer", '"yes"', "--app", app_arg, env=env)
    assert done["values"] == {"answer": "yes"}
    (answer,) = [a for a in as_json("audit", "-d", db) if a["action"] == "answer"]
    assert answer["details"]["answer"] == "yes"


KILLED = """
import sys
import _cli_shop as shop
app = shop.build(sys.argv[1], sys.argv[2])
app.invoke(shop.USER, {"thread_id": "t-killed"})
"""


def test_a_killed_run_is_shown_as_stopped_by_a_crash(
    database: str, provider: FakeProvider
) -> None:
    """SIGKILLed inside the refund (after the provider has the charge), the run's record
    still says running; ``runs`` and ``show`` say its process is gone and how to go on,
    and ``show --json`` carries the holder; continued, nothing is charged twice."""
    child = subprocess.run(
        [sys.executable, "-c", KILLED, database, provider.url],
        env={**os.environ, "ONCEGRAPH_CRASH_AT": shop.SENT,
             "PYTHONPATH": os.pathsep.join([str(SHOP.parent), *sys.path])},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == -9, child.stderr  # killed, not exited
    client = ProviderClient(provider.url)
    assert client.stats()["performed"] == 1
    env = {"ONCEGRAPH_DATABASE": database}
    (run,) = as_json("runs", "--thread", "t-killed", env=env)
    assert run["status"] == "running"
    listed = ok("runs", "--thread", "t-killed", env=env).stdout
    assert "stopped by a crash" in listed
    shown = ok("show", run["run_id"], env=env).stdout
    assert "stopped without finishing it" in shown and "oncegraph continue" in shown
    got = as_json("show", run["run_id"], env=env)
    assert got["crashed"] is True and got["holder"]["alive"] is False

    app_env = {"CLI_SHOP_DB": database, "CLI_SHOP_PROVIDER": provider.url}
    og("continue", run["run_id"], "--app", APP, "--reason", "process died", env=app_env)
    after = as_json("show", run["run_id"], env=env)
    assert after["run"]["status"] == "needs_review" and "holder" not in after
    assert client.stats()["performed"] == 1  # never sent again
