"""The state reads of the compiled app, in LangGraph's shape: ``get_state`` and
``get_state_history`` over a run service (the shaping itself is
:mod:`oncegraph.runs.snapshots`; this module does the store reads it needs: the task
writes of a checkpoint, a subgraph task's own state, a run's input). What they return
is for people: masked fields are masked (:mod:`oncegraph.runs.masking`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from oncegraph.graph.spec import GraphSpec
from oncegraph.runs.snapshots import INPUT_SUFFIX, input_snapshot, shape, task_keys
from oncegraph.runs.views import StateSnapshot
from oncegraph.runtime.subgraph import child_thread

if TYPE_CHECKING:
    from oncegraph.runs.service import RunService


async def state(
    service: RunService, thread_id: str, checkpoint_id: str | None, *, subgraphs: bool = False
) -> StateSnapshot:
    """The thread's state now, or at ``checkpoint_id`` (a run's input checkpoint as
    LangGraph numbers it, ``<id>.input``, too); with ``subgraphs=True`` a subgraph task's
    ``state`` is the subgraph's own snapshot, else its config."""
    if checkpoint_id is not None and checkpoint_id.endswith(INPUT_SUFFIX):
        real = checkpoint_id[: -len(INPUT_SUFFIX)]
        snap = await service.get_state(thread_id, real)
        shaped = await _before_input(service, thread_id, snap, None)
    else:
        snap = await service.get_state(thread_id, checkpoint_id)
        shaped = await _shaped(service.graph, service, snap, thread_id, subgraphs, "")
    return (await _masked(service, thread_id, [shaped]))[0]


async def history(
    service: RunService,
    thread_id: str,
    *,
    run_id: str | None = None,
    limit: int | None = None,
    filter: Mapping[str, Any] | None = None,
    before: str | None = None,
) -> list[StateSnapshot]:
    """The thread's checkpoints, newest first, each run's input shown as LangGraph shows
    it; ``run_id`` keeps one run's, ``filter`` those whose metadata has those values,
    ``before`` those older than that checkpoint."""
    plain = limit is not None and before is None and not filter
    snaps = await service.history(thread_id, run_id=run_id, limit=limit if plain else None)
    out: list[StateSnapshot] = []
    for i, snap in enumerate(snaps):
        out.append(await _shaped(service.graph, service, snap, thread_id, False, ""))
        if snap.metadata.get("source") == "input":
            older = snaps[i + 1] if i + 1 < len(snaps) else None
            out.append(await _before_input(service, thread_id, snap, older))
    if before is not None:
        ids = [s.config.get("checkpoint_id") for s in out]
        out = out[ids.index(before) + 1 :] if before in ids else out
    if filter:
        out = [s for s in out if all(s.metadata.get(k) == v for k, v in filter.items())]
    return await _masked(service, thread_id, out[:limit] if limit is not None else out)


async def _masked(
    service: RunService, thread_id: str, snaps: list[StateSnapshot]
) -> list[StateSnapshot]:
    """``snaps`` as a person may see them: every masked field masked (law 14), its values
    known from the thread's effects and the tool calls in the snapshots themselves."""
    masker = await service.masker(thread_ids=(thread_id,))
    for snap in snaps:
        masker.learn(snap.values)
        masker.learn(snap.interrupts)
    return [masker.snapshot(s) for s in snaps]


async def _shaped(
    spec: GraphSpec,
    service: RunService,
    snap: StateSnapshot,
    thread_id: str,
    subgraphs: bool,
    ns: str,
) -> StateSnapshot:
    from oncegraph.runs.service import RunService

    cp_id = snap.config.get("checkpoint_id")
    if not cp_id:
        return shape(spec, snap, thread_id=thread_id, writes=(), ns=ns)
    writes = await service.store.get_task_writes(snap.config["thread_id"], cp_id)
    states: dict[str, Any] = {}
    for key, node, _ in task_keys(spec, snap):
        child = spec.nodes[node].subgraph if node in spec.nodes else None
        if child is None:
            continue
        thread = child_thread(snap.config["thread_id"], key, cp_id)
        element = f"{key}:{int(snap.metadata.get('step', -1)) + 1}"
        child_ns = f"{ns}|{element}" if ns else element
        if not subgraphs:
            states[key] = {"configurable": {"thread_id": thread_id, "checkpoint_ns": child_ns}}
            continue
        child_service = RunService(child.spec, service.store)
        found = await child_service.get_state(thread)
        if found.config.get("checkpoint_id"):
            states[key] = await _shaped(child.spec, child_service, found, thread_id, True, child_ns)
    return shape(spec, snap, thread_id=thread_id, writes=writes, states=states, ns=ns)


async def _before_input(
    service: RunService, thread_id: str, snap: StateSnapshot, older: StateSnapshot | None
) -> StateSnapshot:
    parent_id = snap.parent_config.get("checkpoint_id") if snap.parent_config else None
    if parent_id is None:
        values: dict[str, Any] = {}
    elif older is not None and older.config.get("checkpoint_id") == parent_id:
        values = dict(older.values)
    else:
        values = dict((await service.get_state(thread_id, parent_id)).values)
    update: Mapping[str, Any] = {}
    if snap.run_id:
        run = await service.store.get_run(snap.run_id)
        if run is not None and isinstance(run.input, Mapping):
            update = service.graph.schema.decode_update(run.input)
    return input_snapshot(
        snap, thread_id=thread_id, before=values, before_id=parent_id, update=update
    )


__all__ = ["history", "state"]
