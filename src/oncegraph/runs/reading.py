"""The state reads: the stored snapshots of a thread (:func:`stored_state`,
:func:`stored_history`, the run service's ``get_state`` and ``history``), and the compiled
app's ``get_state`` and ``get_state_history`` over them, in LangGraph's shape
(:func:`state`, :func:`history`; the shaping itself is :mod:`oncegraph.runs.snapshots`:
this module does the store reads it needs: the task writes of a checkpoint, a subgraph
task's own state, a run's input). What the app's reads return is for people: masked
fields are masked (:mod:`oncegraph.runs.masking`). Each takes a
:class:`~oncegraph.runs.context.RunContext`: the scope check is the context's
(guarantee 15)."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import AsyncIterator, Mapping
from typing import Any

from oncegraph.errors import ConfigError, InvalidUpdateError, RunNotFoundError
from oncegraph.graph.constants import START
from oncegraph.graph.spec import GraphSpec
from oncegraph.runs.context import RunContext
from oncegraph.runs.masking import Masker
from oncegraph.runs.paging import SHOW, STOP, Page
from oncegraph.runs.scope import check_checkpoints
from oncegraph.runs.snapshots import INPUT_SUFFIX, input_snapshot, shape, task_keys
from oncegraph.runs.views import StateSnapshot, empty_snapshot, snapshot
from oncegraph.runtime.durability import EXIT_KEY
from oncegraph.runtime.engine import TaskResult, empty_head, with_finished
from oncegraph.runtime.moves import open_interrupts
from oncegraph.runtime.stepevents import start_values
from oncegraph.runtime.stepresults import RESULTS, decode_results
from oncegraph.runtime.subgraph import child_place
from oncegraph.state.channels import ROOT
from oncegraph.storage.records import CheckpointRecord

HISTORY_PAGE = 50
"""Checkpoints :func:`stored_history` reads per page unless asked for another size."""


async def stored_state(
    ctx: RunContext, thread_id: str, checkpoint_id: str | None = None
) -> StateSnapshot:
    """The thread's snapshot at ``checkpoint_id`` (default: its head), as stored."""
    spec = ctx.graph
    await ctx.setup()
    cp = await ctx.store.get_checkpoint(thread_id, checkpoint_id)
    if cp is None:
        if checkpoint_id:
            raise RunNotFoundError(f"no checkpoint {checkpoint_id!r} on thread {thread_id!r}")
        await ctx.check_thread(thread_id)  # a queued run's thread has no checkpoint
        return empty_snapshot(thread_id, empty_head(spec, thread_id).values)
    await check_checkpoints(ctx.store, ctx.scope, [cp])
    return await _snapshot(ctx, cp)


async def stored_history(
    ctx: RunContext,
    thread_id: str,
    *,
    run_id: str | None = None,
    limit: int | None = None,
    before_version: int | None = None,
    page: int | None = None,
) -> AsyncIterator[StateSnapshot]:
    """The thread's snapshots, newest first, read ``page`` checkpoints at a time
    (default :data:`HISTORY_PAGE`): a caller that does not keep them holds one page and
    one copy of the log, however long the thread."""
    heads = ctx.heads
    await ctx.setup()
    logs: dict[str, list[Any]] = {}
    size = page or HISTORY_PAGE
    left = limit
    while left is None or left > 0:
        n = size if left is None else min(size, left)
        cps = await ctx.store.list_checkpoints(
            thread_id, run_id=run_id, limit=n, before_version=before_version
        )
        await check_checkpoints(ctx.store, ctx.scope, cps)
        pages = await heads.materialize_page(cps, logs)
        for cp, values in zip(cps, pages, strict=True):
            yield await _snapshot(ctx, cp, values)
        if len(cps) < n:
            return
        before_version = cps[-1].version
        left = None if left is None else left - len(cps)


async def _snapshot(
    ctx: RunContext, cp: CheckpointRecord, values: dict[str, Any] | None = None
) -> StateSnapshot:
    if values is None:
        values = await ctx.heads.materialize(cp)
    writes = await ctx.store.get_task_writes(cp.thread_id, cp.checkpoint_id)
    interrupts = tuple(
        {"node": w.task, "index": w.idx, "value": w.value} for w in open_interrupts(writes).values()
    )
    return snapshot(cp, values, interrupts)


