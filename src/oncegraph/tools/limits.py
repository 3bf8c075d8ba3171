"""Limits on what one model can fan out: calls per turn, calls per run, calls at once.

A model decides how many tool calls a turn asks for. Without a bound, one turn of 2,000
``refund`` calls runs 2,000 refunds. :class:`ToolLimits` bounds it:

* ``per_turn``: the tool calls one assistant message may ask for. Over it, NONE of the
  turn's calls runs; each gets an error tool message saying why, so the model can ask
  again with fewer.
* ``per_run``: the tool calls since the run's input (the last user message), this turn's
  included. Over it, the same: nothing of this turn runs, the model is told. Counted from
  the messages in the state, so the decision is the same on every resume and replay.
* ``concurrency``: the calls of one turn that run at the same time; the rest wait for a
  free slot (every call still runs, in the order given).

``None`` lifts a limit. The defaults are generous for an agent and small enough that a
runaway turn is refused before it reaches a recipient.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from oncegraph.errors import ConfigError
from oncegraph.state import lcmessages

DEFAULT_PER_TURN = 64
DEFAULT_PER_RUN = 1000
DEFAULT_CONCURRENCY = 16


def _bound(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(
            f"ToolLimits({name}=...) must be a positive integer or None; got {value!r}"
        )
    return value


@dataclass(frozen=True, slots=True)
class ToolLimits:
    """Bounds on the tool calls of a ``ToolNode`` (see the module docstring)."""

    per_turn: int | None = DEFAULT_PER_TURN
    per_run: int | None = DEFAULT_PER_RUN
    concurrency: int | None = DEFAULT_CONCURRENCY

    def __post_init__(self) -> None:
        for name in ("per_turn", "per_run", "concurrency"):
            _bound(name, getattr(self, name))

    def refusal(self, messages: Sequence[Any], calls: int) -> str | None:
        """Why a turn of ``calls`` tool calls, the last of ``messages``, may not run, or
        ``None`` when it may. The text is what the model reads."""
        if self.per_turn is not None and calls > self.per_turn:
            return (
                f"this turn asked for {calls} tool calls and at most {self.per_turn} may run "
                "in one turn, so none of them ran. Ask for fewer calls at a time."
            )
        if self.per_run is not None:
            total = calls + earlier_calls(messages[:-1])
            if total > self.per_run:
                return (
                    f"this run has asked for {total} tool calls and at most {self.per_run} "
                    "may run in one run, so none of this turn's calls ran. Finish with what "
                    "you have, or tell the user the request needs more steps than allowed."
                )
        return None


def earlier_calls(messages: Sequence[Any]) -> int:
    """Tool calls asked for since the last user message (the run's input)."""
    total = 0
    for message in reversed(messages):
        as_dict = lcmessages.to_message_dict(message) if lcmessages.is_message(message) else message
        if not isinstance(as_dict, Mapping):
            continue
        role = as_dict.get("role")
        if role in ("user", "human"):
            break
        if role in ("assistant", "ai"):
            total += len(as_dict.get("tool_calls") or ())
    return total


__all__ = ["DEFAULT_CONCURRENCY", "DEFAULT_PER_RUN", "DEFAULT_PER_TURN", "ToolLimits"]
