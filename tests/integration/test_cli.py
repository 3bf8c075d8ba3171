"""The oncegraph command as a user runs it (a real process each time): the demo, the
schema commands, the read commands with ``--json``, the database from the environment
or a file, full ids, ``db prune --dry-run``, and every user error as one or two lines
naming the fix (exit 1 or 2, no traceback, nothing created)."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from clirun import SHOP, SRC, as_json, assert_user_error, og, ok

from oncegraph import StateGraph
from oncegraph.storage.checkpointer import SqliteCheckpointer


@pytest.mark.slow
def test_demo_crashes_resumes_and_refunds_once(tmp_path: Path) -> None:
    out = ok("demo", "--db", str(tmp_path / "demo.db"))
    assert "killed by SIGKILL" in out.stdout
    assert "refunds performed at the provider: 1" in out.stdout
    assert "exactly once." in out.stdout
    # the same database again: a new conversation, the same outcome
    again = ok("demo", "--db", str(tmp_path / "demo.db"))
    assert "exactly once." in again.stdout, again.stdout
    assert "oncegraph runs --sqlite" in again.stdout


@pytest.mark.slow
def test_demo_tells_what_each_kill_left(tmp_path: Path) -> None:
    """Killed after the intent, no money moved: the narrative says so, not that it did."""
    out = ok("demo", "--db", str(tmp_path / "demo.db"), "--crash-at", "after_intent")
    assert "refunds performed at the provider: 0" in out.stdout
    assert "no money moved yet" in out.stdout
    assert "exactly once." in out.stdout


def test_demo_without_a_database_leaves_no_temporary_directory(tmp_path: Path) -> None:
    env_tmp = tmp_path / "tmp"
    env_tmp.mkdir()
    out = ok("demo", env={"TMPDIR": str(env_tmp)})
    assert "exactly once." in out.stdout
    assert list(env_tmp.iterdir()) == []


def test_version_and_help() -> None:
    assert ok("--version").stdout.startswith("oncegraph ")
    listed = ok("--help").stdout
    for command in (
        "runs", "show", "history", "effects", "effect", "continue", "resolve", "replay",
        "branch", "redeliver", "audit", "db", "serve", "worker", "demo",
    ):
        assert f"  {command} " in listed, command
    assert "--dry-run" in ok("db", "prune", "--help").stdout


def test_db_verify_says_what_to_do_and_migrate_fixes_it(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    sqlite3.connect(db).close()
    out = og("db", "verify", "--sqlite", str(db))
    assert out.returncode == 1
    assert "oncegraph db migrate" in out.stdout
    ok("db", "migrate", "--database", str(db))
    assert "up to date" in ok("db", "verify", "--sqlite", str(db)).stdout
    state = as_json("db", "verify", "-d", str(db))
    assert state["up_to_date"] is True and state["current"] == state["latest"]


def test_db_migrate_creates_a_new_database_on_purpose(tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    ok("db", "migrate", "-d", str(db))
    assert db.exists()
    assert as_json("runs", "-d", str(db)) == []


# -- a small graph with history, for the read commands -----------------------------------


def counter(db: Path, threads: int = 2, steps: int = 3) -> list[str]:
    """``threads`` threads of ``steps`` runs each, through a one-node graph."""
    g = StateGraph(dict)
    g.add_node("inc", lambda s: {"n": s.get("n", 0) + 1})
    g.set_entry_point("inc")
    g.set_finish_point("inc")
    app = g.compile(checkpointer=SqliteCheckpointer(db))
    ids = []
    for t in range(threads):
        for _ in range(steps):
            app.invoke({"n": 0}, {"thread_id": f"thread-{t}"})
        ids.append(f"thread-{t}")
    app.close()
    return ids


def test_runs_json_env_database_and_database_file(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    counter(db)
    found = as_json("runs", "-d", str(db))
    assert len(found) == 6 and {r["status"] for r in found} == {"completed"}
    only = as_json("runs", "-d", str(db), "--thread", "thread-1", "--limit", "2")
    assert [r["thread_id"] for r in only] == ["thread-1", "thread-1"]
    assert as_json("runs", "-d", str(db), "--status", "needs_review,failed") == []
    # page after page: --before the last run listed
    first = as_json("runs", "-d", str(db), "--limit", "4")
    rest = as_json("runs", "-d", str(db), "--before", first[-1]["run_id"])
    assert [r["run_id"] for r in first + rest] == [r["run_id"] for r in found]
    # the environment instead of the flag
    assert len(as_json("runs", env={"ONCEGRAPH_DATABASE": str(db)})) == 6
    # a file holding the database (for a DSN with a password)
    holder = tmp_path / "dsn.txt"
    holder.write_text(f"{db}\n")
    assert len(as_json("runs", "--database-file", str(holder))) == 6
    shown = as_json("show", found[0]["run_id"], "-d", str(db))
    assert shown["run"]["run_id"] == found[0]["run_id"] and shown["effects"] == []
    assert as_json("audit", "-d", str(db)) == []


def test_ids_are_shown_whole_on_a_narrow_terminal(tmp_path: Path) -> None:
    db = tmp_path / "ids.db"
    counter(db, threads=1, steps=1)
    run_id = as_json("runs", "-d", str(db))[0]["run_id"]
    out = ok("runs", "-d", str(db), columns=40)
    assert run_id in out.stdout


def test_prune_dry_run_counts_and_deletes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "prune.db"
    threads = counter(db, threads=3, steps=4)

    def checkpoints() -> int:
        async def go() -> int:
            store = SqliteCheckpointer(db)
            try:
                return sum([len(await store.list_checkpoints(t)) for t in threads])
            finally:
                await store.aclose()

        return asyncio.run(go())

    before = checkpoints()
    dry = as_json("db", "prune", "-d", str(db), "--dry-run")
    assert dry["dry_run"] is True and dry["threads"] == 3 and dry["checkpoints"] > 0
    assert checkpoints() == before  # nothing deleted
    assert "would delete" in ok("db", "prune", "-d", str(db), "--dry-run").stdout
    assert as_json("db", "prune", "-d", str(db))["dry_run"] is True  # the default
    assert checkpoints() == before
    done = as_json("db", "prune", "-d", str(db), "--yes", "--allow-unreplayable")
    assert done["checkpoints"] == dry["checkpoints"] and done["task_writes"] == dry["task_writes"]
    assert checkpoints() == before - dry["checkpoints"]
    assert as_json("db", "prune", "-d", str(db), "--dry-run")["checkpoints"] == 0


# -- user errors: one or two lines, the fix named, nothing created ---------------------------


def _bad_inputs(tmp: Path) -> list[tuple[list[str], tuple[str, ...], int]]:
    text = tmp / "notes.txt"
    text.write_text("not a database\n")
    empty = tmp / "empty.db"
    sqlite3.connect(empty).close()
    good = tmp / "good.db"
    ok("db", "migrate", "-d", str(good))
    missing = str(tmp / "typo.db")
    return [
        (["runs", "--sqlite", missing], ("no SQLite database", "db migrate"), 1),
        (["runs", "-d", missing], ("nothing was created",), 1),
        (["effects", "--run", "r", "-d", missing], ("no SQLite database",), 1),
        (["db", "prune", "-d", missing], ("no SQLite database",), 1),
        (["runs", "-d", str(tmp)], ("directory",), 1),
        (["runs", "-d", str(text)], ("cannot be read as a SQLite database",), 1),
        (["runs", "-d", str(empty)], ("no oncegraph schema", "db migrate"), 1),
        (["runs"], ("ONCEGRAPH_DATABASE", "--database"), 2),
        (["runs", "-d", str(good), "--sqlite", str(good)], ("give the database once",), 2),
        (["runs", "--database-file", str(tmp / "nope.txt")], ("--database-file", "check"), 2),
        (["runs", "-d", str(good), "--limit", "many"], ("--limit",), 2),
        (["runs", "-d", str(good), "--before", "run-gone"], ("no run 'run-gone'", "pruned"), 1),
        (["runs", "-d", str(good), "--limit", "0"], ("--limit",), 2),
        (["runs", "-d", str(good), "--status", "sleeping"], ("needs_review",), 2),
        (["runs", "-d", str(good), "--bogus"], ("--bogus",), 2),
        (["show", "run_nope", "-d", str(good)], ("run_nope",), 1),
        (["show", "-d", str(good)], ("RUN",), 2),
        (["effect", "eff_nope", "-d", str(good)], ("eff_nope", "oncegraph effects"), 1),
        (["effects", "-d", str(good), "--status", "stuck"], ("--status", "stuck"), 2),
        (["continue", "run_x", "-d", str(good)], ("No such option: -d",), 2),
        (["continue", "run_x"], ("--app",), 2),
        (["continue", "run_x", "--app", "no_such_module:app"], ("no_such_module",), 2),
        (["continue", "run_x", "--app", str(tmp / "nope.py") + ":app"], ("no Python file",), 2),
        (["continue", "run_x", "--app", "no-colon"], ("module:attribute",), 2),
        (["resolve", "e", "--outcome", "maybe", "--reason", "r", "-d", str(good)],
         ("not_done",), 2),
        (["resolve", "e", "--outcome", "done", "-d", str(good)], ("--reason",), 2),
        (["resolve", "e", "--outcome", "done", "--reason", "r", "-d", str(good)], ("'e'",), 1),
        (["replay", "r", "--mode", "bogus", "--reason", "r", "--app", f"{SHOP}:app"],
         ("evidence",), 2),
        (["branch", "r", "--patch", "{bad", "--reason", "r", "--app", f"{SHOP}:app"],
         ("--patch", "JSON"), 2),
        (["demo", "--crash-at", "bogus"], ("crash point", "in_tool"), 2),
        (["worker", "no_such_module:app"], ("no_such_module",), 2),
        (["db", "verify", "-d", missing], ("no SQLite database",), 1),
    ]


def test_each_user_error_is_one_or_two_lines_and_creates_nothing(tmp_path: Path) -> None:
    cases = _bad_inputs(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    for args, needles, code in cases:
        out = og(*args, env={"CLI_SHOP_DB": str(tmp_path / "shop.db"),
                             "CLI_SHOP_PROVIDER": "http://127.0.0.1:9"})
        assert_user_error(out, *needles)
        assert out.returncode == code, (args, out.returncode, out.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no database created


@pytest.mark.postgres
def test_postgres_errors_are_known_at_once(pg_admin: str, fresh_dsn: str) -> None:
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    info: dict[str, Any] = conninfo_to_dict(pg_admin)
    refused = make_conninfo(pg_admin, port="9")
    missing = make_conninfo(pg_admin, dbname="og_no_such_database")
    cases = [
        (refused, ("connection refused", "host and port")),
        (missing, ("og_no_such_database", "does not exist", "createdb")),
        (fresh_dsn, ("no oncegraph schema", "db migrate")),  # an empty database
        ("postgresql://u:se cret@[x/y", ("could not be parsed",)),
        ("host=localhost dbname='unclosed", ("could not be parsed",)),
    ]
    for dsn, needles in cases:
        for args in (["runs", "-d", dsn], ["effects", "--run", "r", "-d", dsn]):
            message = assert_user_error(og(*args), *needles)
            assert "max_size" not in message and "se cret" not in message
    out = og("db", "verify", "-d", missing)
    assert_user_error(out, "does not exist")
    # the same through the environment and a DSN file
    assert_user_error(og("runs", env={"ONCEGRAPH_DATABASE": refused}), "connection refused")
    assert info  # the admin DSN parsed


@pytest.mark.postgres
def test_postgres_migrate_verify_runs_json(fresh_dsn: str, tmp_path: Path) -> None:
    holder = tmp_path / "dsn"
    holder.write_text(fresh_dsn)
    ok("db", "migrate", "--database-file", str(holder))
    assert as_json("db", "verify", "--database-file", str(holder))["up_to_date"] is True
    assert as_json("runs", env={"ONCEGRAPH_DATABASE": fresh_dsn}) == []
    assert as_json("db", "prune", "-d", fresh_dsn, "--dry-run")["threads"] == 0


NO_SERVER = """
import sys

