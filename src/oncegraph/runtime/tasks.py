"""Running one task of a step: call the node, turn what it did into a ``TaskOutcome``.

A coroutine node is awaited on the loop; a sync node runs in a worker thread (so a
timeout can stop WAITING on it and other runs keep going) unless it is ``inline``; a
subgraph node runs the child graph's loop under this task
(:mod:`oncegraph.runtime.subgraph`). A task made by ``Send`` gets its payload as input
instead of the state. The node's return value becomes a
:class:`~oncegraph.runtime.engine.TaskResult`; an ``interrupt()``, a park or crash
signal from the ledger, or an exception becomes the matching field of the outcome.
How the node is called (its input, its config, threads and timeouts) is
:mod:`oncegraph.runtime.nodecall`; this module turns the call into the outcome.

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
import itertools
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from oncegraph.errors import (
    GraphInterrupt,
    InterruptSwallowedError,
    LeaseLostError,
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
from oncegraph.graph.spec import GraphSpec, NodeSpec
from oncegraph.hitl.command import Command
from oncegraph.ids import derived_message_id
from oncegraph.runtime import nodecache
from oncegraph.runtime.config import NODE_FINISHED
from oncegraph.runtime.context import TaskContext, reset_task, set_task
from oncegraph.runtime.engine import NODE_FAILURE, Head, Task, TaskOutcome, TaskResult
from oncegraph.runtime.nodecall import (  # node_config, stream_metadata: imported from here too
    RunSubgraph,
    node_config,
    node_input,
    run_node,
    stream_metadata,
)
from oncegraph.runtime.streaming import keeping, modes_of, wants
from oncegraph.runtime.updates import result_of
from oncegraph.state import lcmessages as lc
from oncegraph.storage.records import TaskWrite, WriteKind

Save = Callable[[TaskContext, TaskResult], Awaitable[None]]


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
            _TaskRun(spec, node, ctx, head, save, task, subgraphs), streamed is not None
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
        result.node,
        update,
        result.goto,
        result.task,
        shown=_shown(result.update, update),
        more=result.more,
        extra=result.extra,
    )


def _shown(returned: Mapping[str, Any], given: Mapping[str, Any]) -> Mapping[str, Any]:
    """What the ``updates`` stream shows of a task's messages: as the node returned them,
    but a LangChain message object with the id it was given, as LangGraph shows the
    message its ``add_messages`` gave an id to (a dict stays as returned)."""
    shown: dict[str, Any] | None = None
    for key, value in returned.items():
        items = value if type(value) is list else [value]
        ided = given.get(key)
        if (
            not items
            or type(ided) is not list
            or len(ided) != len(items)
            or not all(lc.is_message(m) for m in items)
            or not all(lc.is_message(m) for m in ided)
        ):
            continue
        if shown is None:
            shown = dict(returned)
        shown[key] = ided if type(value) is list else ided[0]
    return returned if shown is None else shown


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


@dataclasses.dataclass(frozen=True, slots=True)
class _TaskRun:
    """One task being run: node ``node`` of graph ``spec`` as task ``task`` on ``head``'s
    state, with the driver's ``save`` hook and how it runs subgraph nodes; what both the
    node's attempts and its error handler run with."""

    spec: GraphSpec
    node: NodeSpec
    ctx: TaskContext
    head: Head
    save: Save | None
    task: Task
    subgraphs: RunSubgraph | None

    @property
    def key(self) -> str:
        """The task's key as its outcome names it ("" for a task named as its node)."""
        return self.task.key if self.task.key != self.task.node else ""


async def _outcome(run: _TaskRun, messages: bool) -> TaskOutcome:
    spec, node, ctx, head, save, task = run.spec, run.node, run.ctx, run.head, run.save, run.task
    key = run.key
    entry = None
    if node.cache_policy is not None:
        entry = nodecache.cache_key(spec, node, node_input(spec, node, head, task))
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
        return await _handled(run, failed)
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
                value = await run_node(spec, node, ctx, head, task, run.subgraphs)
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
                return await _handled(run, exc)
            return TaskOutcome(task.node, error=exc, task=key)


async def _handled(run: _TaskRun, exc: Exception) -> TaskOutcome:
    """The outcome of ``node``'s error handler after the node failed with ``exc``: its
    update (and ``Command`` routing) stand for the node's, under the handler's name, so
    the failed node's own edges do not fire. oncegraph's own errors (a ledger verdict, a
    lost lease) never reach a handler: they stop the run as before."""
    spec, node, ctx, save, task = run.spec, run.node, run.ctx, run.save, run.task
    handler = node.error_handler
    assert handler is not None
    key = run.key
    ctx.interrupt_count = 0
    ctx.interrupt_raised = None
    try:
        value = await run_node(
            spec, handler, ctx, run.head, task, run.subgraphs, _failed(node.name, exc)
        )
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


__all__ = ["RunSubgraph", "Save", "node_config", "run_task", "stream_metadata", "with_pushed"]
