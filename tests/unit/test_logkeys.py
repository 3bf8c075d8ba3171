"""A fork on the same thread keeps its log entries apart (oncegraph.runtime.logkeys)."""

from __future__ import annotations

from oncegraph.runtime import logkeys


def test_a_plain_checkpoint_stores_its_entries_under_the_channel() -> None:
    logs = {"messages": 3, "events": 0}
    assert logkeys.stored_channel(logs, "messages") == "messages"
    assert list(logkeys.counts(logs)) == [("messages", 3), ("events", 0)]


def test_a_fork_starts_a_branch_of_each_log_and_keeps_the_counts() -> None:
    forked = logkeys.branched({"messages": 3, "events": 1}, 7)
    assert list(logkeys.counts(forked)) == [("messages", 3), ("events", 1)]
    assert logkeys.stored_channel(forked, "messages") == "messages~7"
    assert logkeys.stored_channel(forked, "events") == "events~7"
    # a fork of a fork starts another branch; the counts come along unchanged
    again = logkeys.branched(forked, 9)
    assert logkeys.stored_channel(again, "messages") == "messages~9"
    assert dict(logkeys.counts(again)) == {"messages": 3, "events": 1}
