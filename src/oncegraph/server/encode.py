"""Records and snapshots as JSON for the API and the UI, masked for who is asking.

:class:`Shown` is the server's one output boundary: every JSON body, SSE and AG-UI
event, command response, error message and UI page is built through it. For every key
below ``admin`` it masks twice, with one :class:`~oncegraph.runs.masking.Masker`:

* by key: each field any tool declared secret, wherever it appears (a tool call's
  arguments inside a message, too);
* by value: every secret value the masker learned (from the effects of the threads and
  runs the request reads, :func:`oncegraph.server.context.shown`, and from every tool
  call it is shown) is replaced inside every string: an error, a tool result, a text.

An ``admin`` sees what is stored.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from oncegraph.runs.compensating import compensates
from oncegraph.runs.holders import Holder
from oncegraph.runs.launch import started_by
from oncegraph.runs.masking import Masker, mask_value
from oncegraph.runs.replay import kind_of
from oncegraph.runs.snapshots import timestamp
from oncegraph.server.auth import Principal, Role
from oncegraph.server.database_app import WITHHELD
from oncegraph.storage.records import AuditRecord, EffectRecord, RunRecord

if TYPE_CHECKING:
    from oncegraph.runs.commands import RedeliveryPreview


def jsonable(value: Any) -> Any:
    """Plain JSON of anything a run emits (dataclasses, enums, tuples, pydantic models);
    what has no JSON form is shown by its ``repr``."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, enum.Enum):
        return jsonable(value.value)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return jsonable(dump(mode="json"))
    return repr(value)


def _as_stored(record: Any, *, leaving: tuple[str, ...] = ()) -> dict[str, Any]:
    """A record's fields (but those ``leaving``) as stored, in their declared order: the
    encoders put what they show otherwise in their places."""
    return {
        f.name: getattr(record, f.name) for f in dataclasses.fields(record) if f.name not in leaving
    }


class Shown:
    """What one principal may see: masks fields and learned values for every role below
    ``admin`` (see the module docstring)."""

    def __init__(
        self,
        principal: Principal,
        masks: Mapping[str, tuple[str, ...]],
        masker: Masker | None = None,
        *,
        blind: bool = False,
    ) -> None:
        self.principal = principal
        fields: set[str] = set()
        for declared in masks.values():
            fields.update(declared)
        self.fields = tuple(sorted(fields))
        self.unmasked = principal.can(Role.ADMIN)
        # the masks are unknown (a database served without the app's code): below admin,
        # no payload (and no tool's error text) is shown at all; messages are, as stored
        self.blind = blind and not self.unmasked
        self.masker = masker if masker is not None else Masker(masks)
        # reads the masked values of the request's threads again (a live stream's new
        # effects); set by oncegraph.server.context.shown
        self.refresh: Callable[[], Awaitable[None]] | None = None

    async def relearn(self) -> None:
        """Learn what the threads' effects made since (a live stream's next event)."""
        if self.refresh is not None and not self.unmasked:
            await self.refresh()

    def value(self, value: Any) -> Any:
        plain = jsonable(value)
        if self.unmasked:
            return plain
        if self.blind:
            return None if plain is None else WITHHELD
        self.masker.learn(plain)  # a tool call shown here tells its masked arguments
        keyed = mask_value(plain, self.fields) if self.fields else plain
        return self.masker.value(keyed)

    def text(self, text: Any) -> Any:
        """A message (an error's, a reason) as this principal may read it."""
        if self.unmasked or not isinstance(text, str):
            return text
        return self.masker.text(text)

    def error(self, error: Mapping[str, Any]) -> dict[str, Any]:
        """An ``{"code", "message"}`` outcome, its message masked."""
        return {k: (self.text(v) if k == "message" else v) for k, v in error.items()}

    def run(self, run: RunRecord, holder: Holder | None = None) -> dict[str, Any]:
        """The run as shown; with its ``holder`` (read by the caller for a running run):
        who holds it, and ``crashed``, true when its process stopped without finishing."""
        shown = {
            "run_id": run.run_id,
            "thread_id": run.thread_id,
            "status": str(run.status),
            "workflow_name": run.workflow_name,
            "workflow_version": run.workflow_version,
            "parent_run_id": run.parent_run_id,
            "parent_checkpoint_id": run.parent_checkpoint_id,
            "launch_reason": self.text(run.launch_reason),
            "made_as": kind_of(run),  # replay, branch, time_travel; invoke, submit
            "started_by": started_by(run.config),
            "mode": run.mode,
            "input": self.value(run.input),
            "error": self.text(run.error),
            "tenant": getattr(run, "tenant", None),
            "created_at": run.created_at,
            "updated_at": run.updated_at,
        }
        if holder is not None:
            shown["holder"] = holder.as_dict()
            shown["crashed"] = holder.crashed
        return shown

    def effect(self, record: EffectRecord) -> dict[str, Any]:
        last = record.attempts[-1] if record.attempts else None
        return {
            "effect_id": record.effect_id,
            "effect_type": record.effect_type,
            "effect_class": str(record.effect_class),
            "command_id": record.command_id,
            "run_id": record.run_id,
            "thread_id": record.thread_id,
            "node": record.node,
            "status": str(record.status),
            "request_hash": record.request_hash,
            "checkpoint_id": record.checkpoint_id,
            "recipient": self.text(record.recipient),
            "request": self.value(record.request),
            "result": self.value(record.result),
            "provider_reference": self.text(record.provider_reference),
            "source_version": self.text(record.source_version),
            # a tool's own exception may quote its arguments: withheld with the payloads
            "error": WITHHELD if self.blind and record.error else self.text(record.error),
            "attempts": [self._attempt(a) for a in record.attempts],
            "last_attempt": self._attempt(last) if last is not None else None,
            "created_at": record.created_at,
            "updated_at": record.updated_at,
            "compensates": compensates(record),
        }

    def _attempt(self, attempt: Any) -> Any:
        """One attempt: withheld but for when and how it ended where the masks are unknown."""
        if not self.blind:
            return self.value(attempt)
        plain = jsonable(attempt)
        if isinstance(plain, dict):
            return {k: (WITHHELD if k == "error" and v else v) for k, v in plain.items()}
        return WITHHELD

    def audit(self, record: AuditRecord) -> dict[str, Any]:
        return {
            **_as_stored(record),
            "reason": self.text(record.reason),
            "details": self.value(record.details),
        }

    def snapshot(self, snap: Any) -> dict[str, Any]:
        return {
            "values": self.value(snap.values),
            "next": list(snap.next),
            "config": jsonable(snap.config),
            "metadata": self.value(snap.metadata),
            "created_at": timestamp(snap.created_at),
            "parent_config": jsonable(snap.parent_config),
            "run_id": snap.run_id,
            "checkpoint_id": snap.config.get("checkpoint_id"),
            "interrupts": self.value(snap.interrupts),
        }

    def preview(self, preview: RedeliveryPreview) -> dict[str, Any]:
        return {
            **_as_stored(preview, leaving=("expires_at",)),
            "recipient": self.text(preview.recipient),
            "payload": self.value(preview.payload),
            "status": str(preview.status),
            "last_attempt": self.value(preview.last_attempt),
            "recipient_answer": self.text(preview.recipient_answer),
        }

    def runs(
        self, runs: Iterable[RunRecord], holders: Mapping[str, Holder] | None = None
    ) -> list[dict[str, Any]]:
        found = holders or {}
        return [self.run(r, found.get(r.run_id)) for r in runs]


__all__ = ["Shown", "jsonable"]
