"""What a node or a tool is to a replay: a recorded fact, a repeatable computation or a
live request (``replay="recorded" | "repeat" | "live"``).

* ``recorded`` (the default for tools and ``effect()``): its recorded result IS the
  answer in a replay that must not touch the world: an evidence replay serves it, and
  so does a simulation replay when the tool has no ``simulate`` and no double;
* ``repeat`` (the default for nodes): a pure computation, run again in every replay
  (a calculator, a parser; a node's own code, whose recorded calls are served);
* ``live``: a live request; an evidence replay serves its record when the run has one
  and refuses it when not; a simulation replay needs its ``simulate`` (or a double).
  A NODE marked ``live`` makes requests outside the ledger, so no replay that must not
  touch the world runs it.

An evidence replay refuses only what is live and unrecorded, naming it and the fix:
record it (let the run reach it, or move the request into a tool or ``effect()``), mark
it ``repeat`` if running it again is harmless, or replay in mode ``simulation``.
"""

from __future__ import annotations

from typing import Literal

from oncegraph.errors import ConfigError

ReplayClass = Literal["recorded", "repeat", "live"]
CLASSES: tuple[ReplayClass, ...] = ("recorded", "repeat", "live")
NODE_CLASSES: tuple[ReplayClass, ...] = ("repeat", "live")


def replay_class(
    value: object, what: str, allowed: tuple[ReplayClass, ...] = CLASSES
) -> ReplayClass:
    """``value`` as a replay class for ``what`` (``"tool 'refund'"``), or a ConfigError."""
    if value in allowed:
        return value
    if value == "recorded" and allowed == NODE_CLASSES:
        raise ConfigError(
            f"{what}: replay='recorded' is for tools and effect(); a node's own code runs "
            "again in a replay, and what it asked the world is recorded through its tools, "
            "effect() and @task calls. Use replay='repeat' (the default) or 'live' for a "
            "node that makes requests outside them"
        )
    options = ", ".join(repr(c) for c in allowed)
    raise ConfigError(
        f"{what}: replay={value!r} is not a replay class; use one of {options} (recorded: "
        "served from the run's records; repeat: a pure computation, run again; live: a "
        "live request)"
    )


def refusal(what: str, run_id: str, *, simulate: bool) -> str:
    """The words of an evidence (or simulation) replay refusing ``what``, with the fixes."""
    fixes = "replay in mode='live'" if simulate else "replay in mode='simulation'"
    how = (
        "give it simulate= or pass doubles= to replay()"
        if simulate
        else "record it (let the run reach it first)"
    )
    return (
        f"this {'simulation' if simulate else 'evidence'} replay reached {what}, a live "
        f"request that run {run_id} has no record of, and a replay in this mode never calls "
        f"live. Fix: {how}, mark it replay='repeat' if running it again is harmless, or "
        f"{fixes}."
    )


__all__ = ["CLASSES", "NODE_CLASSES", "ReplayClass", "refusal", "replay_class"]
