"""``Command``: a node's combined update + routing, or the caller's answer to an interrupt."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from oncegraph._json import register_tagged
from oncegraph.errors import ConfigError
from oncegraph.hitl.send import Send

_UNSET: Any = object()

N = TypeVar("N")


@dataclass(frozen=True)  # not slots: Command[...](...) sets __orig_class__ (refused quietly)
class Command(Generic[N]):
    """Returned by a node: ``Command(update={...}, goto="next")``; ``goto`` may also hold
    :class:`~oncegraph.hitl.send.Send` items (each a task with its own payload).

    Passed to ``invoke`` by the caller: ``Command(resume=answer)`` answers the pending
    ``interrupt()`` of the thread's interrupted run.

    A node of a subgraph may return ``Command(graph=Command.PARENT, update=..., goto=...)``:
    the subgraph stops there, and the parent's task that ran it ends with that update
    and routing instead of the subgraph's output.

    Generic in the names it may go to, as in LangGraph: a node annotated
    ``-> Command[Literal["a", "b"]]`` declares those targets (``get_graph()`` draws them).
    """

    update: Mapping[str, Any] | None = None
    goto: str | Send | Sequence[str | Send] | None = None
    resume: Any = _UNSET
    graph: str | None = None

    PARENT: ClassVar[str] = "__parent__"

    def __post_init__(self) -> None:
        if self.graph is not None and self.graph != Command.PARENT:
            raise ConfigError(
                f"Command(graph={self.graph!r}) is not supported: a node may update and "
                "route its own graph (leave graph out) or its parent graph "
                "(graph=Command.PARENT)"
            )

    def __repr__(self) -> str:  # the fields given, as LangGraph shows a Command
        fields = (
            ("graph", self.graph, self.graph is not None),
            ("update", self.update, self.update is not None),
            ("resume", self.resume, self.has_resume),
            ("goto", self.goto, self.goto is not None),
        )
        shown = [f"{name}={value!r}" for name, value, given in fields if given]
        return f"Command({', '.join(shown)})"

    @property
    def has_resume(self) -> bool:
        return self.resume is not _UNSET

    def goto_nodes(self) -> tuple[str | Send, ...]:
        if self.goto is None:
            return ()
        if isinstance(self.goto, (str, Send)):
            return (self.goto,)
        return tuple(self.goto)


def _command_json(command: Command[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if command.graph is not None:
        out["graph"] = command.graph
    if command.update is not None:
        out["update"] = command.update
    if command.has_resume:
        out["resume"] = command.resume
    if command.goto is not None:
        out["goto"] = command.goto
    return out


def _command_of(data: Any) -> Command[Any]:
    update = data.get("update")
    if isinstance(update, list):  # (field, value) pairs come back from JSON as lists
        update = [tuple(p) if isinstance(p, list) and len(p) == 2 else p for p in update]
    return Command(
        graph=data.get("graph"),
        update=update,
        resume=data.get("resume", _UNSET),
        goto=data.get("goto"),
    )


# a Command held in state or in a Send's payload is stored as a tagged JSON form
register_tagged("command", lambda v: isinstance(v, Command), _command_json, _command_of)
