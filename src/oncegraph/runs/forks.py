"""The first checkpoint of a run made from another run's checkpoint (guarantee 9).

A fork copies a checkpoint's state (values, and the log entries up to its counts) into a
new checkpoint of the new run, optionally with a patch applied as if a node (``as_node``)
had written it. Two places it can land:

* a NEW thread (:meth:`Replays.replay` / :meth:`Replays.branch`): the checkpoint is the
  thread's first, its logs plain (``thread=None``);
* the SAME thread (time travel, :mod:`oncegraph.runs.timetravel`): the checkpoint is a
  child of the one it forks (or, for ``__copy__``, its sibling) and becomes the thread's
  head; its logs start a branch of their own (:mod:`oncegraph.runtime.logkeys`), so the
  other branch's entries are never rewritten.

Nothing is written here: the caller commits the checkpoint, the log entries and the new
run in one transaction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from oncegraph import _json
from oncegraph.graph.constants import START
from oncegraph.graph.spec import GraphSpec
from oncegraph.ids import new_checkpoint_id
from oncegraph.runtime import logkeys
from oncegraph.runtime.engine import TaskResult, route
from oncegraph.runtime.heads import Heads
from oncegraph.runtime.routers import routed
from oncegraph.runtime.sends import encode_send
from oncegraph.runtime.stepevents import INPUT_SUFFIX
from oncegraph.runtime.stepresults import RESULTS, encode_results
from oncegraph.state.channels import apply_writes
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import CheckpointRecord, LogEntry, RunRecord, ThreadRecord

TIME_TRAVEL = "time_travel"
"""The ``launch_reason`` of a run that time travel made."""

COPY = "__copy__"
"""LangGraph's ``as_node`` for an unchanged copy of a checkpoint."""

# What a checkpoint's metadata says about the step after it (sends' payloads, waiting
# edges' progress): kept by a fork that runs the same next nodes.
_NEXT_STEP_KEYS = ("sends", "joins", "deferred")


@dataclass(frozen=True, slots=True)
class StateChange:
    """One channel a branch's patch changed: values as stored (JSON); for a log channel
    (a message list), ``before`` is the entry count and ``after`` the entries added."""

    channel: str
    before: Any
    after: Any


@dataclass(frozen=True, slots=True)
class Fork:
    """What ``update_state`` made: the run (``paused``) and its head checkpoint."""

    run: RunRecord
    checkpoint_id: str
    diff: tuple[StateChange, ...]

    @property
    def config(self) -> dict[str, Any]:
        """LangGraph's answer: the config naming the new checkpoint of the same thread."""
        return {
            "configurable": {
                "thread_id": self.run.thread_id,
                "checkpoint_ns": "",
                "checkpoint_id": self.checkpoint_id,
            }
        }


@dataclass(frozen=True, slots=True)
class Forked:
    """A fork's checkpoint and log entries (to commit), and the diff its patch made."""

    checkpoint: CheckpointRecord
    log: tuple[LogEntry, ...]
    diff: tuple[StateChange, ...]


