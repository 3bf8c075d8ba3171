"""Typed ids and their generators.

One id per role (docs/ledger.md): ``thread_id`` connects a conversation,
``run_id`` one graph execution, ``checkpoint_id`` a saved point, ``command_id`` the
agent's intent, ``effect_id`` every attempt at one external result.

Generated ids are ULID-shaped (48-bit millisecond time + 80 random bits, Crockford
base32) behind a short prefix, so they sort by creation time within a process and
across processes to the millisecond.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from typing import NewType

ThreadId = NewType("ThreadId", str)
RunId = NewType("RunId", str)
CheckpointId = NewType("CheckpointId", str)
CommandId = NewType("CommandId", str)
EffectId = NewType("EffectId", str)

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_PAIRS = [a + b for a in _ALPHABET for b in _ALPHABET]  # 10 bits -> 2 characters
_lock = threading.Lock()
_last_ms = 0
_last_rand = 0


_RANDOM_CHUNK = 4000  # random bytes read at once: one getrandom per 400 new milliseconds
_random = b""
_random_at = 0


def _random10() -> bytes:  # with _lock held
    """10 bytes from the OS's random source, read in chunks (a syscall per id costs more
    than the rest of the id)."""
    global _random, _random_at
    if _random_at + 10 > len(_random):
        _random, _random_at = os.urandom(_RANDOM_CHUNK), 0
    _random_at += 10
    return _random[_random_at - 10 : _random_at]


def _forget_random() -> None:
    """In a forked child: never reuse the parent's unread random bytes, nor count up from
    its last id (within the parent's last millisecond the child's next id would be the
    parent's next one): the child's first id draws random bits of its own."""
    global _random, _random_at, _last_ms, _last_rand
    _random, _random_at = b"", 0
    _last_ms, _last_rand = -1, 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_random)


_time_ms = -1  # the millisecond whose 10 characters _time_text holds
_time_text = ""
_head_of = -1  # rand >> 10 for which _head holds the id's first 24 characters
_head = ""


def _ulid() -> str:
    """A monotonic ULID string: later calls in this process never sort before earlier ones.

    128 bits in 26 characters of 5 bits: the first 10 characters are the 48-bit
    millisecond (after 2 zero bits), the last 16 the 80 random bits; the time's text is
    kept until the millisecond changes, and the random bits are spelled as two 40-bit
    halves (small ints, cheaper to shift than one of 80 bits). Ids made within one
    millisecond count up from its random start, so the first 24 characters (all but the
    last 10 bits) are kept too and only the last two are spelled again."""
    global _last_ms, _last_rand, _time_ms, _time_text, _head_of, _head
    with _lock:
        ms = time.time_ns() // 1_000_000
        if ms <= _last_ms:
            ms = _last_ms
            rand = _last_rand + 1
        else:
            rand = int.from_bytes(_random10(), "big") & ~(1 << 79)  # room to increment
        _last_ms, _last_rand = ms, rand
        pairs = _PAIRS
        if rand >> 10 == _head_of and ms == _time_ms:
            return _head + pairs[rand & 1023]
        if ms != _time_ms:
            _time_text = "".join([pairs[(ms >> s) & 1023] for s in (40, 30, 20, 10, 0)])
            _time_ms = ms
        high, low = rand >> 40, rand & 0xFFFFFFFFFF
        head = (
            _time_text
            + pairs[high >> 30]
            + pairs[(high >> 20) & 1023]
            + pairs[(high >> 10) & 1023]
            + pairs[high & 1023]
            + pairs[low >> 30]
            + pairs[(low >> 20) & 1023]
            + pairs[(low >> 10) & 1023]
        )
        _head, _head_of = head, rand >> 10
    return head + pairs[low & 1023]


def new_run_id() -> RunId:
    return RunId("run_" + _ulid())


def new_checkpoint_id() -> CheckpointId:
    return CheckpointId("cp_" + _ulid())


def new_message_id() -> str:
    return "msg_" + _ulid()


def derived_message_id(run_id: str, node: str, step: int, n: int) -> str:
    """The id of the ``n``-th id-less message task ``node`` returned at ``step`` of run
    ``run_id``: a digest of those four, so a re-run of the task (a resume, a retry, a
    recorded replay keyed by the original run) gives its messages the same ids, and the
    tool calls they carry find their records."""
    raw = f"{run_id}:{node}:{step}:{n}".encode("utf-8", "surrogatepass")
    return "msg_" + hashlib.sha256(raw).hexdigest()[:26]


def new_task_id() -> str:
    return "task_" + _ulid()


def new_audit_id() -> str:
    return "aud_" + _ulid()
