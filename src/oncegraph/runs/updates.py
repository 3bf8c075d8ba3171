"""``update_state`` used as input: LangGraph lets an update start a thread's turn.

* ``update_state(config, values, as_node="__input__")`` (on a new thread, or on the head
  of a thread whose latest run finished) is the input of a new turn: a NEW run whose
  input is ``values`` and whose first checkpoint is the input checkpoint ``invoke(values,
  config)`` would make (the history shows it the same way);
* ``update_state(config, values, as_node=<node>)`` (or no ``as_node``) on a thread that
  has no checkpoint yet makes the thread's first checkpoint, as if that node (``None``:
  the input) had written ``values``; ``invoke(None, config)`` runs what comes after it.

Each is a new run with lineage, as every other fork (:mod:`oncegraph.runs.timetravel`):
``launch_reason="time_travel"``, ``parent_run_id`` / ``parent_checkpoint_id`` naming the
head it stands on (None on a new thread), status ``paused`` until ``invoke(None,
config)`` runs it (``completed`` when nothing is left to run). It never continues or
drops an unfinished run: an unfinished latest run refuses it (an edit nobody ran yet is
superseded, with an audit record, as by any later update).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from oncegraph.errors import ConfigError, RunNotFoundError
from oncegraph.graph.constants import START
from oncegraph.runs import audits
from oncegraph.runs.forks import COPY, TIME_TRAVEL, Fork
from oncegraph.runtime.config import RunConfig
from oncegraph.runtime.engine import Head, TaskResult, advance, empty_head
from oncegraph.storage.records import RunRecord, RunStatus, StepCommit, ThreadRecord

if TYPE_CHECKING:
    from oncegraph.runs.timetravel import TimeTravel

INPUT = "__input__"
"""LangGraph's ``as_node`` for an update that is a turn's input."""


def starts_a_turn(thread: ThreadRecord | None, as_node: str | None) -> bool:
    """Whether an update with ``as_node`` on ``thread`` is an input (see the module
    docstring): an ``__input__`` update, or any update of a thread with no checkpoint."""
    return as_node == INPUT or thread is None or thread.head_checkpoint_id is None


async def start_by_update(
    travel: TimeTravel,
    thread_id: str,
    thread: ThreadRecord | None,
    latest: RunRecord | None,
    values: Mapping[str, Any] | None,
    as_node: str | None,
    *,
    checkpoint_id: str | None,
    actor: str,
    reason: str,
) -> Fork:
    """The new run and first checkpoint of an update used as input (module docstring)."""
    ctx = travel.ctx
    spec, heads = ctx.graph_heads()
    fresh = thread is None or thread.head_checkpoint_id is None
    if as_node == COPY:
        raise RunNotFoundError(
            f"thread {thread_id!r} has no checkpoint to copy yet; start it with "
            "invoke(input, config) or update_state(config, values)"
        )
    if values is not None and not isinstance(values, Mapping):
        raise ConfigError(f"values must be a dict of state fields; got {values!r}")
    as_input = as_node in (None, INPUT, START)
    if not as_input and as_node not in spec.nodes:
        raise ConfigError(
            f"as_node {as_node!r} is not a node of this graph; nodes: {sorted(spec.nodes)}"
        )
    if not fresh and checkpoint_id not in (None, thread.head_checkpoint_id if thread else None):
        raise ConfigError(
            "update_state(config, values, as_node='__input__') starts a new turn from the "
            "thread's head; leave checkpoint_id out of the config, or go back first with "
            "update_state(past_config, None, as_node='__copy__')"
        )
    if latest is not None:
        await travel._supersede(thread_id, latest, "update_state")  # refuses the unfinished
    head: Head = empty_head(spec, thread_id) if fresh else await heads.load(thread_id)
    origin = None if fresh else await ctx.get_run(head.checkpoint.run_id)
    cfg = (
        RunConfig.parse({"thread_id": thread_id})
        if origin is None
        else RunConfig.from_stored(origin.config, thread_id)
    )
    patch = dict(values or {})
    made = travel.new_run(thread_id, patch if as_input else None, cfg, RunStatus.PAUSED, None)
    run = made.replace(
        parent_run_id=None if origin is None else origin.run_id,
        parent_checkpoint_id=head.checkpoint.checkpoint_id or None,
        launch_reason=TIME_TRAVEL,
        mode="live",
    )
    writer = START if as_input else str(as_node)
    update = spec.schema.to_update(writer, patch)
    nxt, entries, writes = advance(
        spec,
        head,
        run.run_id,
        [TaskResult(writer, update)],
        step=-1 if as_input or fresh else head.checkpoint.step + 1,
        source="input" if as_input else "update",
    )
    status = RunStatus.PAUSED if nxt.checkpoint.next else RunStatus.COMPLETED
    run = run.replace(status=status)
    await ctx.store.commit(
        StepCommit(
            thread_id=thread_id,
            expected_version=head.version if not fresh or thread is None else thread.version,
            checkpoint=nxt.checkpoint,
            log=entries,
            new_run=run,
        )
    )
    await ctx.store.append_audit(
        audits.for_update(
            run,
            actor=actor,
            reason=reason,
            parent_run_id=run.parent_run_id,
            checkpoint_id=run.parent_checkpoint_id,
            new_checkpoint_id=nxt.checkpoint.checkpoint_id,
            as_node=as_node,
            changed=sorted(writes.changed),
        )
    )
    return Fork(run, nxt.checkpoint.checkpoint_id, ())


__all__ = ["INPUT", "start_by_update", "starts_a_turn"]
