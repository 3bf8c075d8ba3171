"""The effect log across runs: what an app's agents did in the world, and what waits for
a person. Read only; the one place the UI's effects page and ``oncegraph effects`` (with
no run or thread) get their listing from.

An effect *needs review* when its outcome is unknown (``pending`` or ``accepted``) and
its run is parked for a person (``needs_review``): someone must check at the recipient,
then resolve it. Any other uncertain effect is *pending*: in flight, or left by a
process that stopped (a Continue settles it). :data:`NEEDS_REVIEW` is also a status a
listing can filter on.

The store lists effects oldest first; the log reads them a page at a time (at most
:data:`SCAN` records; ``truncated`` says when there were more) and keeps the newest
``limit`` that pass the filters, newest first. The counts are of every effect that passes
the filters other than the status one.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

from oncegraph.errors import ConfigError
from oncegraph.runs.masking import Masker
from oncegraph.runs.scope import Scope, listing_filters
from oncegraph.storage.protocols import Checkpointer
from oncegraph.storage.records import EffectRecord, EffectStatus, RunStatus

NEEDS_REVIEW = "needs_review"
UNCERTAIN = frozenset({EffectStatus.PENDING, EffectStatus.ACCEPTED})
STATUSES = (*(str(s) for s in EffectStatus), NEEDS_REVIEW)
SCAN = 20_000  # effect records one listing reads at most
PAGE = 1000  # records per store read


@dataclass(frozen=True, slots=True)
class EffectQuery:
    """What an effect log lists. ``statuses``: effect statuses, or ``needs_review``;
    ``tool``: the effect type exactly (a tool's name, ``model:<name>``); ``recipient``:
    a part of the recipient's name (any case); ``since``/``until``: creation time
    (epoch seconds, ``until`` excluded); ``app_id``/``tenant``: whose runs."""

    statuses: tuple[str, ...] | None = None
    tool: str | None = None
    recipient: str | None = None
    since: float | None = None
    until: float | None = None
    app_id: str | None = None
    tenant: str | None = None
    limit: int = 100

    def __post_init__(self) -> None:
        for status in self.statuses or ():
            if status not in STATUSES:
                raise ConfigError(
                    f"unknown effect status {status!r}; use one of {', '.join(STATUSES)}"
                )
        if isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 1:
            raise ConfigError(f"limit must be a positive integer; got {self.limit!r}")
        if self.since is not None and self.until is not None and self.until <= self.since:
            raise ConfigError("until must be later than since; nothing would be listed")


@dataclass(frozen=True, slots=True)
class LoggedEffect:
    """One effect of the log, masked, with what its run says about it."""

    effect: EffectRecord
    run_status: str | None
    needs_review: bool


@dataclass(frozen=True, slots=True)
class EffectLog:
    effects: list[LoggedEffect]  # newest first
    needs_review: int
    pending: int
    matched: int  # effects passing every filter (more than ``effects`` holds past a limit)
    truncated: bool  # the scan stopped at SCAN records: older effects were not read


async def effect_log(
    store: Checkpointer,
    scope: Scope | None,
    query: EffectQuery,
    masker: Callable[[Iterable[str]], Awaitable[Masker]],
) -> EffectLog:
    """The effects ``query`` lists, within ``scope`` (guarantee 15: another app's or
    tenant's effects are never read); ``masker(thread_ids)`` masks what is shown."""
    app_id, tenant = listing_filters(scope, query.tenant)
    if query.app_id is not None:
        if scope is not None and query.app_id != scope.app_id:
            raise ConfigError(
                f"this service is app {scope.app_id!r}; it lists only that app's effects"
            )
        app_id = query.app_id
    needle = (query.recipient or "").casefold() or None
    kept: deque[EffectRecord] = deque(maxlen=query.limit)
    uncertain: list[EffectRecord] = []
    wanted = set(query.statuses or ())
    matched: list[EffectRecord] = []  # status filtered later: needs_review needs the run
    offset, truncated = 0, False
    while True:
        page = await store.list_effects(app_id=app_id, tenant=tenant, limit=PAGE, offset=offset)
        for record in page:
            if not _passes(record, query, needle):
                continue
            if record.status in UNCERTAIN:
                uncertain.append(record)
            matched.append(record)
        offset += len(page)
        if len(page) < PAGE:
            break
        if offset >= SCAN:
            truncated = True
            break
    statuses = await _run_statuses(store, {r.run_id for r in uncertain})
    parked = {
        r.effect_id for r in uncertain if statuses.get(r.run_id) == str(RunStatus.NEEDS_REVIEW)
    }
    count = 0
    for record in matched:
        if wanted and not _status_wanted(record, wanted, parked):
            continue
        count += 1
        kept.append(record)
    runs = {**statuses, **await _run_statuses(store, {r.run_id for r in kept} - set(statuses))}
    mask = await masker({r.thread_id for r in kept})
    return EffectLog(
        effects=[
            LoggedEffect(mask.effect(r), runs.get(r.run_id), r.effect_id in parked)
            for r in reversed(kept)
        ],
        needs_review=len(parked),
        pending=len(uncertain) - len(parked),
        matched=count,
        truncated=truncated,
    )


def _passes(record: EffectRecord, query: EffectQuery, needle: str | None) -> bool:
    if query.tool is not None and record.effect_type != query.tool:
        return False
    if needle is not None and needle not in (record.recipient or "").casefold():
        return False
    if query.since is not None and record.created_at < query.since:
        return False
    return query.until is None or record.created_at < query.until


def _status_wanted(record: EffectRecord, wanted: set[str], parked: set[str]) -> bool:
    if NEEDS_REVIEW in wanted and record.effect_id in parked:
        return True
    return str(record.status) in wanted


async def _run_statuses(store: Checkpointer, run_ids: Sequence[str] | set[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for run_id in sorted(run_ids):
        run = await store.get_run(run_id)
        if run is not None:
            found[run_id] = str(run.status)
    return found


__all__ = ["NEEDS_REVIEW", "STATUSES", "EffectLog", "EffectQuery", "LoggedEffect", "effect_log"]
