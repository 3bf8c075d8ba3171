"""Operator commands on effects: Resolve, Check, Redeliver; and the audit view.

Each command is refused with a clear error when it does not apply, takes the run (its
liveness lock and a new fencing token, so a process still working on it is fenced out,
guarantee 15) before it writes, and leaves an append-only :class:`AuditRecord`
(guarantee 14) written in the same transaction as its change:

* **Continue** (:meth:`oncegraph.runs.service.RunService.resume`, a lifecycle step): an
  interrupted (with its answer), failed, crashed, parked or paused run goes on under its
  own ``run_id``. A completed or abandoned run is never continued (a replay is a new run).
* **Resolve** (:meth:`Commands.resolve_effect`): the operator checked at the recipient.
  ``done`` records the result (the run will use it without calling the tool); ``not_done``
  lets the next attempt send it once more, with the same key, without reconciling.
* **Redeliver** (:meth:`Commands.redeliver`): the only way to send a completed or
  uncertain effect again. The first call returns a :class:`RedeliveryPreview` and sends
  nothing; a second call with the preview's token sends exactly once, with the same key or
  a new one, and records the outcome on the effect. It does not continue the run. The
  token is a MAC under the store's secret (:mod:`oncegraph.runs.confirm`): only a preview
  hands one out, for one actor, one key choice, the effect as it was, for ten minutes.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from oncegraph.errors import (
    ConfigError,
    CorruptRecordError,
    RunNotFoundError,
    RunStateError,
)
from oncegraph.graph.spec import GraphSpec
from oncegraph.ledger import calls, machine
from oncegraph.ledger.integrity import check_found
from oncegraph.ledger.keys import hash_key
from oncegraph.ledger.outcomes import Reconciled, Verdict
from oncegraph.runs import audits, claims, redelivery
from oncegraph.runs import confirm as confirmation
from oncegraph.runs.context import OnContext
from oncegraph.runs.masking import mask_effect
from oncegraph.runtime.config import caller_id
from oncegraph.runtime.context import EffectContext
from oncegraph.storage.records import (
    Attempt,
    AttemptOutcome,
    AuditRecord,
    EffectRecord,
    EffectStatus,
    now,
)

NO_ANSWER: Any = object()
_ANSWERS = {
    Verdict.DONE: "done: the recipient has this effect (recorded as completed); do not send it",
    Verdict.ACCEPTED: "accepted: the recipient holds it and is still working on it",
    Verdict.NOT_DONE: "not done: the recipient has no trace of it",
    Verdict.UNKNOWN: "unknown: the recipient could not tell",
}
RESOLVED_DONE = AttemptOutcome.RESOLVED_DONE
REDELIVERED = "redelivered"


@dataclass(frozen=True, slots=True)
class EffectCheck:
    """What :meth:`Commands.check_effect` heard from the recipient, and the effect after."""

    verdict: Verdict  # done | accepted | not_done | unknown
    effect: EffectRecord


@dataclass(frozen=True, slots=True)
class RedeliveryPreview:
    """What a redelivery would send, shown before anything is sent.

    Confirm with ``redeliver(effect_id, ..., confirm=preview.token)``; the token is only
    valid for the actor it was shown to, while the effect is unchanged, for the same key
    choice and until ``expires_at`` (:mod:`oncegraph.runs.confirm`).
    """

    token: str
    effect_id: str
    effect_type: str
    run_id: str
    thread_id: str
    recipient: str | None
    payload: Any  # the request, masked
    status: EffectStatus
    last_attempt: Attempt | None
    dedup: str  # "same key <key>" | "new key <key>"
    key: str
    expires_at: float = 0.0  # when the token stops confirming (seconds since the epoch)
    # The dedup method in words: the recipient's window and the last attempt's age
    # (oncegraph.runs.redelivery); ``past_dedup_window``: the window has passed or is
    # unknown, so the send needs the operator's explicit word (``warning`` says why)
    dedup_method: str = ""
    past_dedup_window: bool = False
    warning: str | None = None
    # What the recipient said when the preview asked it (probe/reconcile), if it was asked
    recipient_answer: str | None = None
    recipient_has_it: bool = False  # it said done: the send is refused


@dataclass(frozen=True, slots=True)
class Redelivered:
    """The effect as recorded after the redelivery (masked), and what was shown first."""

    effect: EffectRecord
    preview: RedeliveryPreview


def required(name: str, value: str | None) -> str:
    """``value``, or ``ConfigError`` when it is missing or blank (who acts, and why)."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{name} is required: say who acts and why (it goes to the audit log)")
    return value


