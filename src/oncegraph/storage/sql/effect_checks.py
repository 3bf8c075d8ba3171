"""What a stored effect must look like: the checks every effect row passes before anyone
can act on it, and the error that names a damaged one (guarantee 12: fail closed)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from oncegraph._json import dumps_str, loads
from oncegraph.errors import CorruptRecordError
from oncegraph.storage.records import Attempt, EffectClass, EffectRecord, EffectStatus
from oncegraph.storage.sql.rows_codec import Row


def attempts_json(attempts: Sequence[Attempt]) -> str:
    """The attempts column (a ``source_version`` key only on an attempt that has one)."""
    return dumps_str([_attempt_json(a) for a in attempts])


def _attempt_json(a: Attempt) -> dict[str, Any]:
    found: dict[str, Any] = {
        "number": a.number,
        "started_at": a.started_at,
        "ended_at": a.ended_at,
        "outcome": a.outcome,
        "error": a.error,
    }
    if a.source_version is not None:
        found["source_version"] = a.source_version
    return found


def attempts_from_json(text: Any) -> tuple[Attempt, ...]:
    """An effect's attempts as the ledger writes them: a list of objects numbered 1, 2,
    ... in order, each with its start time (and, once ended, its end time and outcome)."""
    found = loads(text)
    if not isinstance(found, list):
        raise TypeError(f"attempts must be a list of objects; got {found!r}")
    out = []
    for number, a in enumerate(found, 1):
        if not isinstance(a, dict):
            raise TypeError(f"attempts must be a list of objects; got {found!r}")
        if type(a.get("number")) is not int or a["number"] != number:
            raise ValueError(f"attempt {number} of {len(found)} is numbered {a.get('number')!r}")
        started: Any = a.get("started_at")
        ended: Any = a.get("ended_at")
        outcome, error, version = a.get("outcome"), a.get("error"), a.get("source_version")
        if not _is_time(started):
            raise ValueError(f"attempt {number} has no start time (started_at {started!r})")
        if ended is not None and not _is_time(ended):
            raise ValueError(f"attempt {number} has an unreadable ended_at {ended!r}")
        for name, value in (("outcome", outcome), ("error", error), ("source_version", version)):
            if value is not None and type(value) is not str:
                raise ValueError(f"attempt {number} has a {name} that is not text: {value!r}")
        out.append(Attempt(number, started, ended, outcome, error, version))
    return tuple(out)


def _is_time(value: Any) -> bool:
    return type(value) in (int, float) and math.isfinite(value)


# -- effect rows: what a stored effect must look like ---------------------------------

_EFFECT_TABLE = "oncegraph_effects"
_EFFECT_IDS = ("effect_id", "effect_type", "command_id", "run_id", "thread_id", "node")
_EFFECT_TEXTS = ("request_hash", "checkpoint_id", "recipient", "provider_reference", "error")
_OUTCOME_TEXTS = frozenset({"provider_reference", "error"})

#: The columns of an effect row that say what came of it (as opposed to what it is): an
#: operator who checked at the recipient replaces them with ``resolve_effect``.
REPAIRABLE = frozenset(
    {"status", "attempts", "provider_reference", "result", "error", "updated_at"}
)


def effect_problem(record: EffectRecord, *, outcome: bool = True) -> tuple[str, str] | None:
    """What makes ``record`` (as read from a row) one the ledger never writes: ``(column,
    detail)``, or None. Each column must hold its type (ids are non-empty text; times
    are finite numbers; ``row_version`` an integer >= 0, 0 being a row written before
    rows had versions), and the row must agree with itself: an effect without attempts
    is only ever a pending ``write`` intent planned with its step (row version 1,
    nothing attempted yet), so an attempted effect whose attempts are gone is damage,
    not a fresh intent a resume could send as if nothing had happened. ``outcome=False``
    skips the outcome columns (:data:`REPAIRABLE`)."""
    for name in _EFFECT_IDS:
        value = getattr(record, name)
        if type(value) is not str or not value:
            return name, f"must be non-empty text; holds {value!r}"
    for name in _EFFECT_TEXTS:
        value = getattr(record, name)
        if (outcome or name not in _OUTCOME_TEXTS) and value is not None and type(value) is not str:
            return name, f"must be text; holds {value!r}"
    if not record.request_hash:
        return "request_hash", "is empty"
    if type(record.row_version) is not int or record.row_version < 0:
        # (0: a row written before effect rows had versions, read as it was then)
        return "row_version", f"must be an integer >= 0; holds {record.row_version!r}"
    if not _is_time(record.created_at):
        return "created_at", f"must be a time in seconds; holds {record.created_at!r}"
    if not outcome:
        return None
    if not _is_time(record.updated_at):
        return "updated_at", f"must be a time in seconds; holds {record.updated_at!r}"
    if not record.attempts:
        if record.status is not EffectStatus.PENDING:
            return "attempts", f"a {record.status} effect must have at least one attempt; has none"
        if record.effect_class is not EffectClass.WRITE or record.row_version != 1:
            return "attempts", (
                f"a pending {record.effect_class} effect at row version {record.row_version} "
                "has no attempts; only a write intent planned with its step (row version 1) "
                "has none, so its attempts were lost"
            )
    return None


def corrupt_effect(
    row: Row, column: str, detail: str, salvage: EffectRecord | None = None
) -> CorruptRecordError:
    """The error for an effect row that fails its checks (guarantee 12: fail closed)
    (:func:`effect_corruption`); ``salvage``: the row read without its outcome columns,
    when only those are damaged."""

    def at(index: int) -> Any:
        return row[index] if len(row) > index else None

    return effect_corruption(
        at(0),
        column,
        detail,
        effect_type=at(1),
        thread_id=at(5),
        run_id=at(4),
        recipient=at(11) if salvage is None else salvage.recipient,
        salvage=salvage,
    )


def effect_corruption(
    effect_id: object,
    column: str,
    detail: str,
    *,
    effect_type: object = None,
    thread_id: str | None = None,
    run_id: str | None = None,
    recipient: object = None,
    salvage: EffectRecord | None = None,
) -> CorruptRecordError:
    """The error for a damaged effect: names the effect, its tool, thread and run, the
    column, says that nothing was called or changed, and what to do. With ``salvage``
    (only the outcome columns are damaged) an operator who checked at the recipient can
    resolve the effect, which replaces them; otherwise only a restore can help."""
    where = [f"effect {effect_id!r}"]
    if isinstance(effect_type, str) and effect_type:
        where.append(f"tool {effect_type!r}")
    for label, value in (("thread", thread_id), ("run", run_id)):
        if value is not None:
            where.append(f"{label} {value!r}")
    part = f", column {column}" if column else ""
    if salvage is not None:
        to = recipient if isinstance(recipient, str) and recipient else "the recipient"
        fix = (
            f"Restore the row from a backup; or check at {to} whether the effect happened "
            f"and record what you found with app.resolve_effect({effect_id!r}, 'done' | "
            f"'not_done', ...) (on the command line: oncegraph resolve {effect_id} --outcome "
            "done|not_done --reason ...), which replaces the damaged outcome and is kept in "
            "the audit log; then continue the run"
        )
    else:
        fix = (
            "Restore the row from a backup (or repair it by hand; `oncegraph db verify` "
            "checks the schema); an operator cannot resolve an effect whose "
            f"{column or 'row'} cannot be trusted"
        )
    return CorruptRecordError(
        f"corrupt row in {_EFFECT_TABLE} ({', '.join(where)}){part}: {detail}. The row was "
        "left untouched and nothing was re-executed: no tool was called for this effect. "
        f"{fix}.",
        table=_EFFECT_TABLE,
        key=effect_id,
        column=column,
        salvage=salvage,
    )


__all__ = [
    "REPAIRABLE",
    "attempts_from_json",
    "attempts_json",
    "corrupt_effect",
    "effect_corruption",
    "effect_problem",
]
