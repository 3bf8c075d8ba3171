"""Calling a task's node: what it receives and how it is called.

The node's input (the state, its own input schema's fields, or a ``Send``'s payload),
its ``config`` and injected parameters, and the call itself: a coroutine node awaited on
the loop under its timeout, a sync node in a worker thread (so a timeout can stop
WAITING on it) unless it is ``inline``, a node with a ``TimeoutPolicy`` under
:mod:`oncegraph.runtime.watched`, a subgraph node through the driver's runner. What the
call's result or error becomes (a ``TaskOutcome``, a retry, the error handler) is
:mod:`oncegraph.runtime.tasks`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from oncegraph._waiting import wait_done
from oncegraph.errors import ConfigError, MissingRecordError, NodeError, NodeTimeoutError
from oncegraph.graph.constants import PULL, PUSH, push_path, triggers
from oncegraph.graph.spec import GraphSpec, NodeSpec
from oncegraph.runtime import executor, lcrun
from oncegraph.runtime.context import TaskContext
from oncegraph.runtime.engine import Head, Task
from oncegraph.runtime.lcstream import child_config, reset_child, token_handler
from oncegraph.runtime.node_runtime import runtime_of
from oncegraph.runtime.stepevents import task_id

# Runs a subgraph node (oncegraph.runtime.subgraph.run_subgraph_node): given by the driver's
# maker, so this module needs no import of the subgraph runner (which builds a driver).
RunSubgraph = Callable[[Any, GraphSpec, TaskContext, Head, Task], Awaitable[Any]]


async def run_node(
    spec: GraphSpec,
    node: NodeSpec,
    ctx: TaskContext,
    head: Head,
    task: Task,
    subgraphs: RunSubgraph | None,
    error: NodeError | None = None,
) -> Any:
    replay = ctx.replay
    if node.replay == "live" and replay is not None and replay.recorded:
        raise MissingRecordError(
            f"this {replay.mode} replay reached node {node.name!r}, marked replay='live': it "
            "makes requests outside its tools and effect() calls, which run "
            f"{replay.evidence_run_id} did not record, and a replay in this mode never calls "
            "live. Fix: move those requests into a tool or effect() so they are recorded, "
            "mark the node replay='repeat' if running it again is harmless, or replay in "
            "mode='live'."
        )
    if node.subgraph is not None:
        if subgraphs is None:
            raise ConfigError(
                f"node {task.node!r} is a compiled graph, and this driver was made without "
                "a subgraph runner; make drivers with RunContext.make_driver"
            )
        return await subgraphs(node.subgraph, spec, ctx, head, task)
    if task.timeout is not None:  # Send(timeout=...): this task's own, not the node's
        node = _timed_by(node, task.timeout)
    if node.timeout_policy is not None:  # an attempt under run/idle timeouts
        from oncegraph.runtime.watched import watched

        return await watched(
            node.timeout_policy, ctx, lambda: _called(spec, node, ctx, head, task, error)
        )
    return await _called(spec, node, ctx, head, task, error)


def _timed_by(node: NodeSpec, policy: Any) -> NodeSpec:
    """``node`` under a ``Send``'s timeout policy: a sync node (or one with only a run
    timeout) gets it as its plain timeout, an async one the policy itself."""
    if policy.idle_seconds is None and (not node.is_async or node.timeout_policy is None):
        return dataclasses.replace(node, timeout=policy.run_seconds, timeout_policy=None)
    return dataclasses.replace(node, timeout=policy.run_seconds, timeout_policy=policy)


async def _called(
    spec: GraphSpec,
    node: NodeSpec,
    ctx: TaskContext,
    head: Head,
    task: Task,
    error: NodeError | None,
) -> Any:
    state = node_input(spec, node, head, task, ctx.remaining_steps)
    handler = token_handler(ctx, stream_metadata(ctx))  # None unless tokens are streamed
    ctx.callbacks = () if handler is None else (handler,)
    # the caller's callbacks: this call is a run of its own under the graph's
    show_in, show_out = lcrun.shown(node.fn)
    run = None
    if lcrun.parent() is not None:  # nothing to do (or import) without callbacks
        run = await lcrun.node_run(
            ctx.node_name,
            show_in(state),
            [f"graph:step:{ctx.step + 1}"],
            stream_metadata(ctx, written=True),
        )
    async with running_as(run):
        if run is not None:
            ctx.callbacks = (_with_handler(lcrun.parent(), handler),)
        token = None if not ctx.callbacks else child_config(node_config(ctx))
        try:
            args: tuple[Any, ...] = (state, node_config(ctx)) if node.takes_config else (state,)
            kwargs = _injected(node, ctx, error) if node.inject else {}
            if node.inline:  # on the loop thread: no hand-off, no timeout
                value = node.fn(*args, **kwargs)
            else:
                value = await _call(node, ctx, args, kwargs)
        finally:
            if token is not None:
                reset_child(token)
            ctx.callbacks = ()
    if run is not None:
        await lcrun.ended(run, show_out(value))
    return value


@contextlib.asynccontextmanager
async def running_as(run: Any) -> AsyncIterator[None]:
    """The body runs as the callback ``run`` of a node or a task call (the parent of the
    runs it starts); an error it raises ends ``run`` as failed. ``None``: no callbacks."""
    entered = None if run is None else lcrun.enter(run)
    try:
        yield
    except BaseException as exc:
        if run is not None:
            await run.on_chain_error(exc)
        raise
    finally:
        if entered is not None:
            lcrun.leave(entered)


def _with_handler(manager: Any, handler: Any) -> Any:
    """The node run's child manager, with the token stream's handler when there is one."""
    if handler is None:
        return manager
    manager = manager.copy()
    manager.add_handler(handler, inherit=True)
    return manager


def _injected(node: NodeSpec, ctx: TaskContext, error: NodeError | None) -> dict[str, Any]:
    """The values of the node's injected parameters (:mod:`oncegraph.graph.params`)."""
    out: dict[str, Any] = {}
    for name, kind in node.inject:
        if kind == "config":
            out[name] = node_config(ctx)
        elif kind == "runtime":
            out[name] = runtime_of(ctx, ctx.attempt)
        elif kind == "writer":
            out[name] = runtime_of(ctx).stream_writer
        elif kind == "error":
            out[name] = error
        else:  # store: the app's key-value store (compile(store=...)), if any
            out[name] = ctx.config.store
    return out


