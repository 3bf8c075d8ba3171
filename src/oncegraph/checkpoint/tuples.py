"""A store's checkpoints as LangGraph's checkpointer API reads them: ``CheckpointTuple``
(``config``, ``checkpoint``, ``metadata``, ``parent_config``, ``pending_writes``).

This is a read-only view of oncegraph's records, made with no graph at hand:

* each checkpoint record is one tuple with the same ``config`` / ``parent_config`` /
  ``metadata`` as ``get_state_history`` shows (a run's input is also a tuple of its own
  before it, ``<id>.input``, as LangGraph lists it);
* ``checkpoint["channel_values"]`` is the state as stored (JSON), a log field (a reducer
  that appends, messages) as its list of entries;
* ``pending_writes`` are the task writes of the step after the checkpoint, as
  ``(task_id, channel, value)``: a finished task's update one write per field, a failed
  task's error on ``ERROR``, a question on ``INTERRUPT``, an answer on ``RESUME``;
* what a tool declared secret is masked, as in ``get_state_history`` (the masks of the
  graphs compiled on the store in this process; with none, every tool argument the
  thread's effects were called with);
* a listing with no ``checkpoint_ns`` in its config also lists the checkpoints of the
  subgraphs the thread ran (their ``checkpoint_ns`` names the subgraph node), newest
  first across all of them, as LangGraph's does.

Writing goes through the graph (``update_state``, ``invoke``), never through these
tuples: see :mod:`oncegraph.storage.saver_api`, whose ``get_tuple`` / ``list`` this
module installs on import (``import oncegraph`` imports it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any, NamedTuple

from oncegraph.constants import ERROR, INTERRUPT, RESUME
from oncegraph.runs.masking import Masker
from oncegraph.runs.paging import SHOW, STOP, Page
from oncegraph.runs.snapshots import iso_time, lg_config
from oncegraph.runtime.logkeys import counts, stored_channel
from oncegraph.runtime.stepevents import INPUT_SUFFIX, lg_metadata, task_id
from oncegraph.runtime.subgraph import child_thread
from oncegraph.state.channels import public
from oncegraph.storage.protocols import CheckpointStore
from oncegraph.storage.records import CheckpointRecord, TaskWrite, WriteKind
from oncegraph.storage.saver_api import read_tuples_with

CHECKPOINT_VERSION = 4
"""``checkpoint["v"]``: the version of LangGraph's checkpoint layout these follow."""


class CheckpointTuple(NamedTuple):
    """One checkpoint as LangGraph's checkpointer API gives it."""

    config: dict[str, Any]
    checkpoint: dict[str, Any]
    metadata: dict[str, Any]
    parent_config: dict[str, Any] | None = None
    pending_writes: list[tuple[str, str, Any]] | None = None


def _where(config: Mapping[str, Any] | None) -> tuple[str | None, str | None, str | None]:
    """``(thread_id, checkpoint_ns, checkpoint_id)`` of a LangGraph config (the keys in
    ``configurable`` or at the top level); ``checkpoint_ns`` None when not given."""
    conf = dict(config or {})
    conf.update(conf.get("configurable") or {})
    ns = conf.get("checkpoint_ns")
    thread = conf.get("thread_id")
    cp = conf.get("checkpoint_id")
    return (
        None if thread is None else str(thread),
        None if ns is None else str(ns),
        str(cp) if cp else None,
    )


class _Logs:
    """Log entries read once per stored log for a listing (a log is append-only and
    each checkpoint holds a prefix of it)."""

    def __init__(self, store: CheckpointStore) -> None:
        self.store = store
        self.read: dict[tuple[str, str], list[Any]] = {}

    async def values(self, cp: CheckpointRecord) -> dict[str, Any]:
        out = dict(cp.values)
        for channel, count in counts(cp.logs):
            key = (cp.thread_id, stored_channel(cp.logs, channel))
            entries = self.read.get(key)
            if entries is None or len(entries) < count:
                entries = await self.store.read_log(key[0], key[1], count)
                self.read[key] = entries
            out[channel] = list(entries[:count])
        return out


