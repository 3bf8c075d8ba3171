"""``Submitted``: the handle ``app.submit()`` returns for a run queued for the workers.

``handle.run_id``, ``handle.thread_id`` and ``handle.record`` (the :class:`RunRecord` as
queued) say what was queued; ``status()`` reads the run's status now; ``result(timeout)``
waits until a worker has taken the run to an end and returns what ``invoke`` would have
returned (the state, with ``__interrupt__`` when the run paused for an answer);
``cancel()`` abandons the run if no worker has claimed it yet. Each has an ``a...``
coroutine twin for async callers; the sync ones run it through the portal.

Invariants:

* ``result`` reads the database, never a cache: the run's own newest checkpoint, so a
  later run on the same thread does not change the answer.
* ``cancel`` is the run service's (:meth:`~oncegraph.runs.service.RunService.cancel`):
  a compare-and-set on the run's fencing token while it is still ``queued``: a worker's
  claim bumps the token, so a run a worker took is never abandoned under it (that is an
  operator's ``abandon``); the refusal says so. The cancellation is kept in the audit
  record with its actor and reason.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from oncegraph._forward import Forwarded
from oncegraph.errors import (
    NeedsReviewError,
    RunClosedError,
    RunFailedError,
    RunNotFoundError,
    RunStateError,
    WaitTimeoutError,
)
from oncegraph.graph.io import output_values
from oncegraph.runs.context import RunContext
from oncegraph.runtime.portal import run_sync
from oncegraph.storage.records import RunRecord, RunStatus

Cancel = Callable[[str, str, str], Awaitable[RunRecord]]
"""``cancel(run_id, reason, actor)``: the run service's cancel of a queued run."""

# Statuses at which result() stops waiting (a failed or parked run may be continued
# later by an operator, but it is an answer for now).
_ENDED = frozenset(
    {
        RunStatus.COMPLETED,
        RunStatus.INTERRUPTED,
        RunStatus.FAILED,
        RunStatus.NEEDS_REVIEW,
        RunStatus.ABANDONED,
    }
)
_FIRST_WAIT = 0.005
_MAX_WAIT = 0.25


class Submitted:
    """A queued run's handle (see the module docstring)."""

    __slots__ = ("_cancel", "_ctx", "record")

    def __init__(self, ctx: RunContext, record: RunRecord, cancel: Cancel) -> None:
        self._ctx = ctx
        self._cancel = cancel
        self.record = record

    run_id = Forwarded[str]("record")
    thread_id = Forwarded[str]("record")

    def __repr__(self) -> str:
        return f"Submitted(run_id={self.run_id!r}, thread_id={self.thread_id!r})"

    # -- status ----------------------------------------------------------------------------

    async def arun(self) -> RunRecord:
        """The run as stored now."""
        found = await self._ctx.store.get_run(self.run_id)
        if found is None:
            raise RunNotFoundError(f"run {self.run_id} is not in the store any more")
        return found

    async def astatus(self) -> RunStatus:
        return (await self.arun()).status

    def status(self) -> RunStatus:
        return run_sync(self.astatus(), "status")

    # -- result ----------------------------------------------------------------------------

    async def aresult(self, timeout: float | None = None) -> Any:
        """Wait (up to ``timeout`` seconds; None: as long as it takes) until the run ends,
        then return its output as ``invoke`` does, or raise what ended it."""
        deadline = None if timeout is None else time.monotonic() + timeout
        wait = _FIRST_WAIT
        while True:
            run = await self.arun()
            if run.status in _ENDED:
                return await self._outcome(run)
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeoutError(
                    f"run {self.run_id} is still {run.status} after {timeout}s; it goes on "
                    "in the workers: call result() again to wait longer, or cancel() it "
                    "while it is queued"
                )
            pause = wait if deadline is None else min(wait, max(0.0, deadline - time.monotonic()))
            await asyncio.sleep(pause)
            wait = min(wait * 2, _MAX_WAIT)

    def result(self, timeout: float | None = None) -> Any:
        return run_sync(self.aresult(timeout), "result")

    async def _outcome(self, run: RunRecord) -> Any:
        from oncegraph.runs import reading

        if run.status is RunStatus.FAILED:
            raise RunFailedError(
                f"run {run.run_id} failed: {run.error}. It can be continued with "
                f"app.resume({run.run_id!r}) (or invoke(None, config)) once the cause is fixed",
                run_id=run.run_id,
            )
        if run.status is RunStatus.NEEDS_REVIEW:
            raise NeedsReviewError(
                f"run {run.run_id} is parked for review: {run.error}", run_id=run.run_id
            )
        if run.status is RunStatus.ABANDONED:
            raise RunClosedError(f"run {run.run_id} was abandoned: {run.error}")
        ctx = self._ctx
        found = await ctx.store.list_checkpoints(run.thread_id, run_id=run.run_id, limit=1)
        if not found:
            raise RunStateError(f"run {run.run_id} is {run.status} but has no checkpoint")
        snap = await reading.state(ctx, run.thread_id, found[0].checkpoint_id)
        if ctx.graph.schema.is_root:  # the state is one value: that value
            return snap.values
        values = dict(snap.values)
        if run.status is RunStatus.INTERRUPTED:
            values["__interrupt__"] = list(snap.interrupts)
        return output_values(ctx.graph, values)

    # -- cancel ----------------------------------------------------------------------------

    async def acancel(self, *, reason: str = "cancelled", actor: str = "submitter") -> RunRecord:
        """Abandon the run if no worker has claimed it yet (see the module docstring)."""
        self.record = await self._cancel(self.run_id, reason, actor)
        return self.record

    def cancel(self, *, reason: str = "cancelled", actor: str = "submitter") -> RunRecord:
        return run_sync(self.acancel(reason=reason, actor=actor), "cancel")


__all__ = ["Submitted"]