def node_input(
    spec: GraphSpec, node: NodeSpec, head: Head, task: Task, remaining: int | None = None
) -> Any:
    """What the node receives: the state, or a Send's payload (as the node's own input
    class when it declares a dataclass or pydantic one). ``remaining``: the steps the
    run may still take, this one included, for the state's managed fields
    (``RemainingSteps``, :mod:`oncegraph.state.managed`)."""
    if not task.is_send:
        values: Mapping[str, Any] = head.values
        managed = spec.schema.managed
        if managed and remaining is not None:
            values = {**values, **{k: m.value(remaining) for k, m in managed.items()}}
        own = node.input_schema
        if own is not None and own.kind == "typeddict" and node.subgraph is None:
            # a node annotated with its own input schema reads that schema's fields
            return {k: v for k, v in values.items() if k in own.channels or k in own.managed}
        return spec.schema.to_node_input(values)
    arg = task.arg
    schema = node.input_schema
    if schema is not None and schema.kind in ("dataclass", "pydantic") and isinstance(arg, Mapping):
        return schema.source(**arg)
    return arg


async def _call(
    node: NodeSpec, ctx: TaskContext, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> Any:
    """Await a coroutine node, or a sync node in a worker thread, under its timeout."""
    timeout = node.timeout if node.timeout is not None else ctx.config.node_timeout
    if not node.is_async:
        return await _call_in_thread(node, ctx, args, kwargs, timeout)
    if timeout is None:
        return await node.fn(*args, **kwargs)
    try:
        async with asyncio.timeout(timeout) as cm:
            return await node.fn(*args, **kwargs)
    except TimeoutError as exc:
        if cm.expired():
            raise _timed_out(ctx, timeout) from exc
        raise


async def _call_in_thread(
    node: NodeSpec,
    ctx: TaskContext,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    timeout: float | None,
) -> Any:
    """A sync node in the worker pool; a timeout stops waiting, the thread cannot be
    stopped (it is reported to the pool as abandoned). Cancelled, the wait stops and a
    call that has not started yet is not made."""
    pool = executor.current()
    pool.check_room(f"node {ctx.node_name!r}")
    thread, call = pool.start(functools.partial(node.fn, *args, **kwargs))
    if timeout is None:
        return await call
    try:
        ended = await wait_done(call, timeout)
    except asyncio.CancelledError:
        call.cancel()
        raise
    if not ended:
        call.cancel()
        if not thread.done():
            pool.abandon(thread, f"node {ctx.node_name!r}")
        raise _timed_out(ctx, timeout)
    return call.result()


def _timed_out(ctx: TaskContext, timeout: float) -> NodeTimeoutError:
    return NodeTimeoutError(
        f"node {ctx.node_name!r} ran longer than node_timeout={timeout}s", node=ctx.node_name
    )


def langchain_run_id(ctx: TaskContext) -> uuid.UUID:
    """The UUID a LangChain Runnable called with task ``ctx``'s config runs under."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"oncegraph:{ctx.run_id}:{ctx.checkpoint_id}:{ctx.node}")


def node_config(ctx: TaskContext) -> dict[str, Any]:
    """The ``config`` a node (or router) that takes two parameters receives.

    LangGraph's shape (``config["configurable"]["thread_id"]`` and the caller's own
    ``configurable`` keys, ``config["metadata"]["langgraph_node"]``, ...), plus the
    flat keys oncegraph always gave (``config["thread_id"]``, ``config["node"]``,
    ``config["step"]`` and each ``configurable`` key). The run's id is
    ``config["configurable"]["run_id"]``; the flat ``config["run_id"]`` is a UUID made
    from it and the task (the same on every attempt and resume), because LangChain
    reads that key as the id of the Runnable run a node passes its config to."""
    thread = ctx.thread_id
    ns = "|".join(ctx.ns)
    configurable = {
        **ctx.config.configurable,
        "thread_id": thread,
        "run_id": ctx.run_id,
        "checkpoint_id": ctx.checkpoint_id,
        "checkpoint_ns": ns,
    }
    config = {
        "thread_id": thread,
        "run_id": langchain_run_id(ctx),
        "node": ctx.node_name,
        "step": ctx.step,
        **ctx.config.configurable,
        "configurable": configurable,
        "metadata": stream_metadata(ctx),
        "recursion_limit": ctx.config.recursion_limit,
    }
    if ctx.callbacks:  # the node's LangChain token stream (oncegraph.runtime.lcstream)
        # or the callback manager of its run (oncegraph.runtime.lcrun)
        first = ctx.callbacks[0]
        config["callbacks"] = first if hasattr(first, "add_handler") else list(ctx.callbacks)
    return config


def stream_metadata(ctx: TaskContext, *, written: bool = False) -> dict[str, Any]:
    """The metadata of a ``messages`` chunk emitted by task ``ctx`` (LangGraph's keys):
    model adapters emit ``ctx.emit("messages", (chunk, stream_metadata(ctx)))``. The
    namespace is the task's own (``"<node>:<task id>"`` under its graph's), as
    LangGraph's; ``thread_id`` is there when the caller named a thread; ``written``: a
    message the node wrote to the state (``ls_integration="langgraph"``), not a model's."""
    element = f"{ctx.node_name}:{task_id(ctx.checkpoint_id, ctx.task_key)}"
    ns = "|".join((*ctx.ns, element))
    meta: dict[str, Any] = {}
    if ctx.config.named_thread:
        meta["thread_id"] = ctx.thread_id
    meta.update(
        langgraph_step=ctx.step + 1,
        langgraph_node=ctx.node_name,
        langgraph_triggers=triggers(ctx.node_name, ctx.task_key != ctx.node_name),
        langgraph_path=_path(ctx),
        langgraph_checkpoint_ns=ns,
    )
    if written:
        meta["ls_integration"] = "langgraph"
    else:
        meta["checkpoint_ns"] = ns
    conf = ctx.config.configurable
    if ctx.config.run_id is not None:
        meta["run_id"] = ctx.config.run_id
    for key in _CALLER_IDS:  # the caller's ids of the run, as LangGraph passes them on
        if key in conf and key not in meta:  # a model chunk's namespace is the task's
            meta[key] = conf[key]
    return meta


_CALLER_IDS = ("checkpoint_id", "checkpoint_ns", "task_id", "assistant_id", "graph_id")
"""The ``configurable`` ids a ``messages`` chunk's metadata carries (nothing else of it:
a caller's ``configurable`` may hold credentials)."""


def _path(ctx: TaskContext) -> tuple[Any, ...]:
    if ctx.task_key == ctx.node_name:
        return (PULL, ctx.task_key)
    _, _, index = ctx.task_key.rpartition(":")  # a Send's task is "<node>:<index>"
    return push_path(int(index)) if index.isdigit() else (PUSH, ctx.task_key)


__all__ = [
    "RunSubgraph",
    "langchain_run_id",
    "node_config",
    "node_input",
    "run_node",
    "stream_metadata",
]
