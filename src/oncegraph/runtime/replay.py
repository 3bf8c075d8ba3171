"""What a replay may touch (guarantee 9): the policy a replayed run's tasks consult.

A replay is a NEW run, on its own thread, started from a checkpoint of another run. Its
mode says what its effects may do:

* ``evidence``: every model call and tool call is answered from the recorded results of
  the run it replays; a call without a record is a ``MissingRecordError``, never a live
  call. Its effect ids are computed as the original run computed them (``key_run_id``),
  so the same messages get the same ids and the same tool calls find their records.
* ``simulation``: models answer from evidence; tools run their ``simulate`` (or a double
  passed for the replay); nothing reaches the outside world.
* ``live``: real calls under the replay's own ids, but an ``irreversible`` tool not named
  in ``allow_irreversible`` is blocked: the replay parks and names the effect.

Answers to ``interrupt()`` given in the original run are replayed by node, step and
order (from the audit log); a question never answered there pauses the replay. A
time-travel run (LangGraph's ``invoke(None, {"checkpoint_id": ...})``) is ``live`` with
``refire``: its interrupts ask again, as LangGraph's do, instead of taking the old answers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from oncegraph.errors import ConfigError

Mode = Literal["evidence", "simulation", "live"]
MODES: tuple[Mode, ...] = ("evidence", "simulation", "live")


@dataclass(frozen=True, slots=True)
class ReplayPolicy:
    mode: Mode
    evidence_run_id: str  # the run whose records answer evidence lookups
    allow_irreversible: frozenset[str] = frozenset()
    doubles: Mapping[str, Callable[..., Any]] = field(default_factory=dict)
    answers: Mapping[tuple[str, int], tuple[Any, ...]] = field(default_factory=dict)
    refire: bool = False  # interrupts ask again: the original run's answers are not given

    @classmethod
    def of(cls, mode: str, evidence_run_id: str, **options: Any) -> ReplayPolicy:
        if mode not in MODES:
            raise ConfigError(
                f"mode must be one of {', '.join(MODES)} (evidence: recorded results only; "
                f"simulation: tools' simulate; live: real calls); got {mode!r}"
            )
        return cls(mode, evidence_run_id, **options)

    @property
    def recorded(self) -> bool:
        """Effects keep the original run's ids and come from its records (not live)."""
        return self.mode != "live"

    def to_json(self) -> dict[str, Any]:
        """What is stored with the replay run (doubles are code: passed again to resume)."""
        out: dict[str, Any] = {
            "mode": self.mode,
            "evidence_run_id": self.evidence_run_id,
            "allow_irreversible": sorted(self.allow_irreversible),
        }
        if self.refire:
            out["refire"] = True
        return out

    @classmethod
    def from_json(
        cls,
        data: Mapping[str, Any],
        *,
        doubles: Mapping[str, Callable[..., Any]] | None = None,
        answers: Mapping[tuple[str, int], tuple[Any, ...]] | None = None,
    ) -> ReplayPolicy:
        return cls.of(
            str(data["mode"]),
            str(data["evidence_run_id"]),
            allow_irreversible=frozenset(data.get("allow_irreversible", ())),
            doubles=dict(doubles or {}),
            answers=dict(answers or {}),
            refire=bool(data.get("refire", False)),
        )


__all__ = ["MODES", "Mode", "ReplayPolicy"]
