"""Generated ids: ULID-shaped (48-bit ms time + 80 random bits, Crockford base32), monotonic."""

from __future__ import annotations

import threading
import time

import pytest

from oncegraph import ids

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def decode(text: str) -> int:
    value = 0
    for char in text:
        value = value * 32 + CROCKFORD.index(char)
    return value


def test_shape_prefix_and_alphabet() -> None:
    for make, prefix in (
        (ids.new_run_id, "run_"),
        (ids.new_checkpoint_id, "cp_"),
        (ids.new_message_id, "msg_"),
    ):
        value = make()
        assert value.startswith(prefix)
        body = value[len(prefix) :]
        assert len(body) == 26 and set(body) <= set(CROCKFORD)
        assert body[0] in "01234567"  # 128 bits: the first character holds 3


def test_time_part_is_the_creation_millisecond() -> None:
    before = time.time_ns() // 1_000_000
    value = decode(ids._ulid())
    after = time.time_ns() // 1_000_000
    assert value < 2**128
    assert before <= value >> 80 <= after


def test_ids_sort_in_creation_order_within_a_millisecond_and_across_threads() -> None:
    made: list[str] = []
    lock = threading.Lock()

    def burst() -> None:
        for _ in range(2000):
            with lock:  # record in the order the ids were made
                made.append(ids._ulid())

    workers = [threading.Thread(target=burst) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert len(set(made)) == len(made) == 8000
    assert made == sorted(made)
    assert [decode(x) for x in made] == sorted(decode(x) for x in made)


def test_a_forked_child_does_not_repeat_the_parents_random_bits() -> None:
    import os

    ids.new_run_id()  # the parent has random bytes read ahead
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next id, then exit at once
        os.close(read)
        time.sleep(0.002)  # a new millisecond: fresh random bits, not an increment
        os.write(write, ids.new_run_id().encode())
        os._exit(0)
    os.close(write)
    time.sleep(0.002)
    mine = ids.new_run_id()
    with os.fdopen(read) as pipe:
        theirs = pipe.read()
    os.waitpid(pid, 0)
    # the random part (last 16 characters = 80 bits) differs
    assert mine[-16:] != theirs[-16:]


def test_a_forked_child_does_not_count_up_from_the_parents_last_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Within one millisecond ids count up; a child forked in the parent's millisecond
    must not count up from the parent's last id (its next id would be the parent's)."""
    import os

    frozen = time.time_ns()
    monkeypatch.setattr(ids.time, "time_ns", lambda: frozen)  # one millisecond for both
    ids.new_run_id()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        os.write(write, ids.new_run_id().encode())
        os._exit(0)
    os.close(write)
    mine = ids.new_run_id()
    with os.fdopen(read) as pipe:
        theirs = pipe.read()
    os.waitpid(pid, 0)
    assert theirs and mine != theirs
