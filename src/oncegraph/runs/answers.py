"""What a call's input means on a paused run, in LangGraph's terms.

* ``invoke(None, config)`` on a run paused at a static breakpoint continues it, as an
  answer to the breakpoint;
* ``Command(resume={interrupt_id: answer, ...})`` answers each of those open
  interrupts (:class:`ByInterrupt`: each answer goes to the question its id names, never
  to another); a map naming an interrupt that is not open is refused, nothing answered;
* ``Command(resume=answer)`` while the run waits on several interrupts is refused with
  :class:`~oncegraph.errors.AmbiguousAnswerError` listing their ids (which question it
  answers is not said); with one open interrupt it answers that one;
* ``invoke(None, config)`` on a run waiting for an answer to a question (an
  ``interrupt(value)``) returns what its last call returned: the state, with the step's
  finished tasks' writes, and the open questions (LangGraph runs the step again, and the
  asking node asks again). Nothing runs: a node is not run again only to ask what it
  asked already, and the question stays open for ``Command(resume=...)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from oncegraph.errors import AmbiguousAnswerError, ConfigError
from oncegraph.hitl.command import Command
from oncegraph.runtime.config import RunConfig
from oncegraph.runtime.engine import is_breakpoint, plan_step, with_finished
from oncegraph.runtime.interrupt import Interrupt
from oncegraph.runtime.moves import answer_order, open_interrupts
from oncegraph.storage.records import RunRecord, RunStatus, TaskWrite, ThreadRecord

if TYPE_CHECKING:
    from oncegraph.runs.context import RunContext, RunResult


@dataclass(frozen=True, slots=True)
class ByInterrupt:
    """Answers by question: ``(task key, answer)`` for each open interrupt answered."""

    answers: tuple[tuple[str, Any], ...]


async def route(
    ctx: RunContext,
    cfg: RunConfig,
    input: Any,
    opened: tuple[ThreadRecord | None, RunRecord | None] | None = None,
    *,
    defer: bool = False,
) -> Any:
    """``input`` as the run service takes it (see the module docstring).

    ``opened``: the thread's row and latest run as :meth:`RunContext.open_thread` just
    read them (else read here). ``defer``: a single answer is returned as it is, without
    reading the questions: the caller's :func:`oncegraph.runs.answering.take` refuses it
    under the run's lock when it is ambiguous (:func:`refuse_ambiguous`)."""
    answering = isinstance(input, Command) and input.has_resume
    if (input is not None and not answering) or cfg.thread_id is None or cfg.run_id is not None:
        return input
    if defer and answering and not is_id_map(input.resume):
        return input
    if opened is None:
        await ctx.setup()
        opened = await ctx.open_thread(cfg.thread_id)
    thread, latest = opened
    if latest is None or latest.status is not RunStatus.INTERRUPTED:
        return input
    if thread is None or thread.head_checkpoint_id is None:
        return input
    head = thread.head_checkpoint_id
    waiting = open_interrupts(await ctx.store.get_task_writes(cfg.thread_id, head))
    if input is None:
        if waiting and all(is_breakpoint(t, w.value) for t, w in waiting.items()):
            return Command(resume=None)
        return input
    asked = [waiting[task] for task in answer_order(ctx.graph.order, waiting)]
    by_id = {Interrupt.of(head, w.task, w.idx, w.value).id: w.task for w in asked}
    if not is_id_map(input.resume):
        refuse_ambiguous(head, asked)
        return input
    answers = dict(input.resume)
    unknown = [i for i in answers if i not in by_id]
    if unknown:
        raise ConfigError(
            f"Command(resume={{id: answer}}) names interrupts that are not open: {unknown}; "
            f"the open ones: {list(by_id)} (app.get_state(config).interrupts). Nothing "
            "was answered."
        )
    # the answers by question; the Command's update and goto go on with them
    return replace(input, resume=ByInterrupt(tuple((by_id[i], a) for i, a in answers.items())))


def refuse_ambiguous(checkpoint_id: str, asked: Iterable[TaskWrite]) -> None:
    """Refuse one answer (not by interrupt id) while several questions are open on
    ``checkpoint_id`` (``asked``: its open interrupts, in answer order)."""
    asked = list(asked)
    questions = [w for w in asked if not is_breakpoint(w.task, w.value)]
    if len(questions) > 1:
        ids = [Interrupt.of(checkpoint_id, w.task, w.idx, w.value).id for w in asked]
        raise AmbiguousAnswerError(
            "When there are multiple pending interrupts, you must specify the interrupt "
            f"id when resuming: {len(questions)} questions are open "
            f"({', '.join(repr(i) for i in ids)}). Answer them with "
            "invoke(Command(resume={interrupt_id: answer, ...}), config), the ids from "
            "app.get_state(config).interrupts. Nothing was answered."
        )


async def asked_again(
    ctx: RunContext,
    thread: ThreadRecord | None,
    latest: RunRecord | None,
    emit: Callable[[str, Any], None],
) -> RunResult | None:
    """``invoke(None, config)`` on a thread whose latest run waits for an answer (see the
    module docstring): its state and open questions (streamed as the run streamed them:
    one ``__interrupt__`` update per asking task); None when it is something else."""
    from oncegraph.runs.context import RunResult

    if thread is None or latest is None or latest.status is not RunStatus.INTERRUPTED:
        return None
    head = await ctx.heads.at(thread.thread_id, thread)
    cp = head.checkpoint
    if cp.run_id != latest.run_id:
        return None
    writes = await ctx.store.get_task_writes(thread.thread_id, cp.checkpoint_id)
    waiting = open_interrupts(writes)
    if not waiting or any(is_breakpoint(t, w.value) for t, w in waiting.items()):
        return None  # a breakpoint: route() made the call its continue
    spec = ctx.graph
    done = list(plan_step(spec, head, writes).done.values())  # applied in write order
    asked: tuple[Any, ...] = tuple(  # Interrupt objects, as the driver gives them
        Interrupt.of(cp.checkpoint_id, w.task, w.idx, w.value)
        for w in (waiting[task] for task in answer_order(spec.order, waiting))
    )
    for task in dict.fromkeys(i.node for i in asked):
        emit("updates", {"__interrupt__": tuple(i for i in asked if i.node == task)})
    return RunResult(latest, with_finished(spec, head.values, done), asked)


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


__all__ = ["ByInterrupt", "asked_again", "is_id_map", "refuse_ambiguous", "route"]
