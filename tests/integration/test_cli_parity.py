"""The CLI does what the UI and the API do, each command a real ``python -m oncegraph``
process on SQLite and PostgreSQL: ``threads``, ``state`` and ``history`` read the
database alone (no app code; values masked); ``start`` starts a run for a named actor,
``abandon`` gives one up, ``check`` asks the recipient through the tool's hook; errors
under ``--json`` are JSON; ``db prune`` is a dry run unless ``--yes`` and refuses to
delete what a replay of a kept run needs unless told.

The app is ``tests/integration/_cli_shop.py`` over the fake payment provider."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import _cli_shop as shop
import pytest
from clirun import SHOP, as_json, assert_user_error, og, ok

from oncegraph import FaultPlan, NeedsReviewError, StateGraph
from oncegraph.errors import RunNotFoundError, _CrashSignal
from oncegraph.storage.checkpointer import SqliteCheckpointer
from oncegraph.testing.provider import FakeProvider, ProviderClient

APP = f"{SHOP}:app"


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        return str(request.getfixturevalue("fresh_dsn"))
    return str(tmp_path / "parity.db")


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    with FakeProvider() as p:
        yield p


def park(database: str, provider: FakeProvider, thread: str) -> tuple[str, str]:
    """Crash inside the refund, resume: the run parks. Returns (run_id, effect_id)."""
    app = shop.build(database, provider.url)
    try:
        with pytest.raises(_CrashSignal):
            app.invoke(shop.USER, {"thread_id": thread, "fault_plan": FaultPlan(shop.SENT)})
        with pytest.raises(NeedsReviewError) as parked:
            app.invoke(None, {"thread_id": thread})
        return app.runs(thread_id=thread)[0].run_id, parked.value.effect_id
    finally:
        app.close()


def envs(database: str, provider: FakeProvider) -> tuple[dict[str, str], dict[str, str]]:
    """The database alone (``ONCEGRAPH_DATABASE``), and the app's (``--app``)."""
    app_env = {"CLI_SHOP_DB": database, "CLI_SHOP_PROVIDER": provider.url}
    return {"ONCEGRAPH_DATABASE": database}, app_env


def test_threads_state_and_history_from_the_database_alone(
    database: str, provider: FakeProvider
) -> None:
    run_id, _ = park(database, provider, "t-parked")
    env, app_env = envs(database, provider)

    threads = as_json("threads", env=env)
    assert [(t["thread_id"], t["status"], t["runs"]) for t in threads] == [
        ("t-parked", "needs_review", 1)
    ]
    assert threads[0]["latest_run_id"] == run_id and threads[0]["app"]
    assert as_json("threads", "--status", "completed", env=env) == []
    assert "t-parked" in ok("threads", env=env).stdout

    # no app code: the state as stored, every value a tool was given masked
    stored = og("state", "t-parked", "--json", env=env)
    assert stored.returncode == 0, stored.stderr
    assert shop.CARD not in stored.stdout
    state = json.loads(stored.stdout)
    assert state["as_stored"] is True and state["run_id"] == run_id
    assert state["next"] == ["tools"] and "messages" in state["logs"]
    # without the tools' masks, every value a tool was given is masked (the order too)
    assert state["values"]["messages"][0]["content"] == "refund order ***"
    assert "as stored" in ok("state", "t-parked", env=env).stdout
    # with the app: read as the graph reads it, masked by the tool's fields
    decoded = og("state", "t-parked", "--app", APP, "--json", env=app_env)
    assert decoded.returncode == 0, decoded.stderr
    assert shop.CARD not in decoded.stdout
    assert json.loads(decoded.stdout)["values"]["messages"][0]["content"] == "refund order 1042"

    # history: a read, so no app needed (it was refused without one)
    history = as_json("history", "t-parked", env=env)
    assert {h["run_id"] for h in history} == {run_id}
    steps = [h["step"] for h in history]
    assert steps == sorted(steps, reverse=True)  # newest first
    at = history[-1]["checkpoint_id"]
    assert as_json("state", "t-parked", "--checkpoint", at, env=env)["checkpoint_id"] == at

    assert_user_error(og("state", "t-none", env=env), "t-none", "no checkpoint")

    # the effect log across runs, as the UI's Effects page shows it
    log = as_json("effects", env=env)
    assert (log["needs_review"], log["pending"]) == (1, 0)
    review = as_json("effects", "--status", "needs_review", env=env)["effects"]
    assert [(e["effect_type"], e["needs_review"]) for e in review] == [("refund", True)]
    assert review[0]["request"] is None  # no app: payloads not shown
    assert "none recorded" not in ok("effects", env=env).stdout  # it has its one attempt
    assert as_json("effects", "--tool", "refund", "--recipient", "PAY", env=env)["matched"] == 1


