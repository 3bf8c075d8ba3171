"""Where a log channel's entries are stored: one append-only log per branch of a thread.

A checkpoint names how many entries of each log channel belong to its state
(``CheckpointRecord.logs``: ``{"messages": 12}``), and the entries are stored once per
thread, numbered from 0. A fork on the SAME thread (LangGraph's time travel: a new run
from an earlier checkpoint, which becomes the thread's head) cannot go on appending to
that log: the entries after its fork point belong to the other branch, and log entries
are never rewritten. So a fork starts a branch of its own: its checkpoint carries a
marker ``"~messages": n`` next to the count, its entries live under the stored channel
``messages~n`` (the fork's first entries are a copy of the prefix it stands on), and
every checkpoint after it inherits the marker with the counts.

These helpers are the only place that knows the marker's spelling; a checkpoint without
one stores its entries under the channel's own name, as it always did.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

MARK = "~"
"""A branch marker's prefix in ``CheckpointRecord.logs`` (no state field starts with it)."""


def stored_channel(logs: Mapping[str, int], channel: str) -> str:
    """The stored log ``channel``'s entries of a checkpoint with ``logs`` are in."""
    branch = logs.get(MARK + channel)
    return channel if not branch else f"{channel}{MARK}{branch}"


def counts(logs: Mapping[str, int]) -> Iterator[tuple[str, int]]:
    """``(channel, entry count)`` of each log channel, branch markers left out."""
    for channel, count in logs.items():
        if not channel.startswith(MARK):
            yield channel, count


def branched(logs: Mapping[str, int], branch: int) -> dict[str, int]:
    """``logs`` of a fork that starts branch ``branch`` (a number no other fork of the
    thread used, e.g. the thread version the fork creates) for each of its channels."""
    out = dict(counts(logs))
    out.update({MARK + channel: branch for channel in list(out)})
    return out


__all__ = ["MARK", "branched", "counts", "stored_channel"]
