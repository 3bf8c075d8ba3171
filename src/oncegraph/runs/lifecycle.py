"""What a call on a thread means for its runs. Pure: no store, no event loop.

``invoke(input, config)`` and its siblings mean one of three things, decided here from
the input and the thread's latest run (guarantee 9: resume is not replay):

* :class:`StartNew`: new input on a thread whose runs are all finished: a new run.
* :class:`ContinueRun`: ``None`` as input (or a worker's claimed run): continue the
  unfinished run, keeping its ``run_id``. Only a queued, running (crashed) or failed run
  continues this way; an interrupted run needs an answer, a parked one an operator.
* :class:`AnswerInterrupt`: ``Command(resume=answer)``: answer the interrupted run.

Anything else is refused with an error that names what to do instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from oncegraph.errors import ConfigError, NeedsReviewError, NoRunToResumeError, UnfinishedRunError
from oncegraph.hitl.command import Command
from oncegraph.runtime.config import RunConfig
from oncegraph.storage.records import UNFINISHED_STATUSES, RunRecord, RunStatus

FINAL_STATUSES = (RunStatus.COMPLETED, RunStatus.ABANDONED)
"""A run at one of these is over for good: it is never continued (a replay is a new run)."""


def thread_of(cfg: RunConfig) -> str:
    """The thread a stored run call is on (its id is checked by :class:`RunConfig`), or
    the error that says to name one."""
    if cfg.thread_id is None:
        raise ConfigError(
            "this graph has a checkpointer, so every call needs a thread: pass "
            "config={'thread_id': '<conversation id>'}"
        )
    return cfg.thread_id


@dataclass(frozen=True, slots=True)
class StartNew:
    input: Any


@dataclass(frozen=True, slots=True)
class ContinueRun:
    run: RunRecord


@dataclass(frozen=True, slots=True)
class AnswerInterrupt:
    run: RunRecord
    answer: Any
    # the Command's update and goto, if it brought any: the caller's writes, applied
    # before the answered step runs (None: the answer came alone)
    given: Command[Any] | None = None


Start = StartNew | ContinueRun | AnswerInterrupt


def plan_start(thread_id: str, input: Any, latest: RunRecord | None) -> Start:
    """Decide what ``input`` on ``thread_id`` means, given the thread's latest run."""
    if isinstance(input, Command) and input.has_resume:
        if latest is None or latest.status is not RunStatus.INTERRUPTED:
            raise NoRunToResumeError(
                f"thread {thread_id!r} has no interrupted run; Command(resume=...) answers an "
                "interrupt(). Use invoke(None, config) to continue a crashed or failed run."
            )
        given = input if input.update is not None or input.goto is not None else None
        return AnswerInterrupt(latest, input.resume, given)
    if input is None:
        return ContinueRun(continuable(thread_id, latest))
    if latest is not None and latest.status in UNFINISHED_STATUSES:
        raise UnfinishedRunError(
            f"thread {thread_id!r} has an unfinished run {latest.run_id} "
            f"({latest.status}). Continue it with invoke(None, config)"
            + (
                " or invoke(Command(resume=...), config)"
                if latest.status == RunStatus.INTERRUPTED
                else ""
            )
            + ", or abandon it with app.abandon(config) before sending new input."
        )
    return StartNew(input)


def continuable(thread_id: str, run: RunRecord | None, *, parked_too: bool = False) -> RunRecord:
    """``run`` if a plain continue applies to it; otherwise the error that says why not.

    ``parked_too``: an operator's explicit Continue may also go on with a parked run (its
    uncertain effect resolved, or its reconcile able to tell now)."""
    if run is None or run.status in FINAL_STATUSES:
        raise NoRunToResumeError(
            f"thread {thread_id!r} has no unfinished run to continue; send new input "
            "instead of None"
        )
    if run.status is RunStatus.INTERRUPTED:
        raise NoRunToResumeError(
            f"run {run.run_id} is waiting for an answer to interrupt(); continue it with "
            "invoke(Command(resume=<answer>), config)"
        )
    if run.status is RunStatus.NEEDS_REVIEW and not parked_too:
        raise NeedsReviewError(
            f"run {run.run_id} is parked for review: {run.error}. Check the recipient, "
            "record what you found with app.resolve_effect(effect_id, 'done' | 'not_done', "
            "actor=..., reason=...), then continue it with app.resume(run_id, actor=...)",
            run_id=run.run_id,
        )
    return run


__all__ = [
    "FINAL_STATUSES",
    "AnswerInterrupt",
    "ContinueRun",
    "Start",
    "StartNew",
    "continuable",
    "plan_start",
    "thread_of",
]
