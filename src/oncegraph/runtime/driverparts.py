"""What the driver's mixins (:mod:`oncegraph.runtime.commits`,
:mod:`oncegraph.runtime.asking`) use of :class:`~oncegraph.runtime.driver.Driver`: its
fields and the few methods they call, declared once for the type checker. The fields
live in the Driver's slots; a mixin adds none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from oncegraph.graph.spec import GraphSpec
    from oncegraph.runtime import durability
    from oncegraph.runtime.config import RunConfig
    from oncegraph.runtime.context import TaskContext
    from oncegraph.runtime.heads import Heads
    from oncegraph.runtime.replay import ReplayPolicy
    from oncegraph.runtime.stepevents import Where
    from oncegraph.runtime.streaming import Emit
    from oncegraph.storage.protocols import Checkpointer
    from oncegraph.storage.records import EffectRecord, RunRecord, RunStatus


class DriverParts:
    """The base of the driver's mixins (see the module docstring)."""

    if TYPE_CHECKING:
        spec: GraphSpec
        store: Checkpointer
        heads: Heads
        config: RunConfig
        emit: Emit
        replay: ReplayPolicy | None
        interrupts: list[Any]
        fresh: str | None
        scope: str
        parent: TaskContext | None
        answer_base: int
        root_thread: str
        stopped: bool
        shown: dict[str, Any] | None
        steps: int
        _consumed: int
        _planned: dict[str, EffectRecord]
        _planned_written: bool
        _streamed: set[str]
        _base: durability.Base | None
        _exited: bool

        @property
        def fence(self) -> int | None: ...

        @property
        def _where(self) -> Where: ...

        async def set_status(
            self, run: RunRecord, status: RunStatus, error: str | None
        ) -> None: ...

    else:
        __slots__ = ()


__all__ = ["DriverParts"]