async def state(
    ctx: RunContext,
    thread_id: str,
    checkpoint_id: str | None,
    *,
    subgraphs: bool = False,
    masked: bool = True,
    ns: str = "",
) -> StateSnapshot:
    """The thread's state now, or at ``checkpoint_id`` (a run's input checkpoint as
    LangGraph numbers it, ``<id>.input``, too); with ``subgraphs=True`` a subgraph task's
    ``state`` is the subgraph's own snapshot, else its config; ``ns``: the state of the
    subgraph at that namespace (as :func:`history` names it; ``checkpoint_id`` then one of
    its own checkpoints), named by the thread and the namespace, as LangGraph names them."""
    data = thread_id
    if checkpoint_id is not None and checkpoint_id.endswith(INPUT_SUFFIX):
        real = checkpoint_id[: -len(INPUT_SUFFIX)]
        snap = await stored_state(ctx, thread_id, real)
        rewritten = (await _went_on(ctx, thread_id, snap) or {}).get(START, _NONE)
        shaped = await _before_input(ctx, thread_id, snap, None, rewritten)
    elif ns:
        place = await subgraph_where(ctx, thread_id, ns)
        if place is None:
            return _nothing_at(ctx, thread_id, ns)
        ctx, data = place.ctx, place.thread
        snap = await stored_state(ctx, data, checkpoint_id)
        if checkpoint_id is None and _left_out(snap, place):
            parent = snap.parent_config.get("checkpoint_id") if snap.parent_config else None
            if not parent:
                return _nothing_at(ctx, thread_id, ns)
            snap = await stored_state(ctx, data, str(parent))
        shaped = await _shaped(ctx.graph, ctx, snap, thread_id, subgraphs, ns, place.parents)
        if checkpoint_id is None:
            shaped = _with_finished_tasks(ctx.graph, shaped)
    else:
        snap = await stored_state(ctx, thread_id, checkpoint_id)
        done = None if checkpoint_id is None else await _went_on(ctx, thread_id, snap)
        shaped = await _shaped(ctx.graph, ctx, snap, thread_id, subgraphs, "", done=done)
        if checkpoint_id is None:
            shaped = _with_finished_tasks(ctx.graph, shaped)
    if not masked:
        return shaped
    return _mask(await ctx.masker(thread_ids=tuple(dict.fromkeys((thread_id, data)))), shaped)


