"""wait_done: one future waited for under a timeout, never cancelled by the wait."""

from __future__ import annotations

import asyncio

from oncegraph._waiting import wait_done


async def test_a_future_that_ends_in_time_is_done() -> None:
    loop = asyncio.get_running_loop()
    future: asyncio.Future[int] = loop.create_future()
    loop.call_later(0.01, future.set_result, 7)
    assert await wait_done(future, 5) is True
    assert future.result() == 7


async def test_a_done_future_answers_at_once_and_no_timeout_waits_for_ever() -> None:
    loop = asyncio.get_running_loop()
    future: asyncio.Future[int] = loop.create_future()
    future.set_result(1)
    assert await wait_done(future, 0) is True
    later: asyncio.Future[int] = loop.create_future()
    loop.call_later(0.05, later.set_result, 2)
    assert await wait_done(later, None) is True


async def test_a_timeout_leaves_the_future_running_and_unwatched() -> None:
    loop = asyncio.get_running_loop()
    future: asyncio.Future[int] = loop.create_future()
    started = loop.time()
    assert await wait_done(future, 0.05) is False
    assert loop.time() - started >= 0.04
    assert not future.done() and not future.cancelled()
    future.set_result(3)  # its waiter's callback was removed: nothing left to wake
    await asyncio.sleep(0)
    assert future.result() == 3


async def test_cancelling_the_wait_does_not_cancel_the_future() -> None:
    loop = asyncio.get_running_loop()
    future: asyncio.Future[int] = loop.create_future()
    waiting = asyncio.ensure_future(wait_done(future, 30))
    await asyncio.sleep(0.01)
    waiting.cancel()
    await asyncio.wait({waiting})
    assert waiting.cancelled()
    assert not future.done()
    future.set_result(4)
    assert future.result() == 4


async def test_a_task_is_waited_for_like_a_future() -> None:
    task = asyncio.ensure_future(asyncio.sleep(0.01, result="slept"))
    assert await wait_done(task, 5) is True
    assert task.result() == "slept"
