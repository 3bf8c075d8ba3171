"""Compensation: undoing a completed effect is a new effect of its own, never a rewrite.

Cancelling a reservation does not make the reservation idempotent: it is a separate
operation with its own risks, conditions and log. So :func:`compensate` runs the
compensating tool a tool declares (``@tool(compensate=...)``,
:mod:`oncegraph.tools.compensation`) as a NEW effect record, through the same ledger
protocol as any tool call (:func:`oncegraph.ledger.perform.perform`): its own class and
retry policy, its intent committed before the call, its own idempotency key, a pending
irreversible one reconciled (or left for an operator), never guessed.

Rules:

* **Only an operator starts one** (``app.compensate``, the CLI's ``oncegraph compensate``,
  ``POST /api/effects/{id}/compensate``, the effect page's Compensate button). A run never
  compensates, and a replay never does: a replay that meets a compensation serves it as
  recorded, like any effect.
* **Only a completed effect** (a call that returned, or one an operator resolved as done)
  is compensated; an uncertain one is refused until it is checked or resolved, a failed
  one has nothing to undo.
* **At most once** unless the operator says ``allow_again=True``: the effect's first
  completed compensation refuses another. A compensation that did not finish (a crash, an
  outcome still unknown) is not a second one: compensating again goes on with THAT record,
  under the ledger's rules for its class, so a crash between its intent and its call never
  makes it happen twice. One that failed (its tool raised: nothing was undone) does not
  count: the next compensation is allowed, as number 2.
* **Linked both ways, kept by every store.** A compensation's command id is
  ``compensate:<original effect id>:<n>`` (its effect id is derived from it, so two
  operators racing make the same record and one of them finds it) and it is recorded in
  the original's run: :func:`compensates` reads the original's id off it, and
  :func:`compensations` lists an effect's compensations (its ``compensated_by``) from its
  run's effects: the link is kept by the compensation's own record, written with its
  intent, so no store needs a column for it and no crash can leave one side of it.
* **Audited**: one record (``compensate``, on the original) with the actor, the reason
  and both ids, written before the compensation's intent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from oncegraph.errors import ConfigError, RunStateError, _ParkSignal
from oncegraph.graph.spec import GraphSpec
from oncegraph.ledger.keys import effect_id_for
from oncegraph.ledger.perform import ToolFailed, perform
from oncegraph.runs import audits, claims
from oncegraph.runs.commands import Commands, required, tools_of
from oncegraph.runs.context import RunContext
from oncegraph.runs.masking import mask_effect
from oncegraph.runtime.config import RunConfig
from oncegraph.runtime.context import TaskContext
from oncegraph.runtime.faults import FaultPlan
from oncegraph.storage.records import AuditRecord, EffectRecord, EffectStatus
from oncegraph.tools.compensation import ORIGINAL, CompensationRequest
from oncegraph.tools.tool import Tool

PREFIX = "compensate:"
"""The command id of a compensation: ``compensate:<original effect id>:<n>``."""
UNFINISHED = (EffectStatus.PENDING, EffectStatus.ACCEPTED)
# The calls the refusals name, which each surface says in its own words (the CLI's flags
# and commands, the UI's buttons: oncegraph.server.wording).
AGAIN = "app.compensate(effect_id, ..., allow_again=True)"
CHECK = "app.check_effect(effect_id, ...)"
RESOLVE = "app.resolve_effect(effect_id, 'done', ...)"


@dataclass(frozen=True, slots=True)
class Compensated:
    """What :func:`compensate` did: the compensation's effect as recorded now and the
    effect it compensates (both masked); ``resumed``: it went on with a compensation
    that had not finished, instead of starting one."""

    effect: EffectRecord
    original: EffectRecord
    resumed: bool = False


def command_for(original_id: str, number: int) -> str:
    """The command id of the ``number``-th compensation of ``original_id``."""
    return f"{PREFIX}{original_id}:{number}"


def compensates(record: EffectRecord) -> str | None:
    """The id of the effect ``record`` compensates, or None for any other effect."""
    if not record.command_id.startswith(PREFIX):
        return None
    original, _, number = record.command_id[len(PREFIX) :].rpartition(":")
    return original if original and number.isdigit() else None


def number_of(record: EffectRecord) -> int:
    """Which compensation of its original ``record`` is (1, 2, ...); 0 for no compensation."""
    return int(record.command_id.rpartition(":")[2]) if compensates(record) else 0


def links(records: Iterable[EffectRecord]) -> dict[str, tuple[str, ...]]:
    """For effects of one run (or more): original id -> its compensations' ids, in order."""
    found: dict[str, list[EffectRecord]] = {}
    for record in records:
        original = compensates(record)
        if original is not None:
            found.setdefault(original, []).append(record)
    return {k: tuple(r.effect_id for r in sorted(v, key=number_of)) for k, v in found.items()}


