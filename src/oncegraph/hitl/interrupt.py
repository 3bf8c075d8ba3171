"""``interrupt(value)``: pause the run and ask the caller for an answer.

On resume the node restarts from the top; the n-th ``interrupt()`` call of the node
returns the n-th answer given so far, so several interrupts in one node are matched by
order. The pause is a :class:`~oncegraph.errors.GraphInterrupt` signal, a
``BaseException`` outside the error tree; a node that swallows it is reported as an
error (guarantee 11).

What the caller sees of a pause is an :class:`Interrupt` (LangGraph's shape: ``.value``
and ``.id``), in ``result["__interrupt__"]``, the ``updates`` stream and
``get_state(config).interrupts``.

``interrupt()`` finds the task it runs in through what the runtime installs
(:func:`find_task_with`, from :mod:`oncegraph.runtime.context`); outside a run there is
none. Also importable from :mod:`oncegraph.runtime.interrupt` and the top level.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from oncegraph._json import canonical
from oncegraph.errors import ConfigError, GraphInterrupt, IncompatibleVersionError


class AskingTask(Protocol):
    """What ``interrupt()`` reads and counts on the running task (its context)."""

    node: str
    interrupt_count: int
    resume_values: list[Any]
    asked: list[Any]
    interrupt_raised: tuple[Any, int] | None


def _no_task() -> AskingTask | None:
    return None


#: The task running in this context (none outside a run); the runtime installs it.
_running_task: Callable[[], AskingTask | None] = _no_task


def find_task_with(running_task: Callable[[], AskingTask | None]) -> None:
    """Install what tells ``interrupt()`` the task it is called in (see :data:`_running_task`)."""
    global _running_task
    _running_task = running_task


@dataclass(frozen=True, slots=True)
class Interrupt:
    """An open question of a paused run.

    ``value`` is what ``interrupt(value)`` asked; ``id`` is stable for that question
    (the same in every view and after a restart); ``node`` names the task that asked
    and ``index`` which of its questions this is. JSON-storable: plain fields only
    (:meth:`to_json`); ``interrupt["value"]`` reads a field too, as the dict form did.

    Equal to LangGraph's ``Interrupt(value=, id=)``: two interrupts are equal when their
    value and id are; ``node`` and ``index`` are extra information, kept out of equality
    (and of the repr).
    """

    value: Any
    id: str = ""
    node: str = field(default="", compare=False, repr=False)
    index: int = field(default=0, compare=False, repr=False)

    @classmethod
    def of(cls, checkpoint_id: str, task: str, index: int, value: Any) -> Interrupt:
        raw = f"{checkpoint_id}:{task}:{index}".encode()
        return cls(value, hashlib.sha256(raw).hexdigest()[:32], task, index)

    def __getitem__(self, key: str) -> Any:
        if key in ("value", "id", "node", "index"):
            return getattr(self, key)
        raise KeyError(key)

    def to_json(self) -> dict[str, Any]:
        return {"value": self.value, "id": self.id, "node": self.node, "index": self.index}


def interrupt(value: Any) -> Any:
    task = _running_task()
    if task is None:
        raise ConfigError("interrupt() can only be called inside a running graph node")
    index = task.interrupt_count
    task.interrupt_count += 1
    if index < len(task.resume_values):
        if index < len(task.asked) and canonical(task.asked[index]) != canonical(value):
            raise IncompatibleVersionError(
                f"node {task.node!r} now asks {value!r} as its interrupt #{index}, but the "
                f"answer on record was given to {task.asked[index]!r}: the node's questions "
                "changed since they were answered (a deploy inserted or reordered an "
                "interrupt?). The answer is not applied to another question. Finish such runs "
                "on the old version (previous_versions), or abandon and restart them."
            )
        return task.resume_values[index]
    task.interrupt_raised = (value, index)
    raise GraphInterrupt(value, index)


__all__ = ["AskingTask", "Interrupt", "find_task_with", "interrupt"]
