"""Subgraphs: a compiled graph run inside a task of its parent's run.

A compiled graph added as a node (``builder.add_node("child", child_app)``), or called
from inside a node (``invoke``, ``ainvoke``, ``stream``, ``astream``, ``batch`` or
``abatch`` of a child compiled without a checkpointer of its own), runs its own loop on
a nested :class:`~oncegraph.runtime.driver.Driver` INSIDE the parent task:

* its checkpoints form their own chain on a thread of their own in the parent's store,
  ``<parent thread>|<task>:<parent checkpoint id>`` (``#n`` added for the n-th graph
  the same task runs), committed under the parent run's id and claim: every write
  carries the parent's fence (guarantee 13), each step commits before its tasks run (guarantee 1);
* its tasks' command ids are namespaced ``<parent scope>:<parent step>|<child task>``,
  so its effects have keys of their own under the parent run's ledger: a crash anywhere
  inside resumes without repeating a recorded effect;
* the parent task re-runs the subgraph on resume, and the subgraph continues from its
  own head (a finished subgraph is not run again; its output is read back);
* a park, failure or interrupt inside it is raised into the parent task; the parent's
  answers are handed down in order (``Driver._hand_down_answers``);
* a replay's policy holds inside it as in its parent: an evidence or simulation replay
  calls nothing live at any depth, a live one blocks irreversible tools at any depth.
  (A graph with a checkpointer of its own, called inside a replay's node, would start a
  run of its own outside the replay: that is refused, see :func:`refuse_in_replay`.)

The parent's state (or a ``Send`` payload) is the child's input, limited to the fields
the child's input schema has; the child's output (its output schema's fields) is the
parent task's update, limited to the parent's fields.

A node of the child that returns ``Command(graph=Command.PARENT, ...)`` stops the child
there (its step is not committed; its finished calls are recorded first, as for any
step that does not commit): the command is raised as ``ParentCommand`` out of the
child's driver, and the parent's task that ran the child ends with it as its own
``Command`` (``runtime.tasks``), at whatever depth: the nearest enclosing graph gets it.

A child compiled with ``checkpointer=True`` is STATEFUL: its thread is
``<parent thread>|<node>`` for every call (not one per call), so its state carries over
from one call of the parent's thread to the next (the new input goes on top of it, with
the reducers), and its namespace is the node's name, as in LangGraph. Each of its
checkpoints carries the call it belongs to (``metadata["call"]``: run, parent
checkpoint, task, n), so a call resumed after a crash, an interrupt or a retry continues
its own head instead of adding its input again, and another run from the same parent
checkpoint (a replay, a branch) makes a new call. A branch's thread starts its stateful
subgraph from the state it had on the branch's source thread when the branch's
checkpoint was current (its newest checkpoint made before that one, by ``created_at``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping
from contextlib import aclosing
from typing import TYPE_CHECKING, Any, TypeVar

from oncegraph._blocking import walk_blocking
from oncegraph.errors import ConfigError, InvalidUpdateError
from oncegraph.graph.io import input_update, output_values
from oncegraph.graph.spec import GraphSpec
from oncegraph.runtime.childplace import child_place, child_thread
from oncegraph.runtime.context import TaskContext
from oncegraph.runtime.driver import Driver
from oncegraph.runtime.engine import Head, Task
from oncegraph.runtime.heads import Heads
from oncegraph.runtime.streaming import Emit, drained, namespaced, tee
from oncegraph.runtime.substate import back_to_replay_point
from oncegraph.storage.records import RunRecord, RunStatus

if TYPE_CHECKING:
    from oncegraph.app import CompiledGraph

T = TypeVar("T")


async def run_subgraph_node(
    child: CompiledGraph, parent: GraphSpec, ctx: TaskContext, head: Head, task: Task
) -> Any:
    """What a subgraph node returns to its parent (its update)."""
    schema = parent.schema
    source = task.arg if task.is_send else head.values
    if schema.is_root and not task.is_send:
        source = schema.to_node_input(source)
    out = await run_nested(child, ctx, source)
    if schema.is_root or not isinstance(out, Mapping):  # a value, returned as a node's
        return out
    if schema.kind == "dict":
        return dict(out)
    return {k: v for k, v in out.items() if k in schema.channels}


async def run_nested(
    child: CompiledGraph, ctx: TaskContext, source: Any, also: Emit | None = None
) -> Any:
    """Run ``child`` to its end inside task ``ctx``; its output values. Its events reach
    the parent's stream (namespaced) and, when given, ``also`` (as a top-level run's)."""
    spec = child.spec
    n = ctx.subgraph_calls
    ctx.subgraph_calls += 1
    suffix = f"#{n}" if n else ""
    stateful = getattr(child, "stateful", False)
    thread, elements = child_place(
        stateful, ctx.checkpoint_thread, ctx.task_key, ctx.node_name, ctx.checkpoint_id, ctx.step, n
    )
    heads = Heads(spec, ctx.store)
    driver = Driver(
        spec,
        ctx.store,
        heads,
        ctx.config,
        tee(namespaced(ctx.emit, *elements), also),
        ctx.claim,
        replay=ctx.replay,  # a replay's mode holds at every depth
        scope=f"{ctx.node}:{ctx.step}{suffix}",
        ns=(*ctx.ns, *elements),
        parent=ctx,
        answer_base=ctx.interrupt_count,
        root_thread=ctx.thread_id,
        parents={**ctx.parents, "|".join(ctx.ns): ctx.checkpoint_id},
        subgraphs=run_subgraph_node,
    )
    run = RunRecord(run_id=ctx.run_id, thread_id=thread, status=RunStatus.RUNNING)
    head = await heads.load(thread)
    # A stateful subgraph's thread outlives this call: its head is this call's (resumed
    # after a crash, an interrupt or a retry) only when this call started it; otherwise
    # this call's input goes onto the state its earlier calls left.
    call = f"{ctx.run_id}:{ctx.checkpoint_id}:{ctx.task_key}{suffix}" if stateful else None
    if call is not None:  # a time travel run's first call: the state of that time
        head = await back_to_replay_point(ctx, spec, heads, thread, head, call)
    cp = head.checkpoint
    if call is not None and not cp.checkpoint_id:  # a branch's first call: its source's state
        seed = await _state_at_branch(ctx, heads, thread)
        if seed is not None:
            head = await driver.start_nested(head, run, seed, call=f"branch:{call}")
            cp = head.checkpoint
    if not cp.checkpoint_id or (call is not None and cp.metadata.get("call") != call):
        head = await driver.start_nested(head, run, _child_input(spec, source), call=call)
    head = await driver.run(head, run)
    ctx.interrupt_count = driver.answer_base + int(head.checkpoint.metadata.get("answers", 0))
    return output_values(spec, head.values)


async def _state_at_branch(ctx: TaskContext, heads: Heads, thread: str) -> dict[str, Any] | None:
    """The state a stateful subgraph had, on the thread a branch was made from, when the
    branch's checkpoint was current (None: this run is no branch, or it had none): its
    newest checkpoint made before that checkpoint."""
    store = ctx.store
    run = await store.get_run(ctx.run_id)
    if run is None or not run.parent_run_id or not run.parent_checkpoint_id:
        return None
    origin = await store.get_run(run.parent_run_id)
    if origin is None or origin.thread_id == ctx.thread_id:
        return None
    at = await store.get_checkpoint(origin.thread_id, run.parent_checkpoint_id)
    if at is None:
        return None
    source = origin.thread_id + thread[len(ctx.thread_id) :]
    for cp in await store.list_checkpoints(source):  # newest first
        if cp.created_at < at.created_at:
            return await heads.materialize(cp)
    return None


def _child_input(spec: GraphSpec, source: Any) -> Mapping[str, Any]:
    schema = spec.input_schema or spec.schema
    if isinstance(source, Mapping) and schema.kind != "dict":
        source = {k: v for k, v in source.items() if k in schema.channels}
    try:
        return input_update(spec, source)
    except InvalidUpdateError as exc:
        raise InvalidUpdateError(f"subgraph {spec.name!r}: {exc}") from exc


def on_task_loop(ctx: TaskContext, coro: Coroutine[Any, Any, T], api: str) -> T:
    """Run ``coro`` on the run's loop for a sync node (in a worker thread) and wait: the
    sync API of a subgraph called inside a node (``invoke``, ``batch``)."""
    try:
        refuse_on_task_loop(ctx, api)
    except ConfigError:
        coro.close()
        raise
    return asyncio.run_coroutine_threadsafe(coro, ctx.loop).result()


def refuse_on_task_loop(ctx: TaskContext, api: str) -> None:
    """A sync call from the run's own loop thread (an async or inline node) would wait
    for itself: refuse it, naming the async call to use."""
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        return
    if running is ctx.loop:
        raise ConfigError(
            f"{api}() was called on oncegraph's own event loop (inside an async or inline "
            f"node) and would wait for itself forever; use `await a{api}(...)` there (the "
            "graph runs as a subgraph of the node), or make the node a plain (sync) function"
        )


def invoke_inside(child: CompiledGraph, ctx: TaskContext, source: Any) -> Any:
    """``child.invoke(...)`` called by a sync node (in a worker thread): run it as a
    subgraph on the run's loop and wait."""
    return on_task_loop(ctx, run_nested(child, ctx, source), "invoke")


