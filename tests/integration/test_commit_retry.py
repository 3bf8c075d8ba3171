"""A step's commit that meets a transient store error is tried again, after the waits of
``COMMIT_RETRY_DELAYS`` (slept through the run's ``sleep``); a commit that landed before
its connection failed is recognized, not reported as a lost race; a store that stays
down fails the run's step with a message saying nothing of it was recorded.

The store is a real SQLite store whose ``commit`` fails the way a dropped connection
does: before writing (nothing landed) or after writing (it landed, the answer was lost).
"""

from __future__ import annotations

import operator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

from oncegraph import END, START, StateGraph
from oncegraph.errors import StorageError
from oncegraph.runtime.driver import COMMIT_RETRY_DELAYS
from oncegraph.storage.records import RunStatus, StepCommit
from oncegraph.storage.sql.sqlite import SqliteCheckpointer


class Sleeps:
    """A fake ``config["sleep"]`` that records the waits."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


class Dropping(SqliteCheckpointer):
    """Its next ``failures`` step commits raise a plain StorageError, each after the
    commit was written when ``after_write`` (the answer lost, not the write)."""

    def __init__(self, path: Path, *, failures: int = 0, after_write: bool = False) -> None:
        super().__init__(path)
        self.failures = failures
        self.after_write = after_write
        self.calls = 0

    async def commit(self, commit: StepCommit) -> int:
        self.calls += 1
        if self.failures <= 0:
            return await super().commit(commit)
        self.failures -= 1
        if self.after_write:
            await super().commit(commit)
        raise StorageError("connection to the database was lost")


class State(TypedDict, total=False):
    log: Annotated[list[str], operator.add]


def app_on(store: SqliteCheckpointer) -> Any:
    g = StateGraph(State)
    g.add_node("work", lambda state: {"log": ["worked"]})
    g.add_edge(START, "work")
    g.add_edge("work", END)
    return g.compile(checkpointer=store)


def config(thread: str, sleeps: Sleeps) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}, "sleep": sleeps}


def test_a_commit_that_fails_before_writing_is_tried_again_after_the_waits(
    tmp_path: Path,
) -> None:
    store = Dropping(tmp_path / "r.db")
    app = app_on(store)
    store.failures = 2
    sleeps = Sleeps()
    out = app.invoke({"log": []}, config("t-retry", sleeps))
    assert out["log"] == ["worked"]
    assert sleeps.waits == list(COMMIT_RETRY_DELAYS[:2])
    (run,) = app.runs(thread_id="t-retry")
    assert run.status is RunStatus.COMPLETED
    app.close()


def test_a_commit_that_landed_before_its_answer_was_lost_is_not_a_lost_race(
    tmp_path: Path,
) -> None:
    store = Dropping(tmp_path / "r.db")
    app = app_on(store)
    store.failures, store.after_write = 1, True
    sleeps = Sleeps()
    out = app.invoke({"log": []}, config("t-landed", sleeps))
    assert out["log"] == ["worked"]  # the retry's stale answer is recognized as landed
    assert sleeps.waits == [COMMIT_RETRY_DELAYS[0]]
    (run,) = app.runs(thread_id="t-landed")
    assert run.status is RunStatus.COMPLETED
    app.close()


def test_a_store_that_stays_down_fails_the_step_after_every_try(tmp_path: Path) -> None:
    store = Dropping(tmp_path / "r.db")
    app = app_on(store)
    store.failures = 1_000
    sleeps = Sleeps()
    with pytest.raises(StorageError, match="The step was not recorded") as caught:
        app.invoke({"log": []}, config("t-down", sleeps))
    assert "connection to the database was lost" in str(caught.value)
    assert sleeps.waits == list(COMMIT_RETRY_DELAYS)  # a wait before each try after the first
    assert store.calls == len(COMMIT_RETRY_DELAYS) + 1
    app.close()