def tools_of(spec: GraphSpec | None) -> dict[str, Any]:
    """The graph's tools (those of its ToolNodes), by name; none for no graph."""
    found: dict[str, Any] = {}
    for node in spec.nodes.values() if spec is not None else ():
        tools = getattr(node.fn, "tools", None)
        if isinstance(tools, Mapping):
            for name, tool in tools.items():
                found.setdefault(name, tool)  # the first node's, as a redelivery finds it
    for tool in list(found.values()):  # a compensating tool given as a Tool, not a name
        undo = getattr(tool, "compensate", None)
        if undo is not None and not isinstance(undo, str):
            found.setdefault(undo.name, undo)  # its effects are checked and resolved too
    return found


class Commands(OnContext):
    """The effect commands and the audit view over one
    :class:`~oncegraph.runs.context.RunContext` (the run service's ``resolve_effect``,
    ``check_effect``, ``redeliver``, ``effect`` and ``audit`` delegate here)."""

    # -- Resolve -----------------------------------------------------------------------------

    async def resolve_effect(
        self,
        effect_id: str,
        outcome: str,
        *,
        actor: str,
        reason: str,
        result: Any = None,
        provider_reference: str | None = None,
    ) -> EffectRecord:
        """Record what the operator found at the recipient for an uncertain effect."""
        required("actor", actor)
        required("reason", reason)
        if outcome not in ("done", "not_done"):
            raise ConfigError(f"outcome must be 'done' or 'not_done'; got {outcome!r}")
        damaged = ""  # the outcome column found unreadable, which this resolution replaces
        try:
            record = await self._effect(effect_id)
        except CorruptRecordError as exc:
            record, damaged = await self._salvaged(effect_id, exc), exc.column
        if not damaged and record.status not in (EffectStatus.PENDING, EffectStatus.ACCEPTED):
            raise RunStateError(
                f"effect {effect_id} is {record.status}: resolve is for an effect whose "
                "outcome is uncertain (pending or accepted). To send it again, use "
                "redeliver(effect_id, ...)"
            )
        t = now()
        found = (
            Reconciled.done(result, provider_reference)
            if outcome == "done"
            else Reconciled.not_done()
        )
        changed = machine.resolved(record, found, f"by {actor}: {reason}", t)
        changed = machine.next_version(changed, t)
        audit = _effect_audit(
            record,
            actor,
            "resolve_effect",
            reason,
            outcome=outcome,
            before="unreadable" if damaged else str(record.status),
            after=str(changed.status),
            provider_reference=provider_reference,
            **({"replaced_damaged": damaged} if damaged else {}),
        )

        async def write(token: int) -> None:
            await self.store.save_effect(changed, fence=token, audit=audit)

        await self._with_run_held(record, write)
        return mask_effect(changed, self.ctx.masks)

    # -- Check -------------------------------------------------------------------------------

    async def check_effect(
        self, effect_id: str, *, actor: str, reason: str = "asked the recipient"
    ) -> EffectCheck:
        """Ask the recipient again about an uncertain effect: an ``accepted`` one through
        its tool's ``probe``, a ``pending`` one through ``reconcile``. The answer is kept
        as an attempt of the effect and in the audit log. ``done`` completes the effect
        (the run continues with the result); ``accepted`` keeps it accepted with what the
        recipient said now; ``not_done`` and ``unknown`` change nothing else: a request
        that timed out may still arrive, so only :meth:`resolve_effect` lets it be sent.
        """
        required("actor", actor)
        required("reason", reason)
        record = await self._effect(effect_id)
        if record.status not in (EffectStatus.PENDING, EffectStatus.ACCEPTED):
            raise RunStateError(
                f"effect {effect_id} is {record.status}: only an uncertain effect (pending "
                "or accepted) is checked; its record already says what happened"
            )
        tool = self._tool_for(record)
        accepted = record.status is EffectStatus.ACCEPTED
        hook = tool.probe if accepted else tool.reconcile
        if hook is None:
            kind = "probe" if accepted else "reconcile"
            raise ConfigError(
                f"tool {record.effect_type!r} has no {kind} hook, so nothing can ask the "
                f"recipient for it; check at {record.recipient or 'the recipient'} yourself and "
                "record it with resolve_effect(effect_id, 'done' | 'not_done', ...)"
            )

        async def ask(token: int) -> EffectCheck:
            current = await self._effect(effect_id)  # as it is now that the run is held
            if current.status is not record.status:
                raise RunStateError(
                    f"effect {effect_id} became {current.status} while it was being checked; "
                    "look at it again"
                )
            found = hook(current)
            if inspect.isawaitable(found):
                found = await found
            verdict = found if isinstance(found, Reconciled) else Reconciled.unknown()
            t = now()
            changed = machine.next_version(machine.checked(current, verdict, t), t)
            audit = _effect_audit(
                current,
                actor,
                "check_effect",
                reason,
                verdict=verdict.verdict,
                before=str(current.status),
                after=str(changed.status),
                provider_reference=verdict.provider_reference,
            )
            await self.store.save_effect(changed, fence=token, audit=audit)
            return EffectCheck(verdict.verdict, mask_effect(changed, self.ctx.masks))

        result: EffectCheck = await self._with_run_held(record, ask)
        return result

    # -- Redeliver ---------------------------------------------------------------------------

    async def redeliver(
        self,
        effect_id: str,
        *,
        actor: str,
        reason: str,
        new_key: bool = False,
        confirm: str | None = None,
        past_dedup_window: bool = False,
    ) -> RedeliveryPreview | Redelivered:
        """Preview (``confirm=None``: nothing is sent), then send exactly once with the
        preview's token (``confirm=preview.token``, by the same actor, with the same
        ``new_key``); any other token is refused with ``RunStateError`` and nothing sent.

        The preview first asks the recipient about an uncertain effect (the tool's probe
        or reconcile, recorded as :meth:`check_effect` records it) and says how long the
        recipient keeps the key (:mod:`oncegraph.runs.redelivery`). A same-key send after
        that window, or with none known, is refused unless ``past_dedup_window=True``; a
        send of an effect the recipient said it has is always refused.

        The send waits for the call to end (no timeout): the run stays held meanwhile, so
        no other attempt of the effect can start (guarantee 13)."""
        required("actor", actor)
        required("reason", reason)
        record = await self._effect(effect_id)
        tool = self._tool_for(record)
        answer = None
        if confirm is None:
            answer = await self._ask_recipient(record, tool, actor, reason)
            record = await self._effect(effect_id)  # with the answer, if it was asked
        window = await redelivery.window_of(self.store, tool)
        key = await confirmation.key_for(self.store)
        claim = confirmation.Claim(record.effect_id, record.row_version, actor, new_key)
        if confirm is None:
            token, until = confirmation.mint(key, claim, at=confirmation.clock())
            return self._preview(record, new_key, token, until, tool, window, answer)
        expires = confirmation.check(key, confirm, claim, at=confirmation.clock())
        preview = self._preview(record, new_key, confirm, expires, tool, window, None)
        redelivery.refuse_if_unsafe(
            record,
            redelivery.Judgement(preview.dedup_method, preview.past_dedup_window, preview.warning),
            past_dedup_window=past_dedup_window,
        )
        kwargs = tool.validate(record.request)
        t = now()
        sending = machine.next_version(machine.redelivering(record, t), t)
        audit = _effect_audit(
            record,
            actor,
            "redeliver",
            reason,
            before=str(record.status),
            dedup=preview.dedup,
            dedup_method=preview.dedup_method,
            past_dedup_window=preview.past_dedup_window,
        )

        async def send(token: int) -> EffectRecord:
            await self.store.save_effect(sending, fence=token, audit=audit)  # the intent
            effect = EffectContext(
                effect_id,
                record.effect_type,
                record.command_id,
                record.run_id,
                record.thread_id,
                len(sending.attempts),
                key=preview.key,
            )
            runs: calls.RunsOn = "loop" if tool.is_async else "thread"
            end = await calls.call_once(tool.bind(kwargs), runs, effect)
            at = now()
            reference = effect.provider_reference or sending.provider_reference
            if isinstance(end, calls.Raised):
                error = machine.error_text(end.error)
                done = machine.failed(sending, error, at, reference=reference)
            else:
                done = machine.returned(sending, end.value, at, reference=reference)
            done = machine.next_version(done, at)
            await self.store.save_effect(done, fence=token)
            return done

        done = await self._with_run_held(record, send)
        return Redelivered(mask_effect(done, self.ctx.masks), preview)

    async def _ask_recipient(
        self, record: EffectRecord, tool: Any, actor: str, reason: str
    ) -> str | None:
        """Ask the recipient about an uncertain effect through the tool's hook, as
        :meth:`check_effect` does (recorded on the effect and in the audit log); the
        answer in words, or None when there is nothing to ask."""
        accepted = record.status is EffectStatus.ACCEPTED
        if record.status not in (EffectStatus.PENDING, EffectStatus.ACCEPTED):
            return None
        if (tool.probe if accepted else tool.reconcile) is None:
            kind = "probe" if accepted else "reconcile"
            return (
                f"not asked: the tool has no {kind} hook; check at "
                f"{record.recipient or 'the recipient'} yourself before sending"
            )
        try:
            found = await self.check_effect(
                record.effect_id, actor=actor, reason=f"before a redelivery: {reason}"
            )
        except Exception as exc:  # a hook that raised: say so, and ask the operator
            return f"asking failed ({type(exc).__name__}: {exc}); check at the recipient yourself"
        return _ANSWERS.get(found.verdict, str(found.verdict))

    def _preview(
        self,
        record: EffectRecord,
        new_key: bool,
        token: str,
        expires_at: float,
        tool: Any = None,
        window: redelivery.Window | None = None,
        answer: str | None = None,
    ) -> RedeliveryPreview:
        number = len(record.attempts) + 1
        key = f"{record.effect_id}:redelivery:{number}" if new_key else record.effect_id
        judged = redelivery.judge(
            record,
            window or redelivery.Window.unknown(),
            new_key=new_key,
            at=now(),
            method=getattr(tool, "dedup", None),
        )
        return RedeliveryPreview(
            token=token,
            effect_id=record.effect_id,
            effect_type=record.effect_type,
            run_id=record.run_id,
            thread_id=record.thread_id,
            recipient=record.recipient,
            payload=mask_effect(record, self.ctx.masks).request,
            status=record.status,
            last_attempt=record.attempts[-1] if record.attempts else None,
            dedup=("new key " if new_key else "same key ") + key,
            key=key,
            expires_at=expires_at,
            dedup_method=judged.words,
            past_dedup_window=judged.past_window,
            warning=judged.warning,
            recipient_answer=answer,
            recipient_has_it=redelivery.recipient_has_it(record),
        )

    def _tool_for(self, record: EffectRecord) -> Any:
        tool = tools_of(self.ctx.graph).get(record.effect_type)
        if tool is not None:
            return tool
        raise ConfigError(
            f"effect {record.effect_id} was made by {record.effect_type!r}, which is not a "
            "tool of this graph; only tools (ToolNode) can be redelivered. Redeliver from "
            "the app that made it."
        )

    # -- audit -------------------------------------------------------------------------------

    async def audit(
        self,
        *,
        run_id: str | None = None,
        thread_id: str | None = None,
        target_id: str | None = None,
        before: float | tuple[float, str] | AuditRecord | None = None,
        limit: int = 100,
    ) -> list[AuditRecord]:
        """Audit records, newest first, with masked fields masked
        (:mod:`oncegraph.runs.masking`); ``before``: the last record seen, or its ``(at,
        audit_id)`` (the next page, records of the same instant included), or a time
        (the records older)."""
        await self.ctx.setup()
        if run_id is not None:
            await self.ctx.get_run(run_id)
        if thread_id is not None:
            await self.ctx.check_thread(thread_id)
        scope = self.ctx.scope  # an audit record is the app's (tenant's) of its run
        found = await self.store.list_audit(
            run_id=run_id,
            thread_id=thread_id,
            target_id=target_id,
            before=(before.at, before.audit_id) if isinstance(before, AuditRecord) else before,
            limit=limit,
            app_id=None if scope is None else scope.app_id,
            tenant=None if scope is None else scope.tenant,
        )
        masker = await self.ctx.masker(
            thread_ids={r.thread_id for r in found if r.thread_id},
            run_ids={r.run_id for r in found if r.run_id and not r.thread_id},
        )
        return [masker.audit(r) for r in found]

    # -- helpers -----------------------------------------------------------------------------

    async def effect(self, effect_id: str) -> EffectRecord:
        """The effect as recorded (unmasked), within this context's scope: see
        :meth:`_effect`."""
        return await self._effect(effect_id)

    async def _effect(self, effect_id: str) -> EffectRecord:
        """The effect as recorded, whole (a damaged row is a ``CorruptRecordError``: no
        command acts on it), and within this context's scope."""
        effect_id = caller_id("effect_id", effect_id)  # a path's or argument's id
        await self.ctx.setup()
        record = await self.store.get_effect(effect_id)
        if record is None:
            raise RunNotFoundError(
                f"no effect {effect_id!r}; list them with app.effects(run_id=...)"
            )
        return await self._in_scope(record)

    async def _in_scope(self, record: EffectRecord) -> EffectRecord:
        check_found(record, await hash_key(self.store))
        run = await self.store.get_run(record.run_id)
        if run is not None:
            self.ctx.check_run(run, f"effect {record.effect_id} (of run {record.run_id})")
        return record

    async def _salvaged(self, effect_id: str, error: CorruptRecordError) -> EffectRecord:
        """For a resolution: the effect whose row ``error`` found damaged in its outcome
        columns only, read without them (the resolution replaces them); anything else
        damaged is raised as it is."""
        salvage = error.salvage
        if not isinstance(salvage, EffectRecord) or salvage.effect_id != effect_id:
            raise error
        return await self._in_scope(salvage)

    async def _with_run_held(self, record: EffectRecord, act: Any) -> Any:
        """Take the effect's run (fencing out any holder), ``await act(token)``, let go."""
        claim, _ = await claims.take_as_is(
            self.store, record.run_id, owner=f"operator:{self.ctx.owner}"
        )
        try:
            return await act(claim.token)
        finally:
            await claim.release()


def _effect_audit(
    record: EffectRecord, actor: str, action: str, reason: str, **details: Any
) -> AuditRecord:
    """The audit record of an operator command on one effect."""
    return audits.for_effect(record, action, actor=actor, reason=reason, details=details)


__all__ = [
    "NO_ANSWER",
    "Commands",
    "EffectCheck",
    "Redelivered",
    "RedeliveryPreview",
    "tools_of",
]