async def stream_nested(
    child: CompiledGraph,
    ctx: TaskContext,
    source: Any,
    shape: Callable[[Callable[[Any], None]], Emit],
) -> AsyncIterator[Any]:
    """``child.astream(...)`` inside task ``ctx``: the child runs as a subgraph (on the
    run's loop) and its events are yielded as a top-level stream of it yields them.

    ``shape(put)`` is the caller's stream emit, which turns events into the items it
    yields and hands each to ``put``. The consumer may iterate on another loop than the
    run's (``stream()`` in a sync node iterates on the portal): items then cross loops
    in order, and the end of the stream comes after the last of them."""
    consumer = asyncio.get_running_loop()
    queue: asyncio.Queue[Any] = asyncio.Queue()

    def put(item: Any) -> None:  # called on the run's loop, where the child runs
        if consumer is ctx.loop:
            queue.put_nowait(item)
        else:
            consumer.call_soon_threadsafe(queue.put_nowait, item)

    coro = run_nested(child, ctx, source, also=shape(put))
    if consumer is ctx.loop:
        future: asyncio.Future[Any] = asyncio.ensure_future(coro)
    else:
        future = asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, ctx.loop))
    async with aclosing(drained(queue, future)) as items:
        async for item in items:
            yield item


def stream_inside(ctx: TaskContext, agen: AsyncIterator[T]) -> Iterator[T]:
    """``child.stream(...)`` called by a sync node: iterate ``agen`` (its
    :func:`stream_nested`) on the run's loop."""
    refuse_on_task_loop(ctx, "stream")
    yield from walk_blocking(
        agen, lambda coro: asyncio.run_coroutine_threadsafe(coro, ctx.loop).result()
    )


def refuse_in_replay(ctx: TaskContext | None, name: str) -> None:
    """A graph with a checkpointer of its own, called inside a replay's node, would start
    a run of its own that no replay policy governs (its tools live, its irreversible
    ones unblocked): refuse it, so a replay touches nothing outside its run."""
    if ctx is None or ctx.replay is None:
        return
    raise ConfigError(
        f"node {ctx.node_name!r} of this {ctx.replay.mode} replay called graph {name!r}, "
        "which has a checkpointer of its own, so the call would start a separate, live run "
        "outside the replay; a replay runs nothing outside its own run. Compile that graph "
        "without a checkpointer (it then runs as part of this run, and its tools follow "
        "the replay's mode), or replay its own runs separately"
    )


__all__ = [
    "child_place",
    "child_thread",
    "invoke_inside",
    "on_task_loop",
    "refuse_in_replay",
    "refuse_on_task_loop",
    "run_nested",
    "run_subgraph_node",
    "stream_inside",
    "stream_nested",
]