def pending_writes(cp_id: str, writes: list[TaskWrite]) -> list[tuple[str, str, Any]]:
    """The task writes of the step after checkpoint ``cp_id`` as LangGraph's
    ``(task_id, channel, value)``."""
    out: list[tuple[str, str, Any]] = []
    for w in writes:
        tid = task_id(cp_id, w.task)
        if w.kind == WriteKind.WRITES:
            update = w.value.get("update") if isinstance(w.value, Mapping) else None
            for key, value in (update or {}).items():
                out.append((tid, str(key), value))
        elif w.kind == WriteKind.ERROR and w.idx == 0:  # (1: a node's, for its handler)
            out.append((tid, ERROR, w.value))
        elif w.kind == WriteKind.INTERRUPT:
            out.append((tid, INTERRUPT, w.value))
        elif w.kind == WriteKind.RESUME:
            out.append((tid, RESUME, w.value))
    return out


_HIDDEN = frozenset({"answers"})
"""Metadata a subgraph's checkpoints keep for the run (answers handed down so far)."""


def _shown(metadata: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metadata.items() if k not in _HIDDEN}


def _checkpoint(cp_id: str, created_at: float, values: Any) -> dict[str, Any]:
    return {
        "v": CHECKPOINT_VERSION,
        "id": cp_id,
        "ts": iso_time(created_at),
        "channel_values": values,
        "channel_versions": {},
        "versions_seen": {},
        "updated_channels": None,
    }


async def tuples_of(
    store: CheckpointStore, cp: CheckpointRecord, thread: str, ns: str, logs: _Logs
) -> list[CheckpointTuple]:
    """The tuples of one record, newest first: the record itself and, for a run's input
    checkpoint at the top level, the input tuple LangGraph lists before it."""
    values = await logs.values(cp)
    writes = await store.get_task_writes(cp.thread_id, cp.checkpoint_id)
    parent = cp.parent_checkpoint_id
    source = str(cp.metadata.get("source", "loop"))
    split = source == "input"  # a subgraph's input too: LangGraph lists it
    if split:
        parent, source = cp.checkpoint_id + INPUT_SUFFIX, "loop"
    own = CheckpointTuple(
        config=lg_config(thread, cp.checkpoint_id, ns),
        checkpoint=_checkpoint(cp.checkpoint_id, cp.created_at, public(values)),
        metadata=lg_metadata(_shown(cp.metadata), cp.step + 1, source),
        parent_config=lg_config(thread, parent, ns) if parent else None,
        pending_writes=pending_writes(cp.checkpoint_id, writes),
    )
    if not split:
        return [own]
    before = cp.parent_checkpoint_id
    before_values: Any = {}
    if before is not None:
        found = await store.get_checkpoint(cp.thread_id, before)
        if found is not None:
            before_values = public(await logs.values(found))
    input_id = cp.checkpoint_id + INPUT_SUFFIX
    given = {k: v for k, v in _shown(cp.metadata).items() if k not in ("source", "step")}
    shown = lg_metadata(given, cp.step, "input")
    entry = CheckpointTuple(
        config=lg_config(thread, input_id, ns),
        checkpoint=_checkpoint(input_id, cp.created_at, before_values),
        metadata=shown,
        parent_config=lg_config(thread, before, ns) if before else None,
        pending_writes=[],
    )
    return [own, entry]


async def get_tuple(
    store: CheckpointStore, config: Mapping[str, Any] | None
) -> CheckpointTuple | None:
    """The tuple of ``config``'s checkpoint (its thread's head when it names none);
    None when there is no such checkpoint (or the namespace is a subgraph's)."""
    thread, ns, cp_id = _where(config)
    if thread is None or ns:
        return None
    await store.setup()
    want_input = cp_id is not None and cp_id.endswith(INPUT_SUFFIX)
    real = cp_id[: -len(INPUT_SUFFIX)] if cp_id and want_input else cp_id
    cp = await store.get_checkpoint(thread, real)
    if cp is None:
        return None
    found = await tuples_of(store, cp, thread, "", _Logs(store))
    return masked(await _masker(store, thread), found[-1] if want_input else found[0])


