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


async def test_a_shorter_timeout_started_later_times_out_first() -> None:
    """Waits share one timer per loop: a wait whose deadline comes before the one the
    timer is set for still times out on time, and the longer one after it."""
    loop = asyncio.get_running_loop()
    slow: asyncio.Future[int] = loop.create_future()
    fast: asyncio.Future[int] = loop.create_future()
    started = loop.time()
    long_wait = asyncio.ensure_future(wait_done(slow, 0.3))
    await asyncio.sleep(0)
    assert await wait_done(fast, 0.05) is False
    short = loop.time() - started
    assert 0.04 <= short < 0.3 and not long_wait.done()
    assert await long_wait is False
    assert loop.time() - started >= 0.29
    assert not slow.done() and not fast.done()


async def test_many_waits_each_end_with_their_future_or_their_timeout() -> None:
    """Waits that end early (most of them, as calls do) leave the others' timeouts
    as they were, however many there were."""
    loop = asyncio.get_running_loop()
    quick = [loop.create_future() for _ in range(600)]
    never = [loop.create_future() for _ in range(3)]
    started = loop.time()
    waits = [asyncio.ensure_future(wait_done(f, 0.1 + i * 0.01)) for i, f in enumerate(never)]
    for i, future in enumerate(quick):
        loop.call_soon(future.set_result, i)
        assert await wait_done(future, 0.05) is True
    assert await asyncio.gather(*waits) == [False, False, False]
    assert loop.time() - started >= 0.11
    assert all(not f.done() for f in never)
    # a wait started after all that still times out
    again: asyncio.Future[int] = loop.create_future()
    assert await wait_done(again, 0.02) is False


async def test_a_cancelled_wait_does_not_wake_the_next_one_early() -> None:
    loop = asyncio.get_running_loop()
    first: asyncio.Future[int] = loop.create_future()
    second: asyncio.Future[int] = loop.create_future()
    waiting = asyncio.ensure_future(wait_done(first, 0.02))
    await asyncio.sleep(0)
    waiting.cancel()
    await asyncio.wait({waiting})
    started = loop.time()
    assert await wait_done(second, 0.1) is False
    assert loop.time() - started >= 0.09
    assert not first.done()


async def test_a_timeout_of_zero_looks_once_more() -> None:
    loop = asyncio.get_running_loop()
    future: asyncio.Future[int] = loop.create_future()
    loop.call_soon(future.set_result, 5)
    assert await wait_done(future, 0) is True  # set before the timer's turn comes
    pending: asyncio.Future[int] = loop.create_future()
    assert await wait_done(pending, 0) is False
