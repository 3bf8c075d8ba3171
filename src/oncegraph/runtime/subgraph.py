"""Subgraphs: a compiled graph run inside a task of its parent's run.

A compiled graph added as a node (``builder.add_node("child", child_app)``), or invoked
from inside a node (``child_app.invoke(...)`` / ``await child_app.ainvoke(...)`` in a
node, for a child compiled without a checkpointer of its own), runs its own loop on a
nested :class:`~oncegraph.runtime.driver.Driver` INSIDE the parent task:

* its checkpoints form their own chain on a thread of their own in the parent's store,
  ``<parent thread>|<task>:<parent checkpoint id>`` (``#n`` added for the n-th graph
  the same task runs), committed under the parent run's id and claim: every write
  carries the parent's fence (law 13), each step commits before its tasks run (law 1);
* its tasks' command ids are namespaced ``<parent scope>:<parent step>|<child task>``,
  so its effects have keys of their own under the parent run's ledger: a crash anywhere
  inside resumes without repeating a recorded effect;
* the parent task re-runs the subgraph on resume, and the subgraph continues from its
  own head (a finished subgraph is not run again; its output is read back);
* a park, failure or interrupt inside it is raised into the parent task; the parent's
  answers are handed down in order (``Driver._hand_down_answers``).

The parent's state (or a ``Send`` payload) is the child's input, limited to the fields
the child's input schema has; the child's output (its output schema's fields) is the
parent task's update, limited to the parent's fields.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from oncegraph.errors import ConfigError, InvalidUpdateError
from oncegraph.graph.io import input_update, output_values
from oncegraph.graph.spec import GraphSpec
from oncegraph.runtime.context import TaskContext
from oncegraph.runtime.driver import Driver
from oncegraph.runtime.engine import Head, Task
from oncegraph.runtime.heads import Heads
from oncegraph.runtime.streaming import namespaced
from oncegraph.storage.records import RunRecord, RunStatus

if TYPE_CHECKING:
    from oncegraph.app import CompiledGraph


def child_thread(thread_id: str, task: str, checkpoint_id: str, n: int = 0) -> str:
    """The thread a subgraph's checkpoints live on (see the module docstring)."""
    return f"{thread_id}|{task}:{checkpoint_id}{f'#{n}' if n else ''}"


async def run_subgraph_node(
    child: CompiledGraph, parent: GraphSpec, ctx: TaskContext, head: Head, task: Task
) -> dict[str, Any]:
    """The update a subgraph node gives its parent."""
    source = task.arg if task.is_send else head.values
    out = await run_nested(child, ctx, source)
    schema = parent.schema
    if schema.kind == "dict":
        return out
    return {k: v for k, v in out.items() if k in schema.channels}


async def run_nested(child: CompiledGraph, ctx: TaskContext, source: Any) -> dict[str, Any]:
    """Run ``child`` to its end inside task ``ctx``; its output values."""
    spec = child.spec
    n = ctx.subgraph_calls
    ctx.subgraph_calls += 1
    suffix = f"#{n}" if n else ""
    element = f"{ctx.task_key}:{ctx.step}{suffix}"
    thread = child_thread(ctx.checkpoint_thread, ctx.task_key, ctx.checkpoint_id, n)
    heads = Heads(spec, ctx.store)
    driver = Driver(
        spec,
        ctx.store,
        heads,
        ctx.config,
        namespaced(ctx.emit, element),
        ctx.claim,
        scope=f"{ctx.node}:{ctx.step}{suffix}",
        ns=(*ctx.ns, element),
        parent=ctx,
        answer_base=ctx.interrupt_count,
        root_thread=ctx.thread_id,
    )
    run = RunRecord(run_id=ctx.run_id, thread_id=thread, status=RunStatus.RUNNING)
    head = await heads.load(thread)
    if not head.checkpoint.checkpoint_id:  # first time: its input checkpoint
        head = await driver.start_nested(head, run, _child_input(spec, source))
    head = await driver.run(head, run)
    ctx.interrupt_count = driver.answer_base + int(head.checkpoint.metadata.get("answers", 0))
    return output_values(spec, head.values)


def _child_input(spec: GraphSpec, source: Any) -> Mapping[str, Any]:
    schema = spec.input_schema or spec.schema
    if isinstance(source, Mapping) and schema.kind != "dict":
        source = {k: v for k, v in source.items() if k in schema.channels}
    try:
        return input_update(spec, source)
    except InvalidUpdateError as exc:
        raise InvalidUpdateError(f"subgraph {spec.name!r}: {exc}") from exc


def invoke_inside(child: CompiledGraph, ctx: TaskContext, source: Any) -> dict[str, Any]:
    """``child.invoke(...)`` called by a sync node (in a worker thread): run it as a
    subgraph on the run's loop and wait."""
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is ctx.loop:
        raise ConfigError(
            "invoke() was called on oncegraph's own event loop (inside an async or inline "
            "node) and would wait for itself forever; use `await ainvoke(...)` there (the "
            "graph runs as a subgraph of the node), or make the node a plain (sync) function"
        )
    future = asyncio.run_coroutine_threadsafe(run_nested(child, ctx, source), ctx.loop)
    return future.result()


__all__ = ["child_thread", "invoke_inside", "run_nested", "run_subgraph_node"]