async def compensations_of(store: Any, original: EffectRecord) -> list[EffectRecord]:
    """The compensations of ``original`` as recorded (unmasked), first one first."""
    everything = await store.list_effects(run_id=original.run_id)
    mine = [r for r in everything if compensates(r) == original.effect_id]
    return sorted(mine, key=number_of)


async def compensations(ctx: RunContext, effect_id: str) -> list[EffectRecord]:
    """The compensations of the effect ``effect_id`` (its ``compensated_by``), first one
    first, as an operator sees them (masked; the effect within ``ctx``'s scope)."""
    original = await Commands(ctx).effect(effect_id)
    found = await compensations_of(ctx.store, original)
    masker = await ctx.masker(thread_ids=(original.thread_id,))
    return [masker.effect(r) for r in found]


def compensating_tool(spec: GraphSpec | None, record: EffectRecord) -> Tool:
    """The tool that compensates ``record``'s effects, or ConfigError naming the fix."""
    tools = tools_of(spec)
    tool = tools.get(record.effect_type)
    if tool is None:
        raise ConfigError(
            f"effect {record.effect_id} was made by {record.effect_type!r}, which is not a "
            "tool of this graph; only a tool's effects can be compensated. Compensate from "
            "the app that made it."
        )
    declared = getattr(tool, "compensate", None)
    if declared is None:
        raise ConfigError(
            f"tool {record.effect_type!r} declares no compensation, so nothing can undo its "
            f"effect {record.effect_id}; declare the tool that does with "
            "@tool(compensate=<a tool, or the name of a tool of this graph>)"
        )
    if isinstance(declared, str):
        found = tools.get(declared)
        if not isinstance(found, Tool):
            raise ConfigError(
                f"tool {record.effect_type!r} is compensated by {declared!r}, which is not a "
                "tool of this graph; give it to a ToolNode, or pass the tool itself: "
                "@tool(compensate=<the tool>)"
            )
        return found
    if not isinstance(declared, Tool):  # pragma: no cover - @tool makes it one
        raise ConfigError(f"tool {record.effect_type!r}: compensate= is not a tool ({declared!r})")
    return declared


def _check_compensable(record: EffectRecord) -> None:
    if record.status is EffectStatus.COMPLETED:
        return
    if record.status in UNFINISHED:
        raise RunStateError(
            f"effect {record.effect_id} is {record.status}: what it did is not known yet, and "
            f"only a completed effect is compensated. Check it at the recipient first with "
            f"{CHECK} or record what you found there with {RESOLVE}; then compensate it"
        )
    raise RunStateError(
        f"effect {record.effect_id} is {record.status}: it did not complete, so there is "
        "nothing to compensate (only a completed effect is)"
    )


def _request(
    ctx: RunContext, tool: Tool, original: EffectRecord, number: int, args: Mapping[str, Any]
) -> dict[str, Any]:
    """The JSON arguments of the ``number``-th compensation: the operator's ``args``, and
    under ``original`` the effect as recorded (its masked fields masked) when the
    compensating function takes it."""
    if not isinstance(args, Mapping):
        raise ConfigError(
            f"args must be a JSON object of the compensating tool's arguments; got {args!r}"
        )
    request = dict(args)
    if ORIGINAL in tool.param_names:
        if ORIGINAL in request:
            raise ConfigError(
                f"args must not give {ORIGINAL!r}: the compensating tool {tool.name!r} gets "
                "the compensated effect there"
            )
        shown = mask_effect(original, ctx.masks)
        given = CompensationRequest(
            effect_id=original.effect_id,
            effect_type=original.effect_type,
            args=dict(shown.request) if isinstance(shown.request, Mapping) else {},
            result=shown.result,
            provider_reference=original.provider_reference,
            number=number,
        )
        request[ORIGINAL] = asdict(given)
    return request


def _audit(
    original: EffectRecord, actor: str, reason: str, compensation_id: str, **details: Any
) -> AuditRecord:
    return audits.for_effect(
        original,
        "compensate",
        actor=actor,
        reason=reason,
        details={"compensation": compensation_id, "compensates": original.effect_id, **details},
    )


