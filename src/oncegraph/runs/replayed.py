"""What ``app.replay()`` hands back: the new run, not only its values.

A replay is a NEW run (guarantee 9), so its caller gets that run: its id and thread (to
find it again in the UI, the CLI or ``app.runs(parent_run_id=...)``), its status when
the call returned (``completed``, ``interrupted``, parked as ``needs_review`` ...) and its
result (the state in LangGraph's shape, with ``__interrupt__`` when it paused).

Before, ``replay()`` returned the state values themselves; reading the handle as that
dict (``out["messages"]``) still works for now and warns (``DeprecationWarning``): read
``out.result["messages"]`` instead.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from oncegraph._forward import Forwarded
from oncegraph.storage.records import RunRecord

_OLD_SHAPE = (
    "replay() returns the new run's handle now; read its state as handle.result[...] "
    "(reading the handle as the state dict will stop working in a later release)"
)


class MadeRun:
    """What a handle of a run a command made says of it, read off its ``run`` record."""

    __slots__ = ()
    run: RunRecord

    run_id = Forwarded[str]("run")
    thread_id = Forwarded[str]("run")

    @property
    def status(self) -> str:
        """The run's status when the command returned."""
        return str(self.run.status)


@dataclass(frozen=True, slots=True, eq=False)
class ReplayRun(MadeRun, Mapping[str, Any]):
    """The run a replay made (see the module docstring)."""

    run: RunRecord
    result: dict[str, Any]

    parent_run_id = Forwarded[str | None]("run")
    launch_reason = Forwarded[str]("run", "Why it was made: the operator's reason.")

    @property
    def config(self) -> dict[str, Any]:
        """The config that names it (``get_state``, ``get_state_history``)."""
        return {"configurable": {"thread_id": self.thread_id, "run_id": self.run_id}}

    # -- the old shape: the state dict itself (deprecated) ---------------------------------

    def __getitem__(self, key: str) -> Any:
        warnings.warn(_OLD_SHAPE, DeprecationWarning, stacklevel=2)
        return self.result[key]

    def __iter__(self) -> Iterator[str]:
        warnings.warn(_OLD_SHAPE, DeprecationWarning, stacklevel=2)
        return iter(self.result)

    def __len__(self) -> int:
        return len(self.result)

    def __repr__(self) -> str:
        return (
            f"ReplayRun(run_id={self.run_id!r}, status={self.status!r}, "
            f"launch_reason={self.launch_reason!r})"
        )


__all__ = ["ReplayRun"]
