"""Running one task of a step: call the node, turn what it did into a ``TaskOutcome``.

A coroutine node is awaited on the loop; a sync node runs in a worker thread (so a
timeout can stop WAITING on it and other runs keep going) unless it is ``inline``; a
subgraph node runs the child graph's loop under this task
(:mod:`oncegraph.runtime.subgraph`). A task made by ``Send`` gets its payload as input
instead of the state. The node's return value becomes a
:class:`~oncegraph.runtime.engine.TaskResult`; an ``interrupt()``, a park or crash
signal from the ledger, or an exception becomes the matching field of the outcome.

A node with a retry policy (``add_node(retry_policy=...)``) that raises a retryable
error restarts from the top after the policy's wait (``RunConfig.sleep``): effect
results its failed attempt staged are saved first, so the new attempt finds them in
the ledger instead of calling again. Nothing here writes to a store except through
``save`` (the driver's hook that keeps a finished sibling's writes) and that flush.

A node that stops because this process lost the run (``LeaseLostError``: its lock's
session broke, its token moved on) did not fail: its outcome is a crash (write no
status, record what finished under the fence), and the run is claimed again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import itertools
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from oncegraph._waiting import wait_done
from oncegraph.errors import (
    ConfigError,
    GraphInterrupt,
    InterruptSwallowedError,
    LeaseLostError,
    MissingRecordError,
    NodeCancelledError,
    NodeError,
    NodeTimeoutError,
    OnceGraphError,
    ParentCommand,
    StorageError,
    ToolTimeoutError,
    _CrashSignal,
    _ParkSignal,
)
from oncegraph.graph.constants import PULL, PUSH, push_path, triggers
from oncegraph.graph.spec import GraphSpec, NodeSpec
from oncegraph.hitl.command import Command
from oncegraph.ids import derived_message_id
from oncegraph.runtime import executor, nodecache
from oncegraph.runtime.config import NODE_FINISHED
from oncegraph.runtime.context import TaskContext, reset_task, set_task
from oncegraph.runtime.engine import NODE_FAILURE, Head, Task, TaskOutcome, TaskResult
from oncegraph.runtime.lcstream import child_config, reset_child, token_handler
from oncegraph.runtime.node_runtime import runtime_of
from oncegraph.runtime.stepevents import task_id
from oncegraph.runtime.streaming import keeping, modes_of, wants
from oncegraph.runtime.updates import result_of
from oncegraph.state import lcmessages as lc
from oncegraph.storage.records import TaskWrite, WriteKind

Save = Callable[[TaskContext, TaskResult], Awaitable[None]]
# Runs a subgraph node (oncegraph.runtime.subgraph.run_subgraph_node): given by the driver's
# maker, so this module needs no import of the subgraph runner (which builds a driver).
RunSubgraph = Callable[[Any, GraphSpec, TaskContext, Head, Task], Awaitable[Any]]


async def run_task(
    spec: GraphSpec,
    ctx: TaskContext,
    head: Head,
    save: Save | None,
    task: Task | None = None,
    subgraphs: RunSubgraph | None = None,
) -> TaskOutcome:
    """Run task ``task`` (node ``ctx.node_name``) on ``head``'s state; never raises
    except on cancellation. ``subgraphs`` runs a node that is a compiled graph."""
    task = task or Task(ctx.node_name, ctx.node_name)
    node = spec.nodes[task.node]
    streamed = _count_messages(ctx)
    events = wants(ctx.emit, "events")  # nothing is built for a caller that does not listen
    token = set_task(ctx)
    if events:
        ctx.emit("events", _event("node_start", ctx))
    try:
        outcome = await _outcome(
            spec, node, ctx, head, save, task, streamed is not None, subgraphs
        )
    finally:
        reset_task(token)
    if streamed is not None and not streamed and outcome.result is not None:
        _emit_messages(spec, ctx, outcome.result, head)
    if outcome.result is not None and NODE_FINISHED in ctx.config.configurable:
        ctx.config.configurable[NODE_FINISHED](task.node)
    if events:
        status = "ok" if outcome.result else "interrupted" if outcome.interrupt else "error"
        ctx.emit("events", {**_event("node_end", ctx), "status": status})
    return outcome


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


def _count_messages(ctx: TaskContext) -> list[int] | None:
    """When the caller streams ``messages``: count what the task streams itself (a model
    adapter's tokens), so its whole messages are emitted only if nothing was."""
    if not wants(ctx.emit, "messages"):
        return None
    counted: list[int] = []
    inner = ctx.emit

    def emit(mode: str, payload: Any) -> None:
        if mode == "messages":
            counted.append(1)
        inner(mode, payload)

    ctx.emit = keeping(modes_of(inner), emit)
    return counted


def with_pushed(result: TaskResult, pushed: list[tuple[str, Any]]) -> TaskResult:
    """``result`` with the messages its node pushed while running before its own."""
    update = dict(result.update)
    for key, message in reversed(pushed):
        given = update.get(key)
        rest = [] if given is None else given if isinstance(given, list) else [given]
        update[key] = [message, *rest]
    return dataclasses.replace(result, update=update, shown=None)


def _with_message_ids(
    spec: GraphSpec, ctx: TaskContext, result: TaskResult, streamed: bool = False
) -> TaskResult:
    """The messages the task returned, each with its id: an id-less one gets the id
    derived from the run (the one effects are keyed with), step, node and position, so a
    re-run or a recorded replay of the task makes the same ids (and the tool calls they
    carry find their records). ``streamed`` (the caller streams ``messages``): every
    message is normalized here, so the streamed messages are the stored ones."""
    channels = spec.schema.channels
    if not any(
        k in channels and channels[k].flavor is not None and (streamed or _lacks_id(v))
        for k, v in result.update.items()
    ):
        return result  # every message has its id (the common case): nothing to give
    count = itertools.count()

    def new_id() -> str:
        return derived_message_id(ctx.key_run_id, ctx.node, ctx.step, next(count))

    update = {
        k: channels[k].delta(v, new_id) if k in channels and channels[k].flavor is not None else v
        for k, v in result.update.items()
    }
    return TaskResult(
        result.node, update, result.goto, result.task, shown=result.update, more=result.more
    )


def _lacks_id(update: Any) -> bool:
    """Does a message of this update have no id (or is it not a message object yet)?"""
    items = update if type(update) is list else [update]
    for m in items:
        if isinstance(m, dict):
            if not m.get("id"):
                return True
        elif not getattr(m, "id", None):
            return True
    return False


def _emit_messages(spec: GraphSpec, ctx: TaskContext, result: TaskResult, head: Head) -> None:
    """LangGraph's ``messages`` mode also yields the messages a node returns (a model
    called without token streaming, a tool's answer), each once, at the node's end: a
    message already in the state the node read (a node returning the state it got) is
    not new and is not streamed again."""
    meta = stream_metadata(ctx, written=True)
    for key, value in result.update.items():
        channel = spec.schema.channels.get(key)
        if channel is None or channel.flavor is None:
            continue
        had = head.values.get(key) or ()
        known = {lc.message_id(m) for m in had} if had else set()
        for message in value if isinstance(value, list) else channel.delta(value):
            if known and lc.message_id(message) in known:
                continue
            kind = message.get("type") if isinstance(message, Mapping) else None
            kind = kind or getattr(message, "type", None)
            if kind != "remove":
                ctx.emit("messages", (message, meta))


def _event(kind: str, ctx: TaskContext) -> dict[str, Any]:
    event: dict[str, Any] = {"event": kind, "node": ctx.node_name, "step": ctx.step}
    if ctx.task_key != ctx.node_name:
        event["task"] = ctx.task_key
    if ctx.ns:
        event["ns"] = ctx.ns
    return event


async def _outcome(
    spec: GraphSpec,
    node: NodeSpec,
    ctx: TaskContext,
    head: Head,
    save: Save | None,
    task: Task,
    messages: bool = False,
    subgraphs: RunSubgraph | None = None,
) -> TaskOutcome:
    key = task.key if task.key != task.node else ""
    entry = None
    if node.cache_policy is not None:
        entry = nodecache.cache_key(spec, node, _input(spec, node, head, task))
        hit = await nodecache.lookup(spec, entry, key, task.node) if entry else None
        if hit is not None:
            if save is not None:
                await save(ctx, hit)
            return TaskOutcome(task.node, result=hit, task=key)
    from oncegraph.ledger.facts import prepare  # the ledger's, reached at call time

    if node.subgraph is None:  # a subgraph's own tasks draw, each under its own scope
        await prepare(ctx)  # a task that may have run before: its recorded facts, read once
    kept = ctx.node_failure
    if kept is not None and node.error_handler is not None:
        # the node failed before and its handler then failed: the handler runs again
        # with the node's error as kept, and the node does not run again
        failed = RecordedNodeError(str(kept.get("error", "")))
        return await _handled(spec, node, ctx, head, save, task, failed, subgraphs)
    attempt = 0
    while True:
        attempt += 1
        ctx.attempt = attempt
        if ctx.pushed:
            ctx.pushed = []  # a failed attempt's pushed messages are not kept
        if attempt == 1:
            ctx.first_attempt_at = time.time()
        try:
            try:
                value = await _run(spec, node, ctx, head, task, subgraphs)
            except ParentCommand as sent:  # a subgraph this task ran routes this graph
                value = dataclasses.replace(sent.command, graph=None)
            except asyncio.CancelledError as cancelled:
                running = asyncio.current_task()
                if running is None or running.cancelling():
                    raise  # the run (or its step) is being cancelled: stop
                raise NodeCancelledError(  # the node's own code raised it: a failure
                    f"node {task.node!r} raised asyncio.CancelledError itself ({cancelled}); "
                    "raise another exception to fail the node, or let the run be cancelled",
                    node=task.node,
                    error=cancelled,
                ) from cancelled
            if isinstance(value, Command) and value.graph is not None:
                # for the graph that runs this one as a subgraph: this graph's step stops
                # (the driver records the task's finished calls first), its parent's
                # task ends with the command; at the top level it is the run's error
                return TaskOutcome(task.node, error=ParentCommand(value), task=key)
            if ctx.interrupt_raised is not None:
                raise InterruptSwallowedError(
                    f"node {task.node!r} caught the interrupt signal (a bare except or except "
                    "BaseException?) and returned normally; let GraphInterrupt propagate",
                    node=task.node,
                )
            result = result_of(spec, task.node, value, key)
            if ctx.pushed:
                result = with_pushed(result, ctx.pushed)
            result = _with_message_ids(spec, ctx, result, messages)
            if entry is not None:
                await nodecache.store(spec, node, entry, ctx, result)
            if save is not None:
                await save(ctx, result)
            return TaskOutcome(task.node, result=result, task=key)
        except (GraphInterrupt, _ParkSignal, _CrashSignal) as sig:
            return _signalled(task, key, sig)
        except Exception as exc:
            if _lost_lease(ctx, exc):  # not the node's failure: this process lost the run
                await _record_finished(ctx)
                return TaskOutcome(task.node, crash=exc, task=key)
            if ctx.interrupt_raised is not None and not isinstance(exc, OnceGraphError):
                exc = InterruptSwallowedError(
                    f"node {task.node!r} caught the interrupt signal and raised "
                    f"{type(exc).__name__} instead; let GraphInterrupt propagate",
                    node=task.node,
                )
            if await _retry(node, ctx, exc, attempt):
                continue
            if node.error_handler is not None and _retryable(exc):
                return await _handled(spec, node, ctx, head, save, task, exc, subgraphs)
            return TaskOutcome(task.node, error=exc, task=key)


async def _handled(
    spec: GraphSpec,
    node: NodeSpec,
    ctx: TaskContext,
    head: Head,
    save: Save | None,
    task: Task,
    exc: Exception,
    subgraphs: RunSubgraph | None,
) -> TaskOutcome:
    """The outcome of ``node``'s error handler after the node failed with ``exc``: its
    update (and ``Command`` routing) stand for the node's, under the handler's name, so
    the failed node's own edges do not fire. oncegraph's own errors (a ledger verdict, a
    lost lease) never reach a handler: they stop the run as before."""
    handler = node.error_handler
    assert handler is not None
    key = task.key if task.key != task.node else ""
    ctx.interrupt_count = 0
    ctx.interrupt_raised = None
    try:
        value = await _run(spec, handler, ctx, head, task, subgraphs, _failed(node.name, exc))
    except (GraphInterrupt, _ParkSignal, _CrashSignal) as sig:
        return _signalled(task, key, sig)
    except Exception as failed:
        if _lost_lease(ctx, failed):
            await _record_finished(ctx)
            return TaskOutcome(task.node, crash=failed, task=key)
        await _keep_node_failure(ctx, node.name, exc)
        return TaskOutcome(task.node, error=failed, task=key)
    result = result_of(spec, handler.name, value, task.key)
    result = _with_message_ids(spec, ctx, result)
    if save is not None:
        await save(ctx, result)
    return TaskOutcome(task.node, result=result, task=key)


def _signalled(task: Task, key: str, sig: BaseException) -> TaskOutcome:
    """The outcome of a task whose node raised an interrupt, a park or a fault."""
    if isinstance(sig, GraphInterrupt):
        return TaskOutcome(task.node, interrupt=(sig.value, sig.index), task=key)
    if isinstance(sig, _ParkSignal):
        return TaskOutcome(task.node, park=(sig.effect_id, sig.reason), task=key)
    return TaskOutcome(task.node, crash=sig, task=key)


def _failed(node: str, exc: Exception) -> NodeError:
    return NodeError(f"node {node!r} failed: {exc!r}", node=node, error=exc)


class RecordedNodeError(Exception):
    """A node's error as kept when its error handler failed (its type's name and text,
    ``RuntimeError('boom')``): what a resumed run hands the handler, which runs again
    without running the node again."""


async def _keep_node_failure(ctx: TaskContext, node: str, exc: Exception) -> None:
    """The node failed and its error handler then failed too: keep the node's error with
    the step's writes, so the resumed step runs the handler again, not the node."""
    value = {"node": node, "error": repr(exc)[:2000]}
    write = TaskWrite(
        ctx.checkpoint_thread, ctx.checkpoint_id, ctx.task_key, WriteKind.ERROR, NODE_FAILURE, value
    )
    try:
        await ctx.store.put_task_write(write, run_id=ctx.run_id, fence=ctx.fence)
    except OnceGraphError:  # not kept: the resumed step runs the node again, as before
        return


def _lost_lease(ctx: TaskContext, exc: Exception) -> bool:
    """Did ``exc`` come from this process losing the run, not from the node itself?

    A ``LeaseLostError`` (the run's lock session broke, e.g. the database restarted, or
    its fencing token moved on), or a store error while the claim knows its lock may be
    gone. The run then stops as a crashed holder does: no status is written (it stays
    ``running`` under a lease that runs out), so a worker claims it again and it goes on
    from its last checkpoint, instead of becoming ``failed`` and waiting for an operator.
    """
    if isinstance(exc, LeaseLostError):
        return True
    claim = ctx.claim
    return isinstance(exc, StorageError) and claim is not None and claim.lost


async def _record_finished(ctx: TaskContext) -> None:
    """Results of calls that ended, staged for the step's commit: recorded now, under the
    run's fence, as far as it lets them (a result is never dropped while this process may
    still write it; once another holder took the run, the fence refuses the write and
    that holder applies the effect's class policy to the open record)."""
    staged, ctx.staged_effects = list(ctx.staged_effects), []
    for record in staged:
        try:
            await ctx.store.save_effect(record, fence=ctx.fence)
        except OnceGraphError:
            return  # fenced out, or the store is gone: nothing more is written here


def _retryable(exc: Exception) -> bool:
    """oncegraph's own errors are never retried by a node policy (a lost lease, a ledger
    verdict, a bad update), except timeouts."""
    return not isinstance(exc, OnceGraphError) or isinstance(
        exc, (NodeTimeoutError, ToolTimeoutError)
    )


async def _retry(node: NodeSpec, ctx: TaskContext, exc: Exception, attempt: int) -> bool:
    """Prepare another attempt of the node after ``exc``; False when none is due."""
    policy = node.retry.chosen(exc) if node.retry is not None else None
    if policy is None or attempt >= policy.max_attempts or not _retryable(exc):
        return False
    for record in ctx.staged_effects:  # a result the failed attempt recorded stays recorded
        await ctx.store.save_effect(record, fence=ctx.fence)
    ctx.staged_effects.clear()
    ctx.effect_count = 0
    ctx.interrupt_count = 0
    ctx.interrupt_raised = None
    ctx.subgraph_calls = 0
    if ctx.facts is not None:  # the next attempt gets the values this one drew
        ctx.facts.restart()
    ctx.fresh = False  # the failed attempt may have recorded effects
    delay = policy.delay(attempt)
    ctx.emit(
        "events",
        {**_event("node_retry", ctx), "attempt": attempt + 1, "error": repr(exc), "delay": delay},
    )
    await ctx.config.sleep(delay)
    return True


async def _run(
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
    state = _input(spec, node, head, task, ctx.remaining_steps)
    handler = token_handler(ctx, stream_metadata(ctx))  # None unless tokens are streamed
    ctx.callbacks = () if handler is None else (handler,)
    token = None if handler is None else child_config(node_config(ctx))
    try:
        args: tuple[Any, ...] = (state, node_config(ctx)) if node.takes_config else (state,)
        kwargs = _injected(node, ctx, error) if node.inject else {}
        if node.inline:  # on the loop thread: no hand-off, no timeout
            return node.fn(*args, **kwargs)
        return await _call(node, ctx, args, kwargs)
    finally:
        if handler is not None:
            reset_child(token)
            ctx.callbacks = ()


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


def _input(
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
        config["callbacks"] = list(ctx.callbacks)
    return config


__all__ = ["Save", "node_config", "run_task", "stream_metadata"]