sys.modules["oncegraph.server"] = None  # as if the server extra were not installed
sys.argv = ["oncegraph", *sys.argv[1:]]
from oncegraph.cli import main

main()
"""


def test_serve_without_the_server_package_is_one_line(tmp_path: Path) -> None:
    script = tmp_path / "no_server.py"
    script.write_text(NO_SERVER)
    out = subprocess.run(
        [sys.executable, str(script), "serve", f"{SHOP}:app"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert_user_error(out, "server")


FAKE_SERVER = """
import sys, types

calls = []
server = types.ModuleType("oncegraph.server")
server.serve = lambda target, **kw: calls.append((target, kw)) or 0
sys.modules["oncegraph.server"] = server
sys.argv = ["oncegraph", *sys.argv[1:]]
from oncegraph.cli import main

try:
    main()
finally:
    print(calls)
"""


def test_serve_hands_its_options_to_the_server(tmp_path: Path) -> None:
    script = tmp_path / "fake_server.py"
    script.write_text(FAKE_SERVER)
    holder = tmp_path / "dsn"
    holder.write_text("postgresql://u:pw@db/og\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), *sys.path])}
    env.pop("ONCEGRAPH_DATABASE", None)

    def serve(*args: str, **extra: str) -> str:
        out = subprocess.run(
            [sys.executable, str(script), "serve", *args],
            capture_output=True, text=True, env={**env, **extra}, timeout=300,
        )
        assert out.returncode == 0, out.stderr
        return out.stdout.strip().splitlines()[-1]

    assert serve("examples.app:app", "--port", "9000") == str(
        [
            (
                "examples.app:app",
                {
                    "host": "127.0.0.1",
                    "port": 9000,
                    "database": None,
                    "origins": None,
                    "workers": 1,
                    "log_level": "INFO",
                },
            )
        ]
    )
    assert "'origins': ['https://ops.example.com']" in serve(
        "m:app", "--origin", "https://ops.example.com"
    )
    assert "'database': 'runs.db'" in serve("m:app", "--database", "runs.db")
    assert "'workers': 3, 'log_level': 'WARNING'" in serve(
        "m:app", "--workers", "3", "--log-level", "warning"
    )
    assert "'database': 'postgresql://u:pw@db/og'" in serve("m:app", "--database-file", str(holder))
    assert "'database': 'from-env.db'" in serve("m:app", ONCEGRAPH_DATABASE="from-env.db")
