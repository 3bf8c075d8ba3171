"""``oncegraph runs`` and ``oncegraph effects`` print stored strings literally.

The stored strings come from users, models and providers: a thread id ``a[/]b`` (Rich
markup that closes nothing), a ``[link=...]`` (a live hyperlink if read as markup),
terminal escapes (clear the screen, retitle the window), a bidi override. The CLI runs
as a real process with a forced colour terminal, so Rich emits escape sequences of
its own and would emit a hyperlink; the stored ones must appear as text.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from oncegraph.cli.literal import literal, visible
from oncegraph.storage.checkpointer import SqliteCheckpointer
from oncegraph.storage.records import StepCommit
from oncegraph.testing.conformance import make_checkpoint, make_effect, make_run

CLEAR = "\x1b[2J\x1b[H"
TITLE = "\x1b]0;pwned\x07"
HOSTILE_THREAD = f"a[/]b [link=https://evil.example]click[/link] {CLEAR}{TITLE}\u202eevil"
HOSTILE_ERROR = f"[bold red]boom[/] {CLEAR}\r\nforged log line"
HOSTILE_TYPE = "tool:[link=https://evil.example]refund[/link]"
HOSTILE_RECIPIENT = "pay\x1b[8mhidden\x1b[0ments [/]"


def seed(path: Path) -> str:
    """A run and an effect whose strings are all hostile; returns the run id."""

    async def go() -> str:
        store = SqliteCheckpointer(path)
        try:
            run = make_run(HOSTILE_THREAD, error=HOSTILE_ERROR, launch_reason="in[/]voke")
            cp = make_checkpoint(HOSTILE_THREAD, run.run_id, 1, next_nodes=("__start__",))
            await store.commit(
                StepCommit(thread_id=HOSTILE_THREAD, expected_version=0, checkpoint=cp, new_run=run)
            )
            effect = dataclasses.replace(
                make_effect(run.run_id, HOSTILE_THREAD),
                effect_type=HOSTILE_TYPE,
                recipient=HOSTILE_RECIPIENT,
            )
            await store.begin_effect(effect)
            return run.run_id
        finally:
            await store.aclose()

    return asyncio.run(go())


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "FORCE_COLOR": "1", "COLUMNS": "400", "LINES": "50"}
    env.pop("NO_COLOR", None)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parents[2] / "src"), *sys.path])
    return subprocess.run(
        [sys.executable, "-m", "oncegraph.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,  # a hang detector
    )


def assert_nothing_live(out: str) -> None:
    assert "\x1b]8;" not in out  # no OSC 8 hyperlink
    assert CLEAR not in out and "\x1b[2J" not in out
    assert "\x1b]0;" not in out and "\x07" not in out
    assert "\x1b[8m" not in out  # no concealed text
    assert "\u202e" not in out and "\r" not in out


def test_runs_prints_stored_strings_literally(tmp_path: Path) -> None:
    db = tmp_path / "hostile.db"
    seed(db)
    out = cli("runs", "--sqlite", str(db))
    assert out.returncode == 0, out.stdout + out.stderr
    assert_nothing_live(out.stdout)
    assert "a[/]b [link=https://evil.example]click[/link] " in out.stdout
    assert "\\x1b[2J\\x1b[H\\x1b]0;pwned\\x07\\u202eevil" in out.stdout
    assert "[bold red]boom[/] \\x1b[2J\\x1b[H\\r\\nforged log line" in out.stdout
    assert "in[/]voke" in out.stdout
    # the listing by the thread id itself works too
    out = cli("runs", "--sqlite", str(db), "--thread", HOSTILE_THREAD)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "a[/]b [link=https://evil.example]click[/link] " in out.stdout


def test_effects_prints_stored_strings_literally(tmp_path: Path) -> None:
    db = tmp_path / "hostile.db"
    run_id = seed(db)
    out = cli("effects", "--sqlite", str(db), "--run", run_id)
    assert out.returncode == 0, out.stdout + out.stderr
    assert_nothing_live(out.stdout)
    assert HOSTILE_TYPE in out.stdout
    assert "pay\\x1b[8mhidden\\x1b[0ments [/]" in out.stdout


def test_an_error_message_is_printed_literally(tmp_path: Path) -> None:
    """An error names the path; a path with markup and escapes stays text."""
    path = tmp_path / "[link=file:evil]x[/link]\x1b[2J" / "db.sqlite"
    for args in (("db", "verify", "--sqlite", str(path)), ("runs", "-d", str(path))):
        out = cli(*args)
        assert out.returncode == 1, out.stdout + out.stderr
        assert_nothing_live(out.stderr)  # errors go to stderr
        assert "[link=file:evil]x[/link]\\x1b[2J" in out.stderr


@pytest.mark.parametrize(
    ("stored", "shown"),
    [
        ("plain id 42", "plain id 42"),
        ("a[/]b", "a[/]b"),
        ("\x1b[31m", "\\x1b[31m"),
        ("tab\there\nnew", "tab\\there\\nnew"),
        ("back\\x1b", "back\\\\x1b"),  # a stored backslash cannot pose as an escape
        ("\u200bzero width", "\\u200bzero width"),
        ("\x9b31m", "\\x9b31m"),  # the C1 control sequence introducer
        ("日本語 ✓ 🚀", "日本語 ✓ 🚀"),
    ],
)
def test_visible(stored: str, shown: str) -> None:
    assert visible(stored) == shown
    assert literal(stored).plain == shown
