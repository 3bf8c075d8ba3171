"""What a call's input means on a paused run, in LangGraph's terms.

* ``invoke(None, config)`` on a run paused at a static breakpoint continues it, as an
  answer to the breakpoint;
* ``Command(resume={interrupt_id: answer})`` answers that interrupt when it is the one to
  answer next (the run service answers the thread's open questions one per call, in node
  order); any other map of ids is refused with the order to use, never handed to one
  node as its answer by mistake.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from oncegraph.errors import ConfigError
from oncegraph.hitl.command import Command
from oncegraph.runtime.config import RunConfig
from oncegraph.runtime.engine import is_breakpoint
from oncegraph.runtime.interrupt import Interrupt
from oncegraph.runtime.moves import answer_order, open_interrupts
from oncegraph.storage.records import RunStatus

if TYPE_CHECKING:
    from oncegraph.runs.context import RunContext


async def route(ctx: RunContext, cfg: RunConfig, input: Any) -> Any:
    """``input`` as the run service takes it (see the module docstring)."""
    by_id = isinstance(input, Command) and input.has_resume and is_id_map(input.resume)
    if (input is not None and not by_id) or cfg.thread_id is None or cfg.run_id is not None:
        return input
    await ctx.setup()
    store = ctx.store
    runs = await store.list_runs(thread_id=cfg.thread_id, limit=1)
    if not runs or runs[0].status is not RunStatus.INTERRUPTED:
        return input
    ctx.check_run(runs[0], f"thread {cfg.thread_id!r}")
    thread = await store.get_thread(cfg.thread_id)
    if thread is None or thread.head_checkpoint_id is None:
        return input
    head = thread.head_checkpoint_id
    waiting = open_interrupts(await store.get_task_writes(cfg.thread_id, head))
    if input is None:
        if waiting and all(is_breakpoint(t, w.value) for t, w in waiting.items()):
            return Command(resume=None)
        return input
    order = ctx.graph.order
    asked = [waiting[task] for task in answer_order(order, waiting)]
    ids = [Interrupt.of(head, w.task, w.idx, w.value).id for w in asked]
    answers = dict(input.resume)
    if len(answers) == 1 and ids and next(iter(answers)) == ids[0]:
        return Command(resume=answers[ids[0]])
    if set(answers) <= set(ids):
        raise ConfigError(
            f"Command(resume={{id: answer}}) answers one interrupt per call here, the "
            f"next one first: {ids[0]!r} (node {asked[0].task!r}); the open ones, in "
            f"order: {ids}. Nothing was answered."
        )
    return input


def is_id_map(value: Any) -> bool:
    """A ``{interrupt id: answer}`` map (ids are 32 hex characters)."""
    return (
        isinstance(value, Mapping)
        and bool(value)
        and all(
            isinstance(k, str) and len(k) == 32 and all(c in "0123456789abcdef" for c in k)
            for k in value
        )
    )


__all__ = ["is_id_map", "route"]
