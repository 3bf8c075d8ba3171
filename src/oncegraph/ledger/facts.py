"""Facts of a run: the clock readings, random numbers and new ids a task drew, recorded.

``oncegraph.now()``, ``oncegraph.uuid4()`` and ``oncegraph.random()`` (:mod:`oncegraph.facts`)
draw through :func:`draw`. The first run of a task draws live values; every later run of
that task (a resume after a crash, an interrupt or a park, a node retry, a replay in any
mode) gets the same values back, by position: the n-th draw of a scope (the node, or one
``@task`` call inside it) gets the n-th recorded value.

Storage: ONE effect record per task and step, class ``read``, type ``oncegraph.facts``,
command ``<node scope>:<step>:facts``, keyed by the run that drew the values. Its result
is ``{"facts": {scope: [[kind, value], ...]}}``. The record is STAGED in the task's
``staged_effects``, so it rides the step's commit (no commit of its own), and is
committed earlier only when the task commits something else that may depend on it: the
intent or result of an effect made after the draw (:func:`flush`, called by the ledger
before its own writes). So the guarantee is:

* a value is durable no later than the first record that could carry it (an effect's
  request, a result, the step's checkpoint);
* a crash before that re-runs the task from the top and it draws fresh values, which no
  recorded thing has seen.

A task whose step this process just committed (``fresh``) cannot have facts on record,
so it reads nothing; any other task (a resumed step, a replay) reads its record once,
one point read before the node runs (:func:`prepare`), so a draw never waits on the
store (an async node draws on the loop thread). A read that fails fails only a task
that then draws (``LedgerUnavailableError``, resumable), never one that does not.
A replay reads its own record first, then the original run's; an evidence replay that
reaches a draw the original run never made refuses it (:class:`MissingRecordError`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from oncegraph.errors import (
    LeaseLostError,
    LedgerUnavailableError,
    MissingRecordError,
    NondeterminismError,
    StorageError,
)
from oncegraph.ledger import machine
from oncegraph.ledger.keys import effect_id_for
from oncegraph.ledger.planned import intent_record
from oncegraph.runtime.context import CallSite
from oncegraph.storage.records import EffectClass, EffectRecord, now

if TYPE_CHECKING:
    from oncegraph.runtime.context import TaskContext

FACTS = "oncegraph.facts"


def facts_command_id(ctx: TaskContext) -> str:
    return f"{ctx.node}:{ctx.step}:facts"


@dataclass(slots=True)
class FactLog:
    """The facts of one task: what is on record (or drawn) per scope, and how far this
    attempt of the task has read each scope."""

    values: dict[str, list[list[Any]]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    saved_version: int = 0  # the row version of this run's record in the store (0: none)
    staged: EffectRecord | None = None  # the record waiting in ctx.staged_effects
    unread: str | None = None  # the record could not be read (why): a draw must not guess
    lock: threading.Lock = field(default_factory=threading.Lock)

    def restart(self) -> None:
        """Another attempt of the task (a node retry): it reads from position 0 again."""
        self.counts.clear()

    def _sync_saved(self, ctx: TaskContext) -> bool:
        """Is a record staged and still waiting? One the driver took out of
        ``staged_effects`` was written: its values are left to it (copied off here)."""
        staged = self.staged
        if staged is None:
            return False
        if any(r is staged for r in ctx.staged_effects):
            return True
        self.saved_version = staged.row_version
        self.staged = None
        self.values = {scope: list(v) for scope, v in self.values.items()}
        return False

    def _stage(self, ctx: TaskContext) -> None:
        """Stage the record of these values, unless one is staged already: its result IS
        ``values`` (no copy per draw), read when the driver writes it."""
        if self._sync_saved(ctx):
            return
        record = machine.completed_at_once(
            intent_record(
                # keyed by this run's own id, in a replay too: the draws are its own
                replace(CallSite.of(ctx), key_run_id=ctx.run_id),
                effect_type=FACTS,
                effect_class=EffectClass.READ,
                command_id=facts_command_id(ctx),
                request={"task": ctx.task_key},
                recipient=None,
            ),
            {"facts": self.values},
            now(),
            self.saved_version + 1,
        )
        ctx.staged_effects.append(record)
        self.staged = record


def _log(ctx: TaskContext) -> FactLog:
    log = ctx.facts
    if log is None:
        log = ctx.facts = FactLog()
    return log


def draw(ctx: TaskContext, scope: str, kind: str, make: Callable[[], Any]) -> Any:
    """The value at the next position of ``scope`` (as stored: JSON): the recorded one,
    else ``make()``, recorded. ``kind`` names the helper (``now``, ``uuid4``, ``random``):
    a recorded value of another kind at that position means the code changed."""
    log = _log(ctx)
    with log.lock:
        log._sync_saved(ctx)  # values a written record holds are copied off before a change
        n = log.counts.get(scope, 0)
        log.counts[scope] = n + 1
        known = log.values.setdefault(scope, [])
        if n < len(known):
            recorded_kind, value = known[n]
            if recorded_kind != kind:
                raise NondeterminismError(
                    f"node {ctx.node_name!r} now calls oncegraph.{kind}() as its draw number "
                    f"{n + 1}{_where(scope)}, where the run recorded oncegraph.{recorded_kind}()"
                    ": its code changed (a deploy?). Keep the order of these calls in a node "
                    "stable, or finish such runs on the old version (previous_versions)."
                )
            return value
        if log.unread is not None:
            raise LedgerUnavailableError(
                f"node {ctx.node_name!r} called oncegraph.{kind}(), and the values its earlier "
                f"run recorded cannot be read ({log.unread}); a new value could differ from "
                "one already used. The run failed and can be resumed once the store is back."
            )
        replay = ctx.replay
        if replay is not None and replay.mode == "evidence":
            raise MissingRecordError(
                f"this evidence replay reached oncegraph.{kind}() in node {ctx.node_name!r} "
                f"(draw number {n + 1}{_where(scope)}, step {ctx.step}), which run "
                f"{replay.evidence_run_id} never recorded; an evidence replay only serves "
                "recorded values. Replay in mode='simulation' or 'live' to draw a new one."
            )
        value = make()
        known.append([kind, value])
        log._stage(ctx)
        return value


def _where(scope: str) -> str:
    return f" inside task call {scope}" if scope else ""


async def prepare(ctx: TaskContext) -> None:
    """Before a task that may have run before (not ``fresh``, or in a replay) runs: read
    its facts record once, this run's first, then the replayed run's."""
    if ctx.fresh and ctx.replay is None:
        return
    command_id = facts_command_id(ctx)
    log = ctx.facts = FactLog()
    try:
        found = await ctx.store.get_effect(effect_id_for(ctx.run_id, FACTS, command_id))
        if found is not None:
            log.saved_version = found.row_version
        elif ctx.replay is not None:
            original = ctx.replay.evidence_run_id
            found = await ctx.store.get_effect(effect_id_for(original, FACTS, command_id))
    except LeaseLostError:
        raise
    except StorageError as exc:  # only a task that draws needs them: it fails then
        log.unread = str(exc)
        return
    if found is not None and isinstance(found.result, dict):
        stored = found.result.get("facts") or {}
        log.values = {str(scope): [list(item) for item in v] for scope, v in stored.items()}


async def flush(ctx: TaskContext) -> None:
    """Commit the task's staged facts now: the ledger is about to commit a record (an
    intent, a result) that may carry a drawn value, and a resume must draw the same."""
    log = ctx.facts
    if log is None:
        return
    with log.lock:
        if not log._sync_saved(ctx):
            return
        record = log.staged
        assert record is not None  # staged and waiting
        ctx.staged_effects[:] = [r for r in ctx.staged_effects if r is not record]
        # written now: later draws go into a copy, the record keeps what it has
        log._sync_saved(ctx)
    await ctx.store.save_effect(record, fence=ctx.fence)


__all__ = ["FACTS", "FactLog", "draw", "facts_command_id", "flush", "prepare"]