def _nothing_at(ctx: RunContext, thread_id: str, ns: str) -> StateSnapshot:
    """The state of a subgraph namespace with no checkpoint kept, as LangGraph's: empty."""
    return empty_snapshot(thread_id, {})._replace(
        config={"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}
    )


async def history(
    ctx: RunContext,
    thread_id: str,
    *,
    run_id: str | None = None,
    limit: int | None = None,
    filter: Mapping[str, Any] | None = None,
    before: str | None = None,
    ns: str = "",
) -> AsyncIterator[StateSnapshot]:
    """The thread's checkpoints, newest first, each run's input shown as LangGraph shows
    it; ``run_id`` keeps one run's, ``filter`` those whose metadata has those values,
    ``before`` those older than that checkpoint, ``limit`` the first that many; ``ns``:
    those of the subgraph at that namespace (``"node:step"``, ``"outer:2|inner:1"``; of
    its latest call at that step), named by the thread and the namespace as LangGraph
    names them.

    Snapshots are made as the caller asks for them, a page of checkpoints at a time, so
    walking a long thread's history holds one page, not the whole list."""
    data = thread_id
    place: SubgraphPlace | None = None
    if ns:
        place = await subgraph_where(ctx, thread_id, ns)
        if place is None:
            return
        ctx, data = place.ctx, place.thread
    start: int | None = None
    if before is not None:
        found = await ctx.store.get_checkpoint(data, before.removesuffix(INPUT_SUFFIX))
        start = None if found is None else found.version + 1
    page = Page(before=before if start is not None else None, filter=filter, limit=limit)
    masker: Masker | None = None
    async for item in _sequence(ctx, thread_id, run_id, start, ns, data, place):
        if masker is None:
            # Read the effects AFTER the newest page of checkpoints: an effect is written
            # no later than the checkpoint holding its values, so every checkpoint shown
            # (that page's and the older ones) has its effects' secrets known here. Read
            # before, a step committed in between could show a secret it never learned.
            masker = await ctx.masker(thread_ids=tuple(dict.fromkeys((thread_id, data))))
        taken = page.take(item.config.get("checkpoint_id"), item.metadata)
        if taken == STOP:
            return
        if taken == SHOW:
            yield _mask(masker, item)


_NEAR = 8
"""How many checkpoints after a past one :func:`_went_on` looks at for its step's."""


async def _went_on(ctx: RunContext, thread_id: str, snap: StateSnapshot) -> dict[str, Any] | None:
    """What the tasks of the step that went on from ``snap``'s checkpoint wrote (see
    :func:`_sequence`), read from the few checkpoints committed right after it (the
    step's own is the next one unless the thread forked there): a bounded read."""
    cp_id = snap.config.get("checkpoint_id")
    found = await ctx.store.get_checkpoint(thread_id, str(cp_id)) if cp_id else None
    if found is None:
        return None
    after = await ctx.store.list_checkpoints(
        thread_id, limit=_NEAR, before_version=found.version + 1 + _NEAR
    )
    for cp in reversed(after):  # oldest first: the step that ran from it first
        if cp.parent_checkpoint_id == cp_id and RESULTS in cp.metadata:
            schema = ctx.graph.schema
            return decode_results(schema, cp.metadata, schema.decode_values(cp.values))
    return None


def _with_finished_tasks(spec: GraphSpec, snap: StateSnapshot) -> StateSnapshot:
    """The thread's state now, as LangGraph shows it: a step that stopped (a sibling
    failed or interrupted) with some of its tasks finished has their writes applied to
    the values, and ``next`` names only the tasks still to run (the stored checkpoint,
    read by its id, is as it was)."""
    root = spec.schema.is_root  # the values and results are the one value, as shown
    done = [
        TaskResult(t.name, {ROOT: t.result} if root and not _rooted(t.result) else t.result)
        for t in snap.tasks
        if t.result is not None
    ]
    if not done:
        return snap
    values = with_finished(spec, {ROOT: snap.values} if root else snap.values, done)
    return snap._replace(
        values=values.get(ROOT) if root else values,
        next=tuple(t.name for t in snap.tasks if t.result is None),
    )


def _rooted(result: Any) -> bool:
    return isinstance(result, Mapping) and len(result) == 1 and ROOT in result


def _mask(masker: Masker, snap: StateSnapshot) -> StateSnapshot:
    """``snap`` as a person may see it: every masked field masked (guarantee 14), its values
    known from the thread's effects and from the tool calls in the snapshot itself."""
    masker.learn(snap.values)
    masker.learn(snap.interrupts)
    return masker.snapshot(snap)


async def _sequence(
    ctx: RunContext,
    thread_id: str,
    run_id: str | None,
    start: int | None,
    ns: str = "",
    data: str | None = None,
    place: SubgraphPlace | None = None,
) -> AsyncIterator[StateSnapshot]:
    """Every snapshot newest first: each checkpoint, and after a run's input checkpoint
    the state before that input (which needs the next older checkpoint's values).
    ``data``: the thread the checkpoints are on (a subgraph's, of namespace ``ns``, at
    ``place``; those LangGraph keeps none of are left out, see :func:`_left_out`)."""
    data = data or thread_id
    parents = place.parents if place is not None else None
    held: StateSnapshot | None = None  # an input checkpoint, until the older one is read
    # what the tasks of a step wrote, kept by the checkpoint the step made (newer, so read
    # first), by the checkpoint the step ran from; of several (forks), the oldest's
    done: dict[str, dict[str, Any]] = {}
    schema = ctx.graph.schema
    rewritten: Any = _NONE  # the held input's, as an update as __start__ rewrote it
    async for snap in stored_history(ctx, data, run_id=run_id, before_version=start):
        if held is not None:
            yield await _before_input(ctx, thread_id, held, snap, rewritten, ns, data, parents)
        if _left_out(snap, place):
            continue
        cp_id = snap.config.get("checkpoint_id")
        results = done.pop(cp_id, None) if cp_id else None
        yield await _shaped(
            ctx.graph, ctx, snap, thread_id, False, ns, parents, done=results, split=True
        )
        held = snap if snap.metadata.get("source") == "input" else None
        rewritten = (results or {}).get(START, _NONE)
        parent = snap.parent_config.get("checkpoint_id") if snap.parent_config else None
        if parent and RESULTS in snap.metadata:
            done[parent] = decode_results(schema, snap.metadata, snap.values)
    if held is not None:
        yield await _before_input(ctx, thread_id, held, None, rewritten, ns, data, parents)


@dataclasses.dataclass(frozen=True, slots=True)
class SubgraphPlace:
    """Where the subgraph at a namespace of a thread keeps its checkpoints: its read
    context, its thread, the checkpoint that called it of each graph above it by
    namespace (LangGraph's ``metadata["parents"]``), and whether it is stateful
    (``compile(checkpointer=True)``: one thread for every call)."""

    ctx: RunContext
    thread: str
    parents: dict[str, str]
    stateful: bool


async def subgraph_place(ctx: RunContext, thread_id: str, ns: str) -> tuple[RunContext, str]:
    """The read context and the thread of the subgraph at namespace ``ns`` of the
    thread (see :func:`subgraph_where`)."""
    found = await subgraph_where(ctx, thread_id, ns)
    if found is None:
        raise RunNotFoundError(f"no call of the subgraph at checkpoint_ns {ns!r}")
    return found.ctx, found.thread


async def subgraph_where(ctx: RunContext, thread_id: str, ns: str) -> SubgraphPlace | None:
    """Where the subgraph at namespace ``ns`` of the thread is: each element
    ``"<task>:<step>"`` is the call of that task at that step (the latest one; with no
    step, the latest call), a stateful subgraph's is its node's name (its calls share one
    thread, so no calling checkpoint is named for it). None when no such call is kept:
    none was made, or the checkpoint that made it was folded (``durability="exit"``), as
    LangGraph keeps no checkpoint of such a call."""
    spec, thread = ctx.graph, thread_id
    parents: dict[str, str] = {}
    above: list[str] = []
    stateful = False
    for element in ns.split("|"):
        task, _, step = element.rpartition(":")
        if not task or not step.isdigit():
            task, step = element, ""
        name = task.split(":")[0]
        node = spec.nodes.get(name)
        child = node.subgraph if node is not None else None
        if child is None:
            raise ConfigError(
                f"checkpoint_ns {ns!r} names no subgraph of graph {ctx.graph.name!r}; its "
                "subgraph tasks are the ones get_state(config, subgraphs=True) lists"
            )
        stateful = bool(getattr(child, "stateful", False))
        at = int(step) if step else None  # a stateful one's calls share a thread: none looked for
        calling = "" if stateful else await _calling(ctx, thread, task, at)
        if calling:
            parents["|".join(above)] = calling
        elif not stateful:
            return None
        thread, _ = child_place(stateful, thread, task, name, calling, int(step or 0))
        above.append(element)
        spec = child.spec
        ctx = ctx.child(spec)
    return SubgraphPlace(ctx, thread, parents, stateful)


def _left_out(snap: StateSnapshot, place: SubgraphPlace | None) -> bool:
    """Whether ``snap``, a checkpoint of the subgraph at ``place``, is one LangGraph
    keeps none of: the last of a call of a (not stateful) subgraph that finished under
    ``durability="exit"`` (LangGraph saves such a call's checkpoint only when it
    interrupted or failed). It stays stored: a crash before the parent's step commits
    goes on from it and runs none of the call's nodes again."""
    return place is not None and not place.stateful and not snap.next and EXIT_KEY in snap.metadata


async def _calling(ctx: RunContext, thread: str, task: str, step: int | None) -> str:
    """The checkpoint of ``thread`` whose step ``step`` ran subgraph task ``task`` (with
    no ``step``, the latest that ran it); "" when none is kept."""
    async for snap in stored_history(ctx, thread):
        ran = int(snap.metadata.get("step", -1)) + 1
        if (step is None or ran == step) and task.split(":")[0] in snap.next:
            return str(snap.config["checkpoint_id"])
        if step is not None and ran < step:
            break
    return ""


async def _shaped(
    spec: GraphSpec,
    ctx: RunContext,
    snap: StateSnapshot,
    thread_id: str,
    subgraphs: bool,
    ns: str,
    parents: Mapping[str, str] | None = None,
    *,
    done: Mapping[str, Any] | None = None,
    split: bool = False,
) -> StateSnapshot:
    cp_id = snap.config.get("checkpoint_id")
    if not cp_id:
        return shape(spec, snap, thread_id=thread_id, writes=(), ns=ns, parents=parents)
    writes = await ctx.store.get_task_writes(snap.config["thread_id"], cp_id)
    states: dict[str, Any] = {}
    for key, node, _ in task_keys(spec, snap):
        child = spec.nodes[node].subgraph if node in spec.nodes else None
        if child is None and node in spec.nodes:  # one the node calls (invoke inside it)
            child = called_stateful(spec.nodes[node].fn)
        if child is None:
            continue
        thread, elements = child_place(
            getattr(child, "stateful", False),
            snap.config["thread_id"],
            key,
            node,
            cp_id,
            int(snap.metadata.get("step", -1)) + 1,
        )
        child_ns = "|".join((ns, *elements) if ns else elements)
        if not subgraphs:
            states[key] = {"configurable": {"thread_id": thread_id, "checkpoint_ns": child_ns}}
            continue
        child_ctx = ctx.child(child.spec)
        found = await stored_state(child_ctx, thread)
        if found.config.get("checkpoint_id"):
            above = {**(parents or {}), ns: cp_id}
            states[key] = await _shaped(
                child.spec, child_ctx, found, thread_id, True, child_ns, above
            )
    return shape(
        spec,
        snap,
        thread_id=thread_id,
        writes=writes,
        states=states,
        ns=ns,
        parents=parents,
        done=done,
        split=split,
    )


def called_stateful(fn: Any) -> Any:
    """The stateful subgraph (``compile(checkpointer=True)``) a node's function calls,
    found among the names its code reads (its closure's, then its module's); None when
    it calls none. Its state is shown as a subgraph node's (``get_state(subgraphs=True)``)."""
    fn = inspect.unwrap(fn)
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    cells = dict(zip(code.co_freevars, getattr(fn, "__closure__", None) or (), strict=False))
    found: list[Any] = []
    for name in code.co_freevars:
        try:
            found.append(cells[name].cell_contents)
        except ValueError:  # an empty cell
            continue
    module = getattr(fn, "__globals__", {})
    found.extend(module[name] for name in code.co_names if name in module)
    for value in found:
        if getattr(value, "stateful", False) is True and hasattr(value, "spec"):
            return value
    return None


_NONE: Any = object()


async def _before_input(
    ctx: RunContext,
    thread_id: str,
    snap: StateSnapshot,
    older: StateSnapshot | None,
    rewritten: Any = _NONE,
    ns: str = "",
    data: str | None = None,
    parents: Mapping[str, str] | None = None,
) -> StateSnapshot:
    """LangGraph's entry of a run's input before it was applied; ``rewritten``: what an
    ``update_state(..., as_node="__start__")`` on the input checkpoint wrote as the
    ``__start__`` task instead (``bulk_update_state`` after an ``__input__`` update)."""
    parent_id = snap.parent_config.get("checkpoint_id") if snap.parent_config else None
    if parent_id is None:  # a thread's first: its reducer fields at their start (0, [])
        values: dict[str, Any] = start_values(ctx.graph.schema)
    elif older is not None and older.config.get("checkpoint_id") == parent_id:
        values = dict(older.values)
    else:
        values = dict((await stored_state(ctx, data or thread_id, parent_id)).values)
    update: Mapping[str, Any] = {}
    if snap.run_id and not ns:  # a subgraph's input is its parent task's, not the run's
        run = await ctx.store.get_run(snap.run_id)
        if run is not None and isinstance(run.input, Mapping):
            try:
                update = ctx.graph.schema.decode_update(run.input)
            except (InvalidUpdateError, ValueError, TypeError):
                update = dict(run.input)  # written by an older version's schema: as stored
    shown = input_snapshot(
        snap,
        thread_id=thread_id,
        before=values,
        before_id=parent_id,
        update=update,
        ns=ns,
        parents=parents,
    )
    if rewritten is _NONE:
        return shown
    (task,) = shown.tasks
    return shown._replace(tasks=(task._replace(result=rewritten),))


__all__ = [
    "HISTORY_PAGE",
    "SubgraphPlace",
    "history",
    "state",
    "stored_history",
    "stored_state",
    "subgraph_place",
    "subgraph_where",
]