async def fork(
    spec: GraphSpec,
    heads: Heads,
    store: Checkpointer,
    cp: CheckpointRecord,
    run: RunRecord,
    *,
    source: str,
    patch: Mapping[str, Any] | None = None,
    as_node: str | None = None,
    thread: ThreadRecord | None = None,
    sibling: bool = False,
    results: Sequence[TaskResult] = (),
) -> Forked:
    """The fork of ``cp`` for ``run`` (see the module docstring). ``thread``: the row of
    ``cp``'s own thread for a fork on the same thread (None: ``run``'s new thread);
    ``sibling``: the fork's parent is ``cp``'s parent (LangGraph's ``__copy__``);
    ``results``: the writes of several nodes (and where they route, ``Send`` included)
    as one step, instead of ``patch`` / ``as_node``."""
    branch = None if thread is None else thread.version + 1  # unique on the thread
    log: list[LogEntry] = []
    logs = dict(logkeys.counts(cp.logs)) if branch is None else logkeys.branched(cp.logs, branch)
    for channel, count in logkeys.counts(cp.logs):  # the prefix it stands on, copied
        source_log = logkeys.stored_channel(cp.logs, channel)
        entries = await store.read_log(cp.thread_id, source_log, count) if count else []
        target = logkeys.stored_channel(logs, channel)
        log.extend(LogEntry(target, seq, value) for seq, value in enumerate(entries))
    stored, nxt = dict(cp.values), cp.next
    diff: list[StateChange] = []
    sends: list[Any] = []
    waiting: tuple[str, ...] = ()  # deferred nodes still waiting (add_node(defer=True))
    if as_node is not None and not results:
        results = (TaskResult(as_node, spec.schema.to_update(as_node, dict(patch or {}))),)
    if patch or results:
        values = await heads.materialize(cp)
        if results:
            pairs = [(r.node, r.update) for r in results]
        else:  # a patch as input: the same next step
            pairs = [("patch", spec.schema.to_update(START, dict(patch or {})))]
        writes = apply_writes(spec.schema, values, pairs)
        for channel, value in writes.stored.items():
            if channel in writes.changed:
                before = stored.get(channel)
                if _json.canonical(before) != _json.canonical(value):
                    diff.append(StateChange(channel, before, value))
                stored[channel] = value
        added: dict[str, list[Any]] = {}
        for channel, value in writes.stored_log:
            log.append(LogEntry(logkeys.stored_channel(logs, channel), logs.get(channel, 0), value))
            logs[channel] = logs.get(channel, 0) + 1
            added.setdefault(channel, []).append(value)
        diff.extend(StateChange(c, cp.logs.get(c, 0), entries) for c, entries in added.items())
        if results:
            # the async routers of the nodes written as, awaited first (runtime.routers)
            picked = await routed(spec, writes.values, results, None)
            joins, deferred = cp.metadata.get("joins"), cp.metadata.get("deferred")
            routes = route(
                spec, writes.values, results, joins=joins, routed=picked, deferred=deferred
            )
            nxt = (*routes.pulled, *(send.node for send in routes.sends))
            sends = [encode_send(spec, send) for send in routes.sends]
            waiting = routes.deferred
    metadata: dict[str, Any] = {
        "source": source,
        "forked_from": {
            "thread_id": cp.thread_id,
            "checkpoint_id": cp.checkpoint_id,
            "run_id": cp.run_id,
        },
    }
    if sibling and cp.metadata.get("source") == "input":
        # a copy of a run's input checkpoint stands, as it does, after that run's input
        # entry in the history (runs/snapshots.py)
        metadata["forked_from"]["entry"] = cp.checkpoint_id + INPUT_SUFFIX
    if results:
        metadata["writes"] = [r.node for r in results]
        kept = encode_results(spec.schema, results)
        if kept:  # shown as the results of the tasks of the checkpoint it stands on
            metadata[RESULTS] = kept
        if sends:
            metadata["sends"] = sends
        if waiting:
            metadata["deferred"] = list(waiting)
    else:  # the same next step: what it needs to know comes along
        metadata.update({k: cp.metadata[k] for k in _NEXT_STEP_KEYS if k in cp.metadata})
    if thread is None:
        parent, version = None, 1
    else:
        parent = cp.parent_checkpoint_id if sibling else cp.checkpoint_id
        version = thread.version + 1
    checkpoint = CheckpointRecord(
        checkpoint_id=new_checkpoint_id(),
        thread_id=run.thread_id,
        run_id=run.run_id,
        step=cp.step + 1 if results else cp.step,  # a node's write is a step
        version=version,
        parent_checkpoint_id=parent,
        values=stored,
        logs=logs,
        next=tuple(nxt),
        metadata=metadata,
    )
    return Forked(checkpoint, tuple(log), tuple(diff))


def last_writer(spec: GraphSpec, cp: CheckpointRecord) -> str | None:
    """The node LangGraph's ``update_state`` writes as when it is not told: the graph's
    only node, or the one node whose writes made ``cp``; None when it cannot tell (the
    input checkpoint, a step of several nodes): the patch is then applied as input."""
    if len(spec.nodes) == 1:
        return next(iter(spec.nodes))
    writes = [w for w in cp.metadata.get("writes", ()) if w in spec.nodes]
    return writes[0] if len(set(writes)) == 1 else None


__all__ = ["Forked", "StateChange", "fork", "last_writer"]
