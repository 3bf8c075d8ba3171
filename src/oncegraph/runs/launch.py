"""Who starts a run, for a surface that acts for someone (the HTTP server's API keys).

``app.invoke(input, config)`` acts for the program that calls it; a server acts for its
callers, so it says who each call is for with a :class:`Launch`
(``app.astream(..., launch=Launch(actor="api:otto"))``), and the run service keeps it:

* a NEW run carries its actor (``RunRecord.started_by``: in the run record's launch
  info, written in the same transaction as the run) and gets an audit record of its
  start (``action="start"``) right after it is created, before its first node runs;
* a CONTINUE (input ``None``) goes through the audited Continue, the one operators use
  (:meth:`~oncegraph.runs.commands.Commands.resume`), so it is recorded with its actor
  and reason as every Continue is; an interrupt's answer is recorded with the actor.

``run_id`` names the new run before it starts: a request bound to that id (the server's
idempotency key) finds the run again after a crash instead of starting another. It must
be a fresh id of :func:`~oncegraph.ids.new_run_id`; a run that exists is never replaced
(the store refuses the second insert).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from oncegraph.errors import ConfigError

LAUNCH_KEY = "launch"
"""Where a run's launch info sits in its stored config."""


@dataclass(frozen=True, slots=True)
class Launch:
    """See the module docstring. ``configured``: a continue goes on with this call's
    config (timeouts), not the run's stored one; ``request_key``: the idempotency key of
    the request that started it (kept in the audit record)."""

    actor: str
    reason: str | None = None
    run_id: str | None = None
    request_key: str | None = None
    configured: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.actor, str) or not self.actor.strip():
            raise ConfigError("a Launch needs an actor: who the run is started for")
        if self.run_id is not None and (
            not isinstance(self.run_id, str) or not self.run_id.startswith("run_")
        ):
            raise ConfigError(
                f"Launch(run_id=...) takes a fresh id from oncegraph.ids.new_run_id(); got "
                f"{self.run_id!r}"
            )

    def info(self) -> dict[str, Any]:
        """What the run record keeps (under :data:`LAUNCH_KEY` of its config)."""
        return {"actor": self.actor}


def started_by(config: Any) -> str | None:
    """The actor a stored run config names, or None (started by a program's call)."""
    info = config.get(LAUNCH_KEY) if isinstance(config, Mapping) else None
    actor = info.get("actor") if isinstance(info, Mapping) else None
    return actor if isinstance(actor, str) else None


__all__ = ["LAUNCH_KEY", "Launch", "started_by"]
