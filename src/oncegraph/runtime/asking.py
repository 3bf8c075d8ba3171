"""The driver's asking and answering, mixed into :class:`~oncegraph.runtime.driver.Driver`.

A step whose tasks called ``interrupt()`` (or a static breakpoint) keeps each question
as an interrupt write of its checkpoint and pauses the run; at the top level the run
becomes ``interrupted`` and the caller gets the questions, in a subgraph the question is
raised into the parent's task. A subgraph's driver hands the parent task's answers down
to its open interrupts, in the ONE order answers go in
(:func:`~oncegraph.runtime.moves.next_answer`), counting what its committed steps used
so the next answer is known after any crash.
"""

from __future__ import annotations

from typing import Any

from oncegraph.errors import GraphInterrupt
from oncegraph.runtime.decisions import Interrupt
from oncegraph.runtime.driverparts import DriverParts
from oncegraph.runtime.engine import BREAKPOINT, Head, StepPlan, with_finished
from oncegraph.runtime.interrupt import Interrupt as InterruptValue
from oncegraph.runtime.moves import next_answer, next_write, open_interrupts
from oncegraph.runtime.stepevents import emit_interrupts, emit_update, finished_shown
from oncegraph.runtime.streaming import wants
from oncegraph.storage.records import CheckpointRecord, RunRecord, RunStatus, TaskWrite, WriteKind


class Asking(DriverParts):
    """How the driver pauses a step that asked, and hands a subgraph its answers."""

    __slots__ = ()

    async def _interrupt(
        self, decision: Interrupt, head: Head, run: RunRecord, plan: StepPlan
    ) -> Head:
        cp = head.checkpoint
        for task, value, index in decision.waits:
            await self.store.put_task_write(
                TaskWrite(run.thread_id, cp.checkpoint_id, task, WriteKind.INTERRUPT, index, value),
                run_id=run.run_id,
                fence=self.fence,
            )
        self.stopped = True
        if finished_shown(self.emit):  # the siblings that finished now: their writes are kept
            for r in decision.done:
                if r.key not in plan.done and r.key not in self._streamed:
                    emit_update(self.emit, self.spec, r, (cp.checkpoint_id, cp.step))
        if self.parent is not None:  # ask through the parent's task
            _, value, _ = decision.waits[0]
            if decision.breakpoint:  # a pause, not a question: the caller continues it
                value = {BREAKPOINT: value}
            index = self.answer_base + self._consumed
            self.parent.interrupt_count = index + 1
            self.parent.interrupt_raised = (value, index)
            self._exited = True
            raise GraphInterrupt(value, index)
        await self.set_status(run, RunStatus.INTERRUPTED, None)
        self._exited = True
        # what the caller gets: the state with the writes of the step's finished tasks
        # (kept as task writes, applied when the step commits), as LangGraph returns it
        self.shown = with_finished(self.spec, head.values, decision.done)
        if decision.breakpoint:
            self.emit("updates", {"__interrupt__": ()})
        else:
            by_task: dict[str, list[InterruptValue]] = {}
            for task, value, index in decision.waits:
                asked = InterruptValue.of(cp.checkpoint_id, task, index, value)
                self.interrupts.append(asked)
                by_task.setdefault(task, []).append(asked)
            emit_interrupts(self.emit, head.values, by_task.values())
        if any(r.update for r in decision.done) and wants(self.emit, "values"):
            self.emit("values", self.shown)  # as LangGraph: the last values, those writes applied
        return head

    async def _hand_down_answers(
        self, cp: CheckpointRecord, writes: list[TaskWrite], run: RunRecord
    ) -> list[TaskWrite]:
        """A subgraph: give its open interrupts the parent task's answers meant for them.

        The parent task's answers are numbered; this subgraph's start at ``answer_base``,
        and ``metadata["answers"]`` of its checkpoints counts those its committed steps
        used, so the next one to hand down is known after any crash."""
        parent = self.parent
        assert parent is not None
        writes = list(writes)
        given = sum(w.kind == WriteKind.RESUME for w in writes)
        consumed = int(cp.metadata.get("answers", 0)) + given
        order = self.spec.order
        while self.answer_base + consumed < len(parent.resume_values):
            waiting = open_interrupts(writes)
            if not waiting:
                break
            task = next_answer(order, waiting)
            answer = parent.resume_values[self.answer_base + consumed]
            write = next_write(writes, run, cp, task, WriteKind.RESUME, answer)
            await self.store.put_task_write(write, run_id=run.run_id, fence=self.fence)
            writes.append(write)
            consumed += 1
        self._consumed = consumed
        return writes

    def _replayed_answers(self, node: str, cp: Any) -> tuple[Any, ...]:
        """In a replay: the answers the original run got at this node and step."""
        if self.replay is None:
            return ()
        return self.replay.answers.get((node, cp.step + 1), ())


__all__ = ["Asking"]
