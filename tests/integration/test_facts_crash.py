"""Recorded facts survive a real crash: a node draws an id and a time, a fresh OS process
resumes the run after a SIGKILL (worker: tests/integration/_facts_worker.py).

* killed after the intent of an effect that carries the drawn values: the resumed node
  gets the SAME values (they were committed before the intent), so the effect is
  called with the request it recorded, under its key, not refused as a changed request;
* killed before the step's commit with no effect after the draw: the node runs again
  from the top and draws fresh values, which nothing recorded had seen; the state and
  the recorded facts agree.

Each case runs two Python processes (a second or more each on this machine).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oncegraph.testing.crash import run_in_subprocess

pytestmark = pytest.mark.slow  # real OS processes: scheduled first under -n auto

WORKER = Path(__file__).with_name("_facts_worker.py")
ROOT = Path(__file__).resolve().parents[2]


def _where(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if kind == "postgres":
        return "pg:" + str(request.getfixturevalue("fresh_dsn"))
    return str(tmp_path / "facts.db")


def _calls(log: Path) -> list[dict[str, str]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def _run(where: str, log: Path, kind: str, action: str, crash_at: str | None = None) -> object:
    env = {"PYTHONPATH": f"{ROOT / 'src'}"}
    return run_in_subprocess(
        WORKER, [where, str(log), kind, action], env=env, timeout=120, crash_at=crash_at
    )


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_values_drawn_before_an_effect_survive_a_crash_after_its_intent(
    store: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    where, log = _where(store, tmp_path, request), tmp_path / "calls.log"
    crashed = _run(where, log, "send", "start", crash_at="after_intent")
    assert crashed.killed, crashed.describe()  # type: ignore[attr-defined]
    assert _calls(log) == []  # the intent is committed, the call never happened
    resumed = _run(where, log, "send", "resume")
    assert resumed.returncode == 0, resumed.describe()  # type: ignore[attr-defined]
    report = resumed.json()  # type: ignore[attr-defined]
    assert report["store"] == {"sqlite": "SqliteCheckpointer", "postgres": "PgCheckpointer"}[store]
    values = report["values"]
    assert _calls(log) == [{"order": values["order"], "at": values["at"]}]
    ((facts,),) = [[f["facts"][""]] for f in report["facts"]]
    assert facts == [["uuid4", values["order"]], ["now", values["at"]]]


def test_a_crash_before_anything_recorded_the_values_draws_them_again(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    where, log = _where("sqlite", tmp_path, request), tmp_path / "calls.log"
    crashed = _run(where, log, "plain", "start", crash_at="before_checkpoint")
    assert crashed.killed, crashed.describe()  # type: ignore[attr-defined]
    resumed = _run(where, log, "plain", "resume")
    assert resumed.returncode == 0, resumed.describe()  # type: ignore[attr-defined]
    report = resumed.json()  # type: ignore[attr-defined]
    values = report["values"]
    (facts,) = report["facts"]
    assert facts["facts"][""] == [["uuid4", values["order"]], ["now", values["at"]]]
