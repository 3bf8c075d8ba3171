"""A thread's head, materialized: the checkpoint a run stands on and its full state.

Log channels (message lists) are stored once, append-only, so a checkpoint only names
how many entries of each log belong to its state; materializing folds those entries
back into values. The last head a process committed or loaded per thread is kept in
memory and reused while the store's thread row still names it (the thread row is read
every time: the cache never decides what the head is).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from oncegraph.errors import RunNotFoundError, corrupt
from oncegraph.graph.spec import GraphSpec
from oncegraph.runtime.engine import Head, empty_head
from oncegraph.runtime.logkeys import stored_channel
from oncegraph.storage.protocols import CheckpointStore
from oncegraph.storage.records import CheckpointRecord, ThreadRecord

_CACHE_SIZE = 1024


class Heads:
    """Loads and remembers the heads of one graph's threads in one store."""

    def __init__(self, spec: GraphSpec, store: CheckpointStore) -> None:
        self.spec = spec
        self.store = store
        self._cache: OrderedDict[str, Head] = OrderedDict()

    def remember(self, head: Head) -> None:
        tid = head.checkpoint.thread_id
        self._cache[tid] = head
        self._cache.move_to_end(tid)
        while len(self._cache) > _CACHE_SIZE:
            self._cache.popitem(last=False)

    async def load(self, thread_id: str) -> Head:
        """The thread's head; the in-process copy is used when still current."""
        return await self.at(thread_id, await self.store.get_thread(thread_id))

    async def at(self, thread_id: str, thread: ThreadRecord | None) -> Head:
        """The head ``thread`` (the thread's row, just read; None: it has none) names."""
        if thread is None or thread.head_checkpoint_id is None:
            return empty_head(self.spec, thread_id)
        cached = self._cache.get(thread_id)
        if cached is not None and cached.checkpoint.checkpoint_id == thread.head_checkpoint_id:
            return cached
        cp = await self.store.get_checkpoint(thread_id, thread.head_checkpoint_id)
        if cp is None:
            raise RunNotFoundError(f"thread {thread_id!r} points to a missing checkpoint")
        head = Head(cp, await self.materialize(cp))
        self.remember(head)
        return head

    async def materialize(
        self, cp: CheckpointRecord, logs: dict[str, list[Any]] | None = None
    ) -> dict[str, Any]:
        """Every channel's value at ``cp``, log channels folded from their entries."""
        return (await self.materialize_page([cp], logs))[0]

    async def materialize_page(
        self, cps: Sequence[CheckpointRecord], logs: dict[str, list[Any]] | None = None
    ) -> list[dict[str, Any]]:
        """The values of each of ``cps`` (checkpoints of one thread, in any order), with
        each log folded once: the checkpoints are taken in the order of their log
        prefixes, each extending the value of the one before by its own entries (a page
        of a long chat's history folds its 8,000 messages once, not once per checkpoint).

        ``logs`` is a cache of one thread's log entries (by stored log) shared by calls
        that materialize several of its checkpoints (a history): a log is append-only and
        a checkpoint holds a prefix of it, so the entries are read once and sliced, never
        read and parsed again per checkpoint.

        A stored value its declared type cannot read back is a ``CorruptRecordError``
        naming the checkpoint, thread and run (nothing is changed or re-run)."""
        if not cps:
            return []
        schema = self.spec.schema
        out: list[dict[str, Any]] = []
        for cp in cps:
            values = schema.initial()
            try:
                values.update(schema.decode_values(cp.values))  # typed again by their types
            except (ValueError, TypeError, KeyError) as exc:
                raise _corrupt(cp, "oncegraph_checkpoints", cp.checkpoint_id, exc) from exc
            out.append(values)
        for channel in schema.log_channels():
            fold = schema.channel(channel).fold
            # a thread's forks keep their entries in logs of their own (runtime.logkeys):
            # each stored log is folded once for the checkpoints that stand on it
            by_log: dict[str, list[int]] = {}
            for i, cp in enumerate(cps):
                by_log.setdefault(stored_channel(cp.logs, channel), []).append(i)
            for stored, members in by_log.items():
                order = sorted(members, key=lambda i: cps[i].logs.get(channel, 0))
                last = cps[order[-1]]
                end = last.logs.get(channel, 0)
                entries = await self._entries(last.thread_id, stored, end, logs)
                value: Any = None
                done = 0
                for i in order:
                    cp = cps[i]
                    end = cp.logs.get(channel, 0)
                    try:
                        decoded = schema.decode_entries(channel, entries[done:end])
                        value = fold(decoded, value)  # a new value: no two snapshots share one
                    except (ValueError, TypeError, KeyError) as exc:
                        raise _corrupt(cp, "oncegraph_log", stored, exc) from exc
                    done = end
                    out[i][channel] = value
        return out

    async def _entries(
        self, thread_id: str, channel: str, end: int, logs: dict[str, list[Any]] | None
    ) -> list[Any]:
        if not end:
            return []
        if logs is None:
            return await self.store.read_log(thread_id, channel, end)
        cached = logs.get(channel)
        if cached is None or len(cached) < end:
            cached = logs[channel] = await self.store.read_log(thread_id, channel, end)
        return cached[:end]


def _corrupt(cp: CheckpointRecord, table: str, key: str, exc: Exception) -> Exception:
    return corrupt(
        table,
        key,
        f"a stored value does not fit the state schema ({type(exc).__name__}: {exc})",
        thread_id=cp.thread_id,
        run_id=cp.run_id,
    )


__all__ = ["Heads"]
