"""The group-commit refusal scenario both SQL stores' group-commit tests run.

Five steps committed together: ``x_wins``; ``x_loses`` (same thread and expected
version, behind it: a lost compare-and-swap); ``y_ok``; ``z_fenced_out`` (its run's
token moved on: a lost fence); and ``duplicate`` (x's next step reusing x_wins'
checkpoint id: its CAS passes, its insert fails after its thread update). Each refused
step must roll back alone, writing nothing, while the others commit.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from oncegraph.errors import LeaseLostError, StaleStateError, StorageError
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import (
    CheckpointRecord,
    EffectRecord,
    EffectStatus,
    LogEntry,
    RunStatus,
    StepCommit,
)
from oncegraph.testing.conformance import make_checkpoint, make_effect, start_thread


def step(thread: str, run: str, parent: str, expected: int, **more: Any) -> StepCommit:
    """A thread's next step after version ``expected``."""
    cp = make_checkpoint(thread, run, expected + 1, parent=parent)
    return StepCommit(thread_id=thread, expected_version=expected, checkpoint=cp, **more)


@dataclass(frozen=True)
class Refusals:
    x: str
    run_x: str
    y: str
    run_y: str
    z: str
    z1: CheckpointRecord
    x_wins: StepCommit
    x_loses: StepCommit
    lost_effect: EffectRecord
    y_ok: StepCommit
    z_fenced_out: StepCommit
    duplicate: StepCommit

    @property
    def steps(self) -> list[StepCommit]:
        """In request order."""
        return [self.x_wins, self.x_loses, self.y_ok, self.z_fenced_out, self.duplicate]


async def refusals(store: Checkpointer) -> Refusals:
    """Three threads at version 1 (z's run fenced to token 1) and the five steps."""
    x, run_x, x1 = await start_thread(store)
    y, run_y, y1 = await start_thread(store)
    z, run_z, z1 = await start_thread(store)
    await store.fence_run(run_z, expected_token=0, owner="me")  # z's token is 1 now
    x_wins = step(
        x, run_x, x1.checkpoint_id, 1,
        log=[LogEntry("messages", 0, {"role": "ai", "content": "x wins"})],
    )
    lost_effect = make_effect(run_x, x, status=EffectStatus.COMPLETED)
    x_loses = step(
        x, run_x, x1.checkpoint_id, 1,
        log=[LogEntry("messages", 0, {"role": "ai", "content": "x loses"})],
        effects=[lost_effect],
        run_status=RunStatus.COMPLETED,
    )
    duplicate = StepCommit(
        thread_id=x,
        expected_version=2,
        checkpoint=dataclasses.replace(
            make_checkpoint(x, run_x, 3, parent=x_wins.checkpoint.checkpoint_id),
            checkpoint_id=x_wins.checkpoint.checkpoint_id,
        ),
    )
    return Refusals(
        x, run_x, y, run_y, z, z1, x_wins, x_loses, lost_effect,
        step(y, run_y, y1.checkpoint_id, 1, run_status=RunStatus.COMPLETED),
        step(z, run_z, z1.checkpoint_id, 1, fence=0),
        duplicate,
    )


def check_answers(results: list[Any]) -> None:
    """Each step's own answer, in request order."""
    assert results[0] == 0 and results[2] == 0  # committed (no planned intents)
    assert isinstance(results[1], StaleStateError)
    assert isinstance(results[3], LeaseLostError)
    assert isinstance(results[4], StorageError)
    assert "nothing was written" in str(results[4])


def heads(r: Refusals) -> list[tuple[str, int, str]]:
    """The thread rows the winners leave: (thread, version, head), sorted."""
    return sorted(
        [(r.x, 2, r.x_wins.checkpoint.checkpoint_id), (r.y, 2, r.y_ok.checkpoint.checkpoint_id),
         (r.z, 1, r.z1.checkpoint_id)]
    )


async def check_refused_wrote_nothing(store: Checkpointer, r: Refusals) -> None:
    """What the winners wrote is there; nothing of the refused steps is."""
    assert await store.read_log(r.x, "messages", 10) == [{"role": "ai", "content": "x wins"}]
    run = await store.get_run(r.run_y)
    assert run is not None and run.status is RunStatus.COMPLETED
    ids = [c.checkpoint_id for c in await store.list_checkpoints(r.x)]
    assert r.x_loses.checkpoint.checkpoint_id not in ids
    assert await store.get_effect(r.lost_effect.effect_id) is None
    run = await store.get_run(r.run_x)
    assert run is not None and run.status is RunStatus.RUNNING
    assert r.z_fenced_out.checkpoint.checkpoint_id not in [
        c.checkpoint_id for c in await store.list_checkpoints(r.z)
    ]
    thread = await store.get_thread(r.x)
    assert thread is not None and thread.version == 2
