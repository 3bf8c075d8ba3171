"""Time travel to a stateful subgraph's own checkpoint, as LangGraph does it.

``get_state(config, subgraphs=True)`` (and a subgraph's history) names a stateful
subgraph's checkpoints (``compile(checkpointer=True)``) by the parent's thread, the
subgraph's namespace and its checkpoint id: ``{"thread_id": t, "checkpoint_ns": "node",
"checkpoint_id": c}`` (``"mid|inner"`` for one nested in another). Such a config works
where a parent's checkpoint does:

* ``invoke(None, sub_config)`` (or with ``Command(resume=...)``) naming where the
  thread stands (the subgraph's head, called by the parent's head) goes on as with the
  thread's own config; any other goes back to the parent's checkpoint whose step called
  the subgraph (each of the subgraph's
  checkpoints records that call), as a time travel run of the parent (a NEW run with
  lineage, :mod:`oncegraph.runs.timetravel`), and the subgraph's call in that run starts
  from ``c`` itself (its nodes after ``c`` run again), each enclosing subgraph from the
  checkpoint that made the call;
* ``update_state(sub_config, values)`` forks ``c`` on the subgraph's thread with the edit
  (``source="update"``) and returns the fork's config, which ``invoke(None, ...)`` runs.

The subgraph's thread is ``<thread>|<namespace>`` (:func:`oncegraph.runtime.subgraph.
child_place`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from oncegraph.errors import ConfigError, RunNotFoundError
from oncegraph.graph.spec import GraphSpec
from oncegraph.runs.context import RunContext
from oncegraph.runs.forks import fork, last_writer
from oncegraph.runs.snapshots import lg_config
from oncegraph.runtime.heads import Heads
from oncegraph.runtime.substate import STARTS
from oncegraph.storage.records import CheckpointRecord, RunRecord, RunStatus, StepCommit


def sub_thread(thread_id: str, ns: str) -> str:
    """The thread a stateful subgraph of namespace ``ns`` keeps its checkpoints on."""
    return f"{thread_id}|{ns}"


def _called_from(cp: CheckpointRecord) -> str:
    """The parent's checkpoint the call that made ``cp`` stood on."""
    call = str(cp.metadata.get("call") or "")
    call = call.removeprefix("branch:")
    parts = call.split(":")
    if len(parts) < 3:
        raise ConfigError(
            f"checkpoint {cp.checkpoint_id!r} of subgraph thread {cp.thread_id!r} does not "
            "record the parent step that made it; go back to a checkpoint of the parent "
            "graph instead (app.get_state_history(config))"
        )
    return parts[2] if parts[0] == "replay" else parts[1]


async def _sub_checkpoint(ctx: RunContext, thread_id: str, ns: str, cp_id: str) -> CheckpointRecord:
    cp = await ctx.store.get_checkpoint(sub_thread(thread_id, ns), cp_id)
    if cp is None:
        raise RunNotFoundError(
            f"no checkpoint {cp_id!r} of subgraph {ns!r} on thread {thread_id!r} (pruned, or "
            "of another thread); list them with app.get_state(config, subgraphs=True)"
        )
    return cp


async def resolve(
    ctx: RunContext, thread_id: str, ns: str, cp_id: str
) -> tuple[str, dict[str, str]]:
    """The parent's checkpoint ``sub_config`` goes back to, and where each subgraph's
    call starts (see the module docstring)."""
    cp = await _sub_checkpoint(ctx, thread_id, ns, cp_id)
    thread = cp.thread_id
    starts = {thread: cp.checkpoint_id}
    while True:
        called_from = _called_from(cp)
        outer = thread.rsplit("|", 1)[0]
        if outer == thread_id:
            if await _all_heads(ctx, {**starts, outer: called_from}):
                return called_from, {}  # where the thread stands: no going back
            return called_from, starts
        found = await ctx.store.get_checkpoint(outer, called_from)
        if found is None:
            raise RunNotFoundError(
                f"the checkpoint {called_from!r} that called subgraph thread {thread!r} is "
                "gone (pruned); go back to a checkpoint of the parent graph instead"
            )
        starts[outer] = found.checkpoint_id
        cp, thread = found, outer


async def _all_heads(ctx: RunContext, named: Mapping[str, str]) -> bool:
    """Whether each of ``named`` (thread: checkpoint id) is its thread's head."""
    for thread, cp_id in named.items():
        record = await ctx.store.get_thread(thread)
        if record is None or record.head_checkpoint_id != cp_id:
            return False
    return True


def subgraph_spec(spec: GraphSpec, ns: str) -> GraphSpec:
    """The spec of the stateful subgraph at namespace ``ns`` of ``spec``."""
    current = spec
    for element in ns.split("|"):
        node = current.nodes.get(element.split(":")[0])
        child = node.subgraph if node is not None else None
        if child is None:
            raise ConfigError(
                f"checkpoint_ns {ns!r} names no subgraph of graph {spec.name!r}; its "
                f"subgraph nodes are the ones get_state(config, subgraphs=True) lists"
            )
        current = child.spec
    return current


async def update(
    ctx: RunContext,
    thread_id: str,
    ns: str,
    cp_id: str | None,
    values: Mapping[str, Any] | None,
    as_node: str | None,
) -> dict[str, Any]:
    """``update_state(sub_config, values)``: a fork of the subgraph's checkpoint with
    the edit, on its own thread (see the module docstring); the fork's config."""
    spec = subgraph_spec(ctx.graph, ns)
    thread = sub_thread(thread_id, ns)
    record = await ctx.store.get_thread(thread)
    if record is None or record.head_checkpoint_id is None:
        raise RunNotFoundError(f"subgraph {ns!r} has no state on thread {thread_id!r} yet")
    cp = await _sub_checkpoint(ctx, thread_id, ns, cp_id or record.head_checkpoint_id)
    if as_node is not None and as_node not in spec.nodes:
        raise ConfigError(
            f"as_node {as_node!r} is not a node of subgraph {ns!r}; nodes: {sorted(spec.nodes)}"
        )
    carrier = RunRecord(run_id=cp.run_id, thread_id=thread, status=RunStatus.RUNNING)
    made = await fork(
        spec,
        Heads(spec, ctx.store),
        ctx.store,
        cp,
        carrier,
        source="update",
        patch=dict(values or {}),
        as_node=as_node or last_writer(spec, cp),
        thread=record,
    )
    checkpoint = dataclasses.replace(
        made.checkpoint, metadata={**made.checkpoint.metadata, "call": cp.metadata.get("call")}
    )
    await ctx.store.commit(
        StepCommit(
            thread_id=thread,
            expected_version=record.version,
            checkpoint=checkpoint,
            log=made.log,
        )
    )
    return lg_config(thread_id, checkpoint.checkpoint_id, ns)


__all__ = ["STARTS", "resolve", "sub_thread", "subgraph_spec", "update"]
