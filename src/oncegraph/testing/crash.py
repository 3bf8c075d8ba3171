"""A small crash harness: run a program in a fresh OS process, let it die, look at the body.

Recovery is only proven when the process that crashed is really gone and a NEW process
picks the run up. This module runs a Python script or module as a child process, lets
oncegraph SIGKILL it at a named crash point (``ONCEGRAPH_CRASH_AT=<point>[:<nth>]``, see
:mod:`oncegraph.runtime.faults`), and tells whether it really died by SIGKILL::

    from oncegraph.testing.crash import run_in_subprocess

    crashed = run_in_subprocess("my_worker.py", ["run"], crash_at="after_intent")
    assert crashed.killed, crashed.describe()
    resumed = run_in_subprocess("my_worker.py", ["resume"])
    assert resumed.returncode == 0, resumed.describe()
    print(resumed.json())          # the last stdout line, parsed as JSON

Invariants:

* The child never inherits a crash plan by accident: ``ONCEGRAPH_CRASH_AT`` is removed
  from the inherited environment and set only from ``crash_at`` (or an explicit ``env``).
* The child runs in its own session, so a timeout kills the child and everything it
  started (its process group), never the caller.
* ``killed`` is true only for death by SIGKILL (``returncode == -9``); a clean exit, an
  exception or another signal is not a crash the harness asked for.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CRASH_ENV = "ONCEGRAPH_CRASH_AT"

__all__ = [
    "CRASH_ENV",
    "Child",
    "CompletedRun",
    "crash_spec",
    "python_command",
    "run_in_subprocess",
    "start_in_subprocess",
]


@dataclass(frozen=True, slots=True)
class CompletedRun:
    """What a child process left behind. ``killed``: it died by SIGKILL."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    killed: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "killed", self.returncode == -signal.SIGKILL)

    def json(self) -> Any:
        """The last non-empty stdout line, parsed as JSON (a worker's report)."""
        lines = [line for line in self.stdout.splitlines() if line.strip()]
        if not lines:
            raise ValueError(f"the child printed nothing on stdout\n{self.describe()}")
        return json.loads(lines[-1])

    def describe(self, tail: int = 4000) -> str:
        """A readable account for assertion messages: argv, exit and output tails."""
        how = "SIGKILLed" if self.killed else f"exited with {self.returncode}"
        return (
            f"$ {' '.join(self.argv)}\n{how}\n"
            f"--- stdout ---\n{self.stdout[-tail:]}\n--- stderr ---\n{self.stderr[-tail:]}"
        )


def python_command(target: str | os.PathLike[str], args: Sequence[str] = ()) -> list[str]:
    """The argv that runs ``target`` with this interpreter.

    A path ending in ``.py`` (or an existing file) runs as a script; anything else is a
    module name run with ``-m``.
    """
    text = os.fspath(target)
    if text.endswith(".py") or Path(text).is_file():
        return [sys.executable, text, *map(str, args)]
    return [sys.executable, "-m", text, *map(str, args)]


def crash_spec(point: str, nth: int = 1) -> str:
    """The value of ``ONCEGRAPH_CRASH_AT`` that kills at the ``nth`` hit of ``point``."""
    if not point or ":" in point:
        raise ValueError(f"bad crash point {point!r}")
    if nth < 1:
        raise ValueError("nth counts hits from 1")
    return point if nth == 1 else f"{point}:{nth}"


@dataclass(frozen=True, slots=True)
class Child:
    """A child process started by :func:`start_in_subprocess`; :meth:`wait` collects it."""

    argv: tuple[str, ...]
    process: subprocess.Popen[str]

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait(self, timeout: float = 300.0) -> CompletedRun:
        """Wait for the child; one still running after ``timeout`` seconds is killed with
        its process group and ``TimeoutError`` is raised with its output so far."""
        try:
            stdout, stderr = self.process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            stdout, stderr = self.process.communicate()
            late = CompletedRun(self.argv, self.process.returncode, stdout, stderr)
            raise TimeoutError(
                f"the child ran longer than {timeout}s and was killed\n{late.describe()}"
            ) from None
        return CompletedRun(self.argv, self.process.returncode, stdout, stderr)

    def kill(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def start_in_subprocess(
    target: str | os.PathLike[str],
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    *,
    crash_at: str | tuple[str, int] | None = None,
    cwd: str | os.PathLike[str] | None = None,
) -> Child:
    """Start ``target`` (script path or module) in a fresh process, without waiting.

    ``env`` is added to this process's environment (minus ``ONCEGRAPH_CRASH_AT``);
    ``crash_at`` (``"after_intent"`` or ``("after_checkpoint", 2)``) sets the crash plan.
    The child runs in its own session (:meth:`Child.kill` ends its whole group).
    """
    argv = python_command(target, args)
    child_env = {k: v for k, v in os.environ.items() if k != CRASH_ENV}
    child_env.update(env or {})
    if crash_at is not None:
        point, nth = (crash_at, 1) if isinstance(crash_at, str) else crash_at
        child_env[CRASH_ENV] = crash_spec(point, nth)
    process = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=child_env,
        cwd=cwd,
        text=True,
        start_new_session=True,
    )
    return Child(tuple(argv), process)


def run_in_subprocess(
    target: str | os.PathLike[str],
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    timeout: float = 300.0,
    *,
    crash_at: str | tuple[str, int] | None = None,
    cwd: str | os.PathLike[str] | None = None,
) -> CompletedRun:
    """Run ``target`` in a fresh process and wait for it (:func:`start_in_subprocess`,
    then :meth:`Child.wait` with ``timeout``)."""
    child = start_in_subprocess(target, args, env, crash_at=crash_at, cwd=cwd)
    return child.wait(timeout)
