"""``interrupt(value)``: pause the run and ask the caller for an answer.

On resume the node restarts from the top; the n-th ``interrupt()`` call of the node
returns the n-th answer given so far, so several interrupts in one node are matched by
order. The pause is a :class:`~oncegraph.errors.GraphInterrupt` signal, a
``BaseException`` outside the error tree; a node that swallows it is reported as an
error (law 11).
"""

from __future__ import annotations

from typing import Any

from oncegraph.errors import ConfigError, GraphInterrupt
from oncegraph.runtime.context import current_task


def interrupt(value: Any) -> Any:
    task = current_task()
    if task is None:
        raise ConfigError("interrupt() can only be called inside a running graph node")
    index = task.interrupt_count
    task.interrupt_count += 1
    if index < len(task.resume_values):
        return task.resume_values[index]
    task.interrupt_raised = (value, index)
    raise GraphInterrupt(value, index)