def test_start_abandon_and_check_from_the_command_line(
    database: str, provider: FakeProvider
) -> None:
    env, app_env = envs(database, provider)
    client = ProviderClient(provider.url)
    user = json.dumps(shop.USER)
    ok("db", "migrate", "-d", database)  # a database the app's checkpointer can open

    started = as_json(
        "start",
        "t-new",
        "--input",
        user,
        "--reason",
        "customer called",
        "--actor",
        "ana",
        "--app",
        APP,
        env=app_env,
    )
    assert started["run"]["status"] == "completed"
    assert started["values"]["messages"][-1]["content"] == "Refunded."
    audit = as_json("audit", "--run", started["run"]["run_id"], env=env)
    assert [(a["action"], a["actor"]) for a in audit] == [("start", "cli:ana")]
    assert client.stats()["performed"] == 1

    # a thread whose run waits for a person: start refuses, and says what to do instead
    run_id, effect_id = park(database, provider, "t-parked")
    refused = og("start", "t-parked", "--input", user, "--app", APP, env=app_env)
    assert_user_error(refused, run_id, "oncegraph abandon", "oncegraph continue")
    assert_user_error(og("start", "t-x", "--input", "{", "--app", APP, env=app_env), "JSON")
    assert_user_error(og("start", "t-x", "--input", "{}", env=env), "--app")

    # check: the tool asks the provider (its reconcile hook), which has the refund
    checked = as_json(
        "check",
        effect_id,
        "--reason",
        "is it there?",
        "--app",
        APP,
        env={**app_env, "CLI_SHOP_RECONCILE": "1"},
    )
    assert checked["verdict"] == "done" and checked["effect"]["status"] == "completed"
    assert checked["effect"]["request"]["card"] == "***"
    settled = og("check", effect_id, "--app", APP, env={**app_env, "CLI_SHOP_RECONCILE": "1"})
    assert_user_error(settled)  # nothing to ask about a settled effect
    assert client.stats()["performed"] == 2  # asking sent nothing

    # abandon, from the database alone
    run2, _ = park(database, provider, "t-giveup")
    gone = as_json("abandon", run2, "--reason", "customer cancelled", "--actor", "bo", env=env)
    assert gone["run"]["status"] == "abandoned" and gone["run"]["run_id"] == run2
    assert as_json("show", run2, env=env)["run"]["status"] == "abandoned"
    actions = [
        (a["action"], a["actor"], a["reason"]) for a in as_json("audit", "--run", run2, env=env)
    ]
    assert ("abandon", "cli:bo", "customer cancelled") in actions
    assert_user_error(og("abandon", run2, "--reason", "again", env=env), "no unfinished run")
    assert as_json("show", run_id, env=env)["run"]["status"] == "needs_review"  # untouched


def test_errors_under_json_are_json_on_stdout(tmp_path: Path) -> None:
    db = tmp_path / "e.db"
    _counter(db, threads=1, runs=1)
    missing = og("show", "run_missing", "-d", str(db), "--json")
    assert missing.returncode == 1 and missing.stderr.strip() == ""
    error = json.loads(missing.stdout)["error"]
    assert error["code"] == "run_not_found" and "run_missing" in error["message"]
    assert error["exit_code"] == 1
    usage = og("runs", "-d", str(db), "--status", "stuck", "--json")
    assert usage.returncode == 2
    assert json.loads(usage.stdout)["error"]["code"] == "usage"
    unknown = og("runs", "--bogus", "--json")
    assert unknown.returncode == 2 and json.loads(unknown.stdout)["error"]["code"] == "usage"
    # without --json: one line on stderr, as before
    assert_user_error(og("show", "run_missing", "-d", str(db)), "run_missing")


def _counter(db: Path, threads: int = 2, runs: int = 3) -> list[str]:
    """``threads`` threads of ``runs`` runs each, through a two-node graph."""
    g = StateGraph(dict)
    g.add_node("inc", lambda s: {"n": s.get("n", 0) + 1})
    g.add_node("double", lambda s: {"n": s["n"] * 2})
    g.set_entry_point("inc")
    g.add_edge("inc", "double")
    g.set_finish_point("double")
    app = g.compile(checkpointer=SqliteCheckpointer(db))
    for t in range(threads):
        for _ in range(runs):
            app.invoke({"n": 0}, {"thread_id": f"thread-{t}"})
    app.close()
    return [f"thread-{t}" for t in range(threads)]


