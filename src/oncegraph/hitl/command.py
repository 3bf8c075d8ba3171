"""``Command``: a node's combined update + routing, or the caller's answer to an interrupt."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

_UNSET: Any = object()

N = TypeVar("N")


@dataclass(frozen=True)  # not slots: Command[...](...) sets __orig_class__ (refused quietly)
class Command(Generic[N]):
    """Returned by a node: ``Command(update={...}, goto="next")``.

    Passed to ``invoke`` by the caller: ``Command(resume=answer)`` answers the pending
    ``interrupt()`` of the thread's interrupted run.

    Generic in the names it may go to, as in LangGraph: a node annotated
    ``-> Command[Literal["a", "b"]]`` declares those targets (``get_graph()`` draws them).
    """

    update: Mapping[str, Any] | None = None
    goto: str | Sequence[str] | None = None
    resume: Any = _UNSET

    @property
    def has_resume(self) -> bool:
        return self.resume is not _UNSET

    def goto_nodes(self) -> tuple[str, ...]:
        if self.goto is None:
            return ()
        if isinstance(self.goto, str):
            return (self.goto,)
        return tuple(self.goto)