async def _subgraphs(
    store: CheckpointStore, cps: list[CheckpointRecord], seen: set[str]
) -> list[tuple[str, list[CheckpointRecord]]]:
    """``(namespace, records)`` of each subgraph thread the steps after ``cps`` ran
    (a call's own thread, or a stateful subgraph's shared one), found by their names."""
    out: list[tuple[str, list[CheckpointRecord]]] = []
    for cp in cps:
        for node in cp.next:
            for n in range(8):  # the n-th graph one task ran (bounded, it is a probe)
                places = [(child_thread(cp.thread_id, node, cp.checkpoint_id, n), node)]
                places.append((f"{cp.thread_id}|{node}{f'#{n}' if n else ''}", node))
                hit = False
                for where, ns in places:
                    if where in seen:
                        hit = True
                        continue
                    found = await store.list_checkpoints(where)
                    if found:
                        seen.add(where)
                        hit = True
                        out.append((f"{ns}:{task_id(cp.checkpoint_id, node)}", found))
                        out.extend(await _subgraphs(store, found, seen))
                if not hit:
                    break
    return out


async def list_tuples(
    store: CheckpointStore,
    config: Mapping[str, Any] | None,
    *,
    filter: Mapping[str, Any] | None = None,
    before: Mapping[str, Any] | None = None,
    limit: int | None = None,
) -> AsyncIterator[CheckpointTuple]:
    """The thread's tuples, newest first (see the module docstring); ``filter`` keeps
    those whose metadata has those values, ``before`` those older than that checkpoint,
    ``limit`` the first that many."""
    thread, ns, _ = _where(config)
    if thread is None:
        raise ValueError(
            "list() needs a thread: pass {'configurable': {'thread_id': ...}}; oncegraph "
            "lists one thread's checkpoints at a time"
        )
    if ns:
        return
    await store.setup()
    cps = await store.list_checkpoints(thread)
    logs = _Logs(store)
    found: list[CheckpointTuple] = []
    for cp in cps:
        found.extend(await tuples_of(store, cp, thread, "", logs))
    if ns is None:
        for child_ns, records in await _subgraphs(store, cps, set()):
            for cp in records:
                found.extend(await tuples_of(store, cp, thread, child_ns, logs))
        found.sort(key=lambda t: str(t.checkpoint["ts"] or ""), reverse=True)
    _, _, before_id = _where(before)
    page = Page(before=before_id, filter=filter, limit=limit)
    masker = await _masker(store, thread)
    for item in found:
        taken = page.take(item.checkpoint["id"], item.metadata)
        if taken == STOP:
            return
        if taken == SHOW:
            yield masked(masker, item)


async def _masker(store: CheckpointStore, thread: str) -> Masker:
    """What a view of ``thread`` must not show (tools' masked fields, guarantee 14): the
    masks of the graphs compiled on this store in this process, and the values the
    thread's effects declared secret; with no graph known, every tool argument of the
    thread's effects counts as secret (as a view without its app masks)."""
    masks: dict[str, tuple[str, ...]] = dict(getattr(store, "known_masks", None) or {})
    masker = Masker(masks)
    effects: Any = store
    for payload in await effects.list_effect_payloads(thread_ids=[thread], results=True):
        masker.learn_payload(payload)
        if not masks:
            masker.learn_arguments(payload)
    return masker


def masked(masker: Masker, item: CheckpointTuple) -> CheckpointTuple:
    """``item`` as a person may see it: every masked value masked."""
    masker.learn(item.checkpoint["channel_values"])
    if not masker.active:
        return item
    checkpoint = {
        **item.checkpoint,
        "channel_values": masker.value(item.checkpoint["channel_values"]),
    }
    writes = [(t, c, masker.value(v)) for t, c, v in item.pending_writes or ()]
    return item._replace(
        checkpoint=checkpoint, metadata=masker.value(item.metadata), pending_writes=writes
    )


# the stores' get_tuple / list read through these (the stores sit below this module)
read_tuples_with(get_tuple, list_tuples)

__all__ = ["CHECKPOINT_VERSION", "CheckpointTuple", "get_tuple", "list_tuples", "pending_writes"]
