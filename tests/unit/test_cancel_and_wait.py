"""cancel_and_wait: a task that swallowed its cancellation is cancelled again."""

from __future__ import annotations

import asyncio

from oncegraph._cancel import cancel_and_wait


async def _stubborn(swallow: int, steps: list[str]) -> None:
    """Swallows the first ``swallow`` cancellations (as Python 3.11's ``wait_for`` can
    when its inner awaitable ends at the same moment), then waits for a long time."""
    for _ in range(swallow):
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            steps.append("swallowed")
    steps.append("waiting")
    await asyncio.sleep(30)


async def test_one_cancel_is_not_enough_for_a_task_that_swallows_it() -> None:
    steps: list[str] = []
    task = asyncio.ensure_future(_stubborn(1, steps))
    await asyncio.sleep(0)
    task.cancel()
    await asyncio.wait({task}, timeout=0.3)
    assert not task.done() and steps == ["swallowed", "waiting"]
    await cancel_and_wait(task)
    assert task.cancelled()


async def test_cancel_and_wait_ends_a_task_that_swallowed_several_cancellations() -> None:
    steps: list[str] = []
    task = asyncio.ensure_future(_stubborn(3, steps))
    await asyncio.sleep(0)
    await asyncio.wait_for(cancel_and_wait(task, again=0.01), timeout=5)
    assert task.cancelled() and steps == ["swallowed"] * 3 + ["waiting"]


async def test_an_error_the_task_raised_while_stopping_is_dropped_not_reported() -> None:
    async def fails_on_cancel() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            raise RuntimeError("cleanup failed") from None

    task = asyncio.ensure_future(fails_on_cancel())
    await asyncio.sleep(0)
    await cancel_and_wait(task)
    assert isinstance(task.exception(), RuntimeError)


async def test_a_finished_task_is_left_alone() -> None:
    task = asyncio.ensure_future(asyncio.sleep(0, "done"))
    await task
    await cancel_and_wait(task)
    assert task.result() == "done"