async def compensate(
    ctx: RunContext,
    effect_id: str,
    *,
    actor: str,
    reason: str,
    allow_again: bool = False,
    args: Mapping[str, Any] | None = None,
    fault_plan: FaultPlan | None = None,
) -> Compensated:
    """Run the compensation of the completed effect ``effect_id`` as a new effect, once.

    ``args``: the compensating tool's own arguments (its ``original`` parameter, if it
    has one, gets the :class:`~oncegraph.tools.compensation.CompensationRequest`).
    ``allow_again``: compensate an effect already compensated. A compensation that has
    not finished is taken up again instead of starting one (``resumed``). The run is
    held meanwhile (any process still working on it is fenced out); its status does not
    change. ``fault_plan``: crash points for tests (else ``ONCEGRAPH_CRASH_AT``)."""
    required("actor", actor)
    required("reason", reason)
    original = await Commands(ctx).effect(effect_id)
    tool = compensating_tool(ctx.graph, original)
    _check_compensable(original)
    claim, run = await claims.take_as_is(ctx.store, original.run_id, owner=f"operator:{ctx.owner}")
    try:
        done = await compensations_of(ctx.store, original)
        open_ = [r for r in done if r.status in UNFINISHED]
        finished = [r for r in done if r.status is EffectStatus.COMPLETED]
        if open_:
            going = open_[-1]  # its own request, as recorded: the same call, taken up again
            if going.effect_type != tool.name:
                raise ConfigError(
                    f"the unfinished compensation {going.effect_id} of effect "
                    f"{original.effect_id} was made by {going.effect_type!r}, and the tool "
                    f"now declares {tool.name!r}; finish that one first: check or resolve it"
                )
            number, request, resumed = number_of(going), going.request, True
        else:
            if finished and not allow_again:
                raise RunStateError(
                    f"effect {original.effect_id} was already compensated by "
                    f"{finished[-1].effect_id}; an effect is compensated once. To compensate "
                    f"it again on purpose, pass {AGAIN}"
                )
            number, resumed = len(done) + 1, False
            request = _request(ctx, tool, original, number, args or {})
        command_id = command_for(original.effect_id, number)
        kwargs = tool.validate(request)
        config = RunConfig.from_stored(run.config, run.thread_id)
        task = TaskContext(
            run_id=original.run_id,
            thread_id=original.thread_id,
            node=original.node,
            step=0,
            checkpoint_id=original.checkpoint_id or "",
            store=ctx.store,
            config=config,
            loop=asyncio.get_running_loop(),
            emit=_silent,
            fault_plan=fault_plan or config.fault_plan or FaultPlan.from_env(),
            claim=claim,
        )
        call = tool.effect_call(command_id, request, kwargs, config.tool_timeout)
        new_id = effect_id_for(original.run_id, tool.name, command_id)
        await ctx.store.append_audit(
            _audit(
                original,
                actor,
                reason,
                new_id,
                number=number,
                tool=tool.name,
                resumed=resumed,
                **({"again": True} if finished and not resumed else {}),
            )
        )
        parked: str | None = None
        try:
            await perform(task, call)
        except ToolFailed:
            pass  # recorded as failed: shown to the operator with its error
        except _ParkSignal as signal:
            parked = signal.reason
        record = await ctx.store.get_effect(new_id)
    finally:
        await claim.release()
    if record is None:  # pragma: no cover - perform recorded it or raised
        raise RunStateError(f"compensation {new_id} left no record")
    if parked is not None:
        raise RunStateError(
            f"the compensation {new_id} of effect {original.effect_id} has an unknown "
            f"outcome ({record.status}): {parked.split('; the run is parked')[0]}. Check the "
            f"compensation at the recipient with {CHECK}, or record what you found with "
            f"{RESOLVE}; compensating again goes on with the same compensation, never a "
            "second one"
        )
    return Compensated(
        mask_effect(record, ctx.masks), mask_effect(original, ctx.masks), resumed=resumed
    )


def _silent(mode: str, value: Any) -> None:
    """No caller streams an operator's compensation."""


__all__ = [
    "PREFIX",
    "Compensated",
    "command_for",
    "compensate",
    "compensates",
    "compensating_tool",
    "compensations",
    "compensations_of",
    "links",
    "number_of",
]