def _app(db: Path) -> Any:
    g = StateGraph(dict)
    g.add_node("inc", lambda s: {"n": s.get("n", 0) + 1})
    g.add_node("double", lambda s: {"n": s["n"] * 2})
    g.set_entry_point("inc")
    g.add_edge("inc", "double")
    g.set_finish_point("double")
    return g.compile(checkpointer=SqliteCheckpointer(db))


def _checkpoints(db: Path, threads: list[str]) -> int:
    async def go() -> int:
        store = SqliteCheckpointer(db)
        try:
            return sum([len(await store.list_checkpoints(t)) for t in threads])
        finally:
            await store.aclose()

    return asyncio.run(go())


def test_prune_is_a_dry_run_unless_yes_and_keeps_what_replays_need(tmp_path: Path) -> None:
    db = tmp_path / "prune.db"
    _counter(db)
    app = _app(db)
    oldest = app.runs(thread_id="thread-0")[-1]
    app.replay(oldest.run_id, reason="before any prune", actor="test")  # it can
    threads = sorted({r.thread_id for r in app.runs(limit=1000)})  # the replay's thread too
    app.close()
    before = _checkpoints(db, threads)  # the replay added a run and its checkpoints

    dry = og("db", "prune", "-d", str(db))
    assert dry.returncode == 0, dry.stderr
    assert "nothing was deleted" in dry.stdout and "--yes" in dry.stdout
    assert "could no longer be replayed" in dry.stdout
    assert _checkpoints(db, threads) == before
    counted = as_json("db", "prune", "-d", str(db))
    assert counted["dry_run"] is True and counted["checkpoints"] > 0
    assert oldest.run_id in counted["unreplayable_runs"]

    # --yes: refused, since it would delete what the kept runs' replays need
    refused = og("db", "prune", "-d", str(db), "--yes")
    assert_user_error(refused, "nothing was deleted", "--allow-unreplayable", "--keep")
    assert _checkpoints(db, threads) == before
    as_error = og("db", "prune", "-d", str(db), "--yes", "--json")
    assert json.loads(as_error.stdout)["error"]["exit_code"] == 1
    assert _checkpoints(db, threads) == before
    assert_user_error(og("db", "prune", "-d", str(db), "--yes", "--dry-run"), "--dry-run")

    # keeping enough checkpoints: nothing a replay needs goes, and it runs
    kept = as_json("db", "prune", "-d", str(db), "--keep", "1000", "--yes")
    assert kept["dry_run"] is False and kept["unreplayable_runs"] == []

    # told: it deletes, and a replay of a pruned run then fails as predicted
    done = as_json("db", "prune", "-d", str(db), "--yes", "--allow-unreplayable")
    assert done["dry_run"] is False and done["checkpoints"] == counted["checkpoints"]
    assert _checkpoints(db, threads) == before - counted["checkpoints"]
    app = _app(db)
    try:
        with pytest.raises(RunNotFoundError, match="pruned"):
            app.replay(oldest.run_id, reason="after the prune", actor="test")
    finally:
        app.close()


TERMINAL = {"TTY_COMPATIBLE": "1", "TTY_INTERACTIVE": "1"}  # stderr taken as a terminal


def test_long_work_shows_progress_on_stderr(tmp_path: Path, provider: FakeProvider) -> None:
    probe = og(
        "probe-recipient",
        provider.url + "/v1/charges",
        "--payload",
        '{"amount": 10, "currency": "eur"}',
        "--changed-payload",
        '{"amount": 11, "currency": "eur"}',
        "--retention",
        "1",
        env=TERMINAL,
    )
    assert probe.returncode == 0, probe.stderr
    assert "probing the recipient: request" in probe.stderr
    assert "waiting 1 s to see whether the recipient still knows the key" in probe.stderr
    assert "still honoured" in probe.stdout and "waiting" not in probe.stdout  # report apart
    # without a terminal: the report alone, no progress frames
    plain = og(
        "probe-recipient",
        provider.url + "/v1/charges",
        "--payload",
        '{"amount": 10, "currency": "eur"}',
        "--changed-payload",
        '{"amount": 11, "currency": "eur"}',
    )
    assert plain.returncode == 0 and "probing" not in plain.stderr

    db = tmp_path / "p.db"
    _counter(db, threads=1, runs=2)
    pruned = og("db", "prune", "-d", str(db), env=TERMINAL)
    assert pruned.returncode == 0, pruned.stderr
    assert "what replays need" in pruned.stderr or "pruning" in pruned.stderr
    migrated = og("db", "migrate", "-d", str(db), env=TERMINAL)
    assert migrated.returncode == 0 and "migrating" in migrated.stderr
