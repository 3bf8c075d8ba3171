"""LangGraph's ``durability="exit"``, kept safe: commit as we go, fold at exit.

LangGraph writes a run's checkpoint after every step (``"sync"``, ``"async"``) or only
when the run exits (``"exit"``: finished, interrupted or failed), so a crash under
``"exit"`` loses the run's progress and runs its finished nodes, tool calls included,
again. oncegraph commits every step before the next whatever the durability: that commit
is what a resume goes on from and what a recorded call's result is kept with. Under
``"exit"`` a call (an ``invoke``, a resume) then FOLDS its step checkpoints when it
exits, so the thread's history reads as LangGraph's:

* every checkpoint the call commits names as its parent the checkpoint the call started
  from (its *base*), and keeps the base's version in its metadata (:data:`EXIT_KEY`),
  so whichever of them is the last, it already reads as the exit checkpoint; a run's
  input checkpoint is no separate input entry then (LangGraph writes none under
  ``"exit"``);
* when the call exits (its last step committed, an interrupt or a breakpoint asked, the
  run failed or parked), the store's prune folds the call's other checkpoints away
  (:meth:`~oncegraph.storage.protocols.Pruner.prune` with ``run_id=``): the head stays
  with its task writes (the interrupt's question, a failed task's error, a finished
  sibling's writes), which is all a resume starts from. Effect records, the audit log,
  the run record and the channel logs are never touched.

A crash before the fold leaves the per-step checkpoints, and the resume goes on from the
last one, sending nothing recorded again; its checkpoints keep the crashed call's base,
so the fold at its eventual exit folds the crashed call's steps too. A call that starts
on the checkpoint a call of the same run EXITED on (an answer to its interrupt, a retry
of its failure: the head holds an interrupt or an error) starts a new fold there, as
LangGraph's next call starts from the exit checkpoint.

A subgraph's driver inherits the run's durability (its config is the run's) and folds
its own thread when its call exits; a finished call then leaves its last checkpoint,
which the parent's history no longer lists once the parent's step checkpoints are
folded.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence

from oncegraph.errors import StorageError
from oncegraph.runtime.engine import Head
from oncegraph.storage.protocols import Checkpointer, Pruner
from oncegraph.storage.records import CheckpointRecord, TaskWrite, WriteKind

log = logging.getLogger("oncegraph.driver")

EXIT = "exit"
EXIT_KEY = "exit"
"""Checkpoint metadata of a call under ``durability="exit"``: the version of the
checkpoint the call started from (0: none). The checkpoint's parent is that checkpoint."""


@dataclasses.dataclass(frozen=True, slots=True)
class Base:
    """The checkpoint a call under ``"exit"`` started from: its id (None: the thread
    had none) and its version (0: none)."""

    checkpoint_id: str | None
    version: int


def new_call(cp: CheckpointRecord) -> Base:
    """The base of a call that gives new input on ``cp`` (the thread's head)."""
    return Base(cp.checkpoint_id or None, cp.version if cp.checkpoint_id else 0)


def going_on(cp: CheckpointRecord, writes: Sequence[TaskWrite], run_id: str) -> Base:
    """The base of a call that goes on from ``cp`` with no new input: the crashed
    call's base when ``cp`` is a step of an unfinished call of this run under ``"exit"``
    (no question asked and no error kept on it), else ``cp`` itself."""
    stored = cp.metadata.get(EXIT_KEY)
    exited = any(w.kind in (WriteKind.INTERRUPT, WriteKind.ERROR) for w in writes)
    if cp.run_id == run_id and isinstance(stored, int) and cp.next and not exited:
        return Base(cp.parent_checkpoint_id, stored)
    return new_call(cp)


def marked(head: Head, base: Base) -> Head:
    """``head`` (about to be committed) as a step of a call under ``"exit"``: its parent
    the base, the base's version in its metadata, and a run's input checkpoint shown as
    the loop's first (LangGraph lists no input checkpoint under ``"exit"``)."""
    cp = head.checkpoint
    metadata = dict(cp.metadata)
    metadata[EXIT_KEY] = base.version
    if metadata.get("source") == "input":
        metadata["source"] = "loop"
    checkpoint = dataclasses.replace(cp, parent_checkpoint_id=base.checkpoint_id, metadata=metadata)
    return Head(checkpoint, head.values)


def shown_parent(cp: CheckpointRecord, base: Base | None) -> CheckpointRecord:
    """The parent a stream's ``debug`` event names for a checkpoint after ``cp``: the
    base under ``"exit"`` (as the history will), else ``cp``."""
    if base is None:
        return cp
    return dataclasses.replace(cp, checkpoint_id=base.checkpoint_id or "")


async def fold(store: Checkpointer, thread_id: str, run_id: str, base: Base) -> None:
    """Fold a call that exited: its checkpoints on ``thread_id`` after the base, but the
    head, deleted by the store's prune. A store with no prune keeps them (nothing is
    lost, the history just has every step); a store error is logged, not raised: the
    call's outcome stands and its step checkpoints stay, as a crash would leave them."""
    if not isinstance(store, Pruner):
        return
    try:
        await store.prune(thread_id=thread_id, run_id=run_id, after_version=base.version)
    except StorageError as exc:
        log.warning("run %s: the step checkpoints of its call were not folded: %s", run_id, exc)


__all__ = ["EXIT", "EXIT_KEY", "Base", "fold", "going_on", "marked", "new_call", "shown_parent"]
