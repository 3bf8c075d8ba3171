"""``oncegraph probe-recipient --record-for TOOL``: keep the dedup window the probe measured.

The measurement goes to the audit log (action ``recipient_measured``, the tool's name as
its target, the seconds in its details), where a redelivery's preview finds it for a
tool that does not declare ``dedup_window=`` itself (:mod:`oncegraph.runs.redelivery`).
What is recorded is the longest wait after which the key was still honoured: a lower
bound of the real window, so a redelivery is never told a key is kept longer than seen.
"""

from __future__ import annotations

from typing import Any

from oncegraph.cli.output import CliError
from oncegraph.cli.session import Where, run
from oncegraph.runs.redelivery import measured_audit


def seconds_measured(report: Any) -> float:
    """The window to record from a probe's report, or a CliError naming the fix."""
    if report is None or not report.retention:
        raise CliError(
            "--record-for records how long the recipient keeps a key, which only "
            "--retention measures: pass --retention with the waits to check (e.g. 60,600)",
            code=2,
        )
    kept = report.kept_for_at_least
    return 0.0 if kept is None else float(kept)


def record(where: Where, tool: str, report: Any, actor: str) -> float:
    """Append the measurement for ``tool`` to the audit log of ``where``'s database."""
    seconds = seconds_measured(report)
    audit = measured_audit(
        tool,
        seconds,
        actor,
        forgotten_by=report.forgotten_by,
        deduplicates=report.deduplicates,
        changed_payload=report.changed_payload,
    )

    async def act(service: Any) -> None:
        await service.store.setup()
        await service.store.append_audit(audit)

    run(where, act)
    return seconds


__all__ = ["record", "seconds_measured"]
