"""Perform one side effect through the ledger (guarantees 2 to 7 and 13).

The protocol, for one command of one run::

    claim attempt k in the effect row (pending)      -- committed BEFORE the call; the
                                                        row's compare-and-set and the
                                                        run's fence make it the only one
    call the tool under tool_timeout, with current_effect() set
    record completed | accepted | failed             -- committed right after, or folded
                                                        into the step's checkpoint when
                                                        the call is the node's last act

A record found on the way in decides instead of the call: ``completed`` returns the
recorded result; ``accepted`` asks the probe; ``pending`` is an UNKNOWN outcome handled
by class (read and write run again with the same key, irreversible reconciles or
parks); a different ``request_hash`` is a ``RequestMismatchError``. ``read`` and
``model`` effects are not side effects: they skip the intent commit and are recorded
once done.

Guarantee 13, one attempt in flight: a call that times out is first cancelled (a coroutine)
and then waited for during ``tool_grace`` (a sync tool's thread cannot be stopped). If
it ends, its real outcome is recorded (a late result is a result); if it does not, it
is still in flight: no new attempt and no reconcile may follow, the run stops (an
irreversible tool parks, anything else fails with ``ToolTimeoutError``) and the run's
claim keeps it, recording its outcome when it ends and holding the run until then.
Automatic attempts are bounded by the class's retry policy for every class; an
irreversible tool whose call timed out is never sent again automatically.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from oncegraph import observe
from oncegraph._retrying import attempts
from oncegraph._slots import slot_init
from oncegraph.errors import (
    CorruptRecordError,
    EffectFailedError,
    LeaseLostError,
    LedgerUnavailableError,
    LedgerWriteError,
    NondeterminismError,
    OnceGraphError,
    RequestMismatchError,
    StaleStateError,
    StorageError,
    ToolTimeoutError,
    _ParkSignal,
)
from oncegraph.ledger import calls, facts, machine, replayed
from oncegraph.ledger.calls import RunsOn
from oncegraph.ledger.integrity import check_found
from oncegraph.ledger.keys import effect_id_for, hash_key, request_hash, same_request
from oncegraph.ledger.masks import remember_call
from oncegraph.ledger.planned import intent_record, is_untouched_plan
from oncegraph.ledger.retry import RetryPolicy, policy_for
from oncegraph.runtime import executor
from oncegraph.runtime.claim import Ended
from oncegraph.runtime.context import CallSite, EffectContext, TaskContext
from oncegraph.runtime.replay import ReplayPolicy
from oncegraph.runtime.streaming import wants
from oncegraph.storage.records import (
    Attempt,
    AttemptOutcome,
    EffectClass,
    EffectRecord,
    EffectStatus,
    now,
)

log = logging.getLogger("oncegraph.ledger")

Hook = Callable[[EffectRecord], Any]

RECORD_RETRY_DELAYS = (0.05, 0.2, 0.8)
RESOLVED_NOT_DONE = AttemptOutcome.RESOLVED_NOT_DONE  # written by resolve_effect


@slot_init
@dataclass(frozen=True, slots=True)
class EffectCall:
    """One command to perform. ``fn()`` is called once per attempt: ``runs="loop"``: it
    returns an awaitable, run as a task on the loop; ``"thread"``: it is the call itself,
    run in the worker pool; ``"inline"``: called on the loop thread (no timeout)."""

    effect_type: str
    effect_class: EffectClass
    command_id: str
    request: Any
    fn: Callable[[], Any]
    runs: RunsOn = "loop"
    recipient: str | None = None
    reconcile: Hook | None = None
    probe: Hook | None = None
    retry: RetryPolicy | None = None
    timeout: float | None = None
    fold: bool = False  # the call is the node's last act: its result may ride the checkpoint
    # ... unless it took more than one attempt: then it is committed at once, so a crash
    # before the step's commit does not make the resume pay for those attempts again
    commit_if_retried: bool = False
    # The command id is the call's position in its node (effect()): check on a re-run
    # that the recorded command at that position is the same kind of effect.
    positional: bool = False
    # For simulation replays: the tool's stand-in and the arguments it is called with.
    simulate: Callable[..., Any] | None = None
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    mask: tuple[str, ...] = ()  # the tool's secret fields: masked in traces
    # What the call is to a replay (oncegraph.graph.inputs): recorded, repeat or live
    replay: str = "recorded"


class ToolFailed(Exception):
    """The tool itself raised ``error`` (recorded as a failed attempt). Raised by
    :func:`perform` so callers can tell the tool's own failure, which a model may read
    and correct, from a failure of the protocol or a bug, which must stop the run."""

    def __init__(self, error: Exception) -> None:
        super().__init__(f"{type(error).__name__}: {error}")
        self.error = error


@dataclass(frozen=True, slots=True)
class Performed:
    """What :func:`perform` hands back: the result (recorded or fresh) and the effect id."""

    result: Any
    effect_id: str


async def _call_hook(hook: Hook, record: EffectRecord) -> Any:
    value = hook(record)
    if inspect.isawaitable(value):
        value = await value
    return value


def _park(record: EffectRecord, why: str) -> _ParkSignal:
    return _ParkSignal(
        record.effect_id,
        f"effect {record.effect_id} ({record.effect_type}, command {record.command_id}) "
        f"{why}; the run is parked as needs_review. An operator must check the recipient "
        f"({record.recipient or 'unknown'}) and record what was found with "
        "app.resolve_effect(effect_id, 'done' | 'not_done', ...), then continue the run "
        "with app.resume(run_id, ...); or abandon it.",
    )


class _Performer:
    def __init__(self, ctx: TaskContext, call: EffectCall, key: bytes | None) -> None:
        self.ctx = ctx
        self.call = call
        self.store = ctx.store
        self.policy = policy_for(call.effect_class, call.retry)
        self.effect_id = effect_id_for(ctx.key_run_id, call.effect_type, call.command_id)
        self.key = key  # the store's request-hash key (ledger/keys.py)
        self.request_hash = request_hash(call.request, key)
        self.risky = call.effect_class in (EffectClass.WRITE, EffectClass.IRREVERSIBLE)
        self._thread: executor.ThreadCall | None = None  # the latest thread call
        self._unsaved = False  # a planned call's first attempt is not in the stored record

    # -- events (stream_mode="events") --------------------------------------------------

    def _event(self, kind: str, record: EffectRecord, **more: Any) -> None:
        """Tell a streaming caller what the ledger did (intent recorded, result recorded,
        reconciled, parked); nothing is built for a caller that does not listen."""
        observe.effect_event(kind, record, more, self.call.mask)
        if not wants(self.ctx.emit, "events"):
            return
        self.ctx.emit(
            "events",
            {
                "event": kind,
                "node": self.ctx.node_name,
                "effect_id": record.effect_id,
                "effect_type": record.effect_type,
                "effect_class": str(record.effect_class),
                "command_id": record.command_id,
                "status": str(record.status),
                **more,
            },
        )

    def _parked(self, record: EffectRecord, why: str) -> _ParkSignal:
        signal = _park(record, why)
        self._event("effect_parked", record, reason=signal.reason)
        return signal

    # -- recording -------------------------------------------------------------------------

    def _new_record(self, status: EffectStatus, attempts: tuple[Attempt, ...]) -> EffectRecord:
        ctx, call = self.ctx, self.call
        return intent_record(
            CallSite.of(ctx),
            effect_type=call.effect_type,
            effect_class=call.effect_class,
            command_id=call.command_id,
            request=call.request,
            recipient=call.recipient,
            status=status,
            attempts=attempts,
            hashed=self.request_hash,
        )

    async def _save(self, record: EffectRecord, *, sent: bool) -> EffectRecord:
        """Commit the next version of ``record`` (compare-and-set, fenced); retried with
        backoff, then fail loudly (guarantee 7). ``sent``: the tool may have acted already."""
        new = machine.next_version(record, now())
        await facts.flush(self.ctx)  # what the node drew before: durable first
        async for attempt in attempts(RECORD_RETRY_DELAYS, self.ctx.config.sleep):
            try:
                await self.store.save_effect(new, fence=self.ctx.fence)
                return new
            except (LeaseLostError, StaleStateError):
                raise  # another holder took the run or the record: retrying cannot help
            except StorageError as exc:
                if attempt.last:
                    log.error(
                        "could not record effect %s (%s) after retries: %s",
                        record.effect_id,
                        record.status,
                        exc,
                    )
                    if not sent:
                        raise LedgerUnavailableError(
                            f"effect {record.effect_id} ({record.effect_type}) could not be "
                            f"recorded before its call ({exc}); the tool did NOT run. The run "
                            "failed and can be resumed once the store is back."
                        ) from exc
                    raise LedgerWriteError(
                        f"effect {record.effect_id} ran but its {record.status} result could "
                        f"not be recorded: {exc}. The run stops here; resuming it treats the "
                        "effect as UNKNOWN and applies the tool class's policy."
                    ) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def _finish(self, record: EffectRecord) -> EffectRecord:
        """Record a final outcome: staged into the step's commit, or committed now."""
        retried = self.call.commit_if_retried and len(record.attempts) > 1
        if self.call.fold and self.ctx.may_fold and not retried:
            staged = machine.next_version(record, now())
            self.ctx.staged_effects.append(staged)
            self._event("effect_result", staged, folded=True)
            return staged
        saved = await self._save(record, sent=True)
        self._event("effect_result", saved, folded=False)
        self.ctx.crash_point("after_effect_record")
        return saved

    # -- entry -----------------------------------------------------------------------------

    async def run(self) -> Any:
        self.ctx.check_open()
        cls = self.call.effect_class
        replay = self.ctx.replay
        if replay is not None and replay.recorded:
            return await self._replayed(replay)
        if self.call.runs == "thread":  # refused before its intent when threads are stuck
            executor.current().check_room(self._what)
        if (
            replay is not None
            and cls is EffectClass.IRREVERSIBLE
            and self.call.effect_type not in replay.allow_irreversible
        ):
            raise _ParkSignal(
                self.effect_id,
                f"this live replay reached irreversible tool {self.call.effect_type!r} "
                f"(effect {self.effect_id}, command {self.call.command_id}) and did not send "
                "it: a live replay sends an irreversible effect only when it is listed, "
                f"e.g. replay(..., allow_irreversible=[{self.call.effect_type!r}])",
            )
        if cls in (EffectClass.READ, EffectClass.MODEL):
            return await self._run_unprotected()
        if self.call.positional and not self.ctx.fresh:
            await self._check_position()
        if self.effect_id in self.ctx.planned:
            found = await self._planned()
            if found is not None:
                return await self._from_plan(found)
        self.ctx.crash_point("before_intent")
        await facts.flush(self.ctx)  # the request may carry a value the node drew
        intent = machine.intent(self._new_record(EffectStatus.PENDING, ()), now())
        try:
            stored, created = await self.store.begin_effect(intent, fence=self.ctx.fence)
        except (LeaseLostError, CorruptRecordError):
            raise  # a damaged record is not an unavailable ledger: it names its own fix
        except StorageError as exc:
            raise LedgerUnavailableError(
                f"the effect ledger cannot be read or written ({exc}); {cls} tool "
                f"{self.call.effect_type!r} did NOT run. The run failed and can be resumed "
                "once the store is back."
            ) from exc
        self.ctx.crash_point("after_intent")
        if created:
            self._event("effect_intent", stored)
            return await self._attempts(stored, claimed=True)
        return await self._decide(stored)

    async def _planned(self) -> EffectRecord | None:
        """The intent written with the checkpoint this fresh step starts from
        (:mod:`oncegraph.ledger.planned`), as the ledger holds it now: the record itself
        when that commit inserted it (this runner has held the run since, and every other
        writer of its effects takes the run's claim first), else read back."""
        if self.ctx.planned_written:
            return self.ctx.planned[self.effect_id]
        try:
            return await self.store.get_effect(self.effect_id)
        except CorruptRecordError:
            raise
        except StorageError as exc:
            raise LedgerUnavailableError(
                f"the effect ledger cannot be read ({exc}); {self.call.effect_class} tool "
                f"{self.call.effect_type!r} did NOT run. The run failed and can be resumed "
                "once the store is back."
            ) from exc

    async def _from_plan(self, found: EffectRecord) -> Any:
        """A planned intent nobody touched is called at once, with no commit first (the
        intent is already durable); anything else is decided from the record."""
        self.ctx.crash_point("before_intent")
        self.ctx.crash_point("after_intent")
        if not is_untouched_plan(found, self.request_hash):
            return await self._decide(found)
        if not self.ctx.planned_written:  # read back: the row must be what was planned
            self._check_found(found)
        self._event("effect_intent", found, planned=True)
        begun = machine.begin_attempt(found, now())
        self._unsaved = True  # attempt 1 is begun in memory only, until an outcome is saved
        return await self._attempts(begun, claimed=True)

    async def _replayed(self, replay: ReplayPolicy) -> Any:
        """An evidence or simulation replay: recorded results or stand-ins, never live
        (:mod:`oncegraph.ledger.replayed`)."""
        return await replayed.answer(self, replay)

    async def _run_unprotected(self) -> Any:
        """read / model: no intent commit; a recorded result is reused.

        A model call on a fresh step (its checkpoint was just committed by this runner)
        cannot have been recorded before, so its lookup is skipped; reads always look, so an
        unreadable ledger is reported (guarantee 7).
        """
        found = None
        if not (self.ctx.fresh and self.call.effect_class is EffectClass.MODEL):
            try:
                found = await self.store.get_effect(self.effect_id)
            except CorruptRecordError:
                raise  # running it would overwrite the damaged row: it stays as it is
            except StorageError as exc:
                log.warning("ledger unreadable, running %s again: %s", self.call.effect_type, exc)
        if found is None:
            return await self._attempts(self._new_record(EffectStatus.PENDING, ()))
        return await self._decide(found)

    async def _check_position(self) -> None:
        """A re-run node's n-th effect must be the kind recorded at n (DBOS's check): an
        effect of another kind there means the node's effects changed order, and running
        it under this position would skip or repeat a real one."""
        call = self.call
        for record in await self.store.list_effects(run_id=self.ctx.run_id):
            if record.command_id == call.command_id and record.effect_type != call.effect_type:
                raise NondeterminismError(
                    f"node {self.ctx.node!r} now makes {call.effect_type!r} as its effect "
                    f"{call.command_id}, where the run recorded {record.effect_type!r} "
                    f"(effect {record.effect_id}, {record.status}): its effects changed order "
                    "(a deploy?). Nothing was sent. Keep the order of effects in a node "
                    "stable, or finish such runs on the old version (previous_versions)."
                )

    def _check_found(self, record: EffectRecord, *, compare: bool = True) -> None:
        """The record found is whole and is this call's (:mod:`oncegraph.ledger.integrity`);
        ``compare``: its request hash may be told apart from this call's."""
        check_found(
            record,
            self.key,
            effect_type=self.call.effect_type,
            command_id=self.call.command_id,
            call_hash=self.request_hash if compare else None,
        )

    def _check_hash(self, record: EffectRecord) -> None:
        if record.request_hash != self.request_hash and not same_request(
            record.request_hash, self.call.request, self.key
        ):
            raise RequestMismatchError(record.effect_id, record.request_hash, self.request_hash)

    async def _decide(self, record: EffectRecord) -> Any:
        """A record already exists for this command: decide from it, not from hope."""
        self._check_found(record)
        self._check_hash(record)
        has_probe = self.call.probe is not None
        decision = machine.decide(record, self.call.effect_class, has_probe=has_probe, at=now())
        return await self._act(decision)

    async def _act(self, decision: machine.Decision) -> Any:
        """Carry out what the machine decided."""
        if isinstance(decision, machine.UseRecorded):
            return decision.result
        if isinstance(decision, machine.Run):
            return await self._attempts(decision.record)
        if isinstance(decision, machine.Probe):
            assert self.call.probe is not None  # decided so because there is one
            verdict = await _call_hook(self.call.probe, decision.record)
            return await self._verdict(decision.record, verdict, "is still pending")
        if isinstance(decision, machine.Reconcile):
            return await self._reconcile(decision.record, decision.why)
        if isinstance(decision, machine.Refuse):
            raise EffectFailedError(
                f"irreversible effect {decision.record.effect_id} failed earlier "
                f"({decision.record.error}); it is never retried automatically. Redeliver it "
                "explicitly if it must go."
            )
        if isinstance(decision, machine.Park):
            raise self._parked(decision.record, decision.why)
        await self._save(decision.record, sent=True)
        self._event("effect_reconciled", decision.record, verdict=decision.verdict)
        return decision.result

    async def _reconcile(self, record: EffectRecord, why: str, *, may_send: bool = True) -> Any:
        """Ask the recipient (the tool's reconcile hook); park when the tool cannot ask.
        ``may_send``: False after a timeout (see :func:`machine.after_verdict`)."""
        if self.call.reconcile is None:
            raise self._parked(record, why + " and the tool has no reconcile hook")
        verdict = await _call_hook(self.call.reconcile, record)
        return await self._verdict(record, verdict, why, may_send=may_send)

    async def _verdict(
        self, record: EffectRecord, verdict: Any, why: str, *, may_send: bool = True
    ) -> Any:
        return await self._act(
            machine.after_verdict(record, verdict, why, may_send=may_send, at=now())
        )

    # -- attempts --------------------------------------------------------------------------

    async def _attempts(self, record: EffectRecord, *, claimed: bool = False) -> Any:
        """Call the tool, at most the policy's number of times in this perform (once for
        an irreversible tool).

        ``claimed``: the record's last attempt is the intent just committed for this call.
        Otherwise each try first claims a new attempt in the row (for side effects a
        committed intent, guarantee 2).
        """
        async for attempt in attempts(self.policy, self.ctx.config.sleep):
            if not claimed:
                self.ctx.check_open()
                record = machine.begin_attempt(record, now())
                if self.risky:
                    record = await self._save(record, sent=False)
            claimed = False
            end = await self._call(record)
            if isinstance(end, calls.Returned):
                self.ctx.crash_point("after_tool_return")
                done = machine.returned(record, end.value, now(), reference=self._reference)
                await self._finish(done)
                return done.result
            if isinstance(end, calls.Raised):
                error = machine.error_text(end.error)
                if not attempt.last:
                    record = machine.end_attempt(record, AttemptOutcome.FAILED, error, now())
                    continue
                await self._finish(machine.failed(record, error, now()))
                if isinstance(end.error, OnceGraphError):
                    raise end.error  # oncegraph's own error inside the tool: not the tool's
                raise ToolFailed(end.error) from end.error
            if isinstance(end, calls.InFlight):
                if self._unsaved:  # a planned call's attempt: the record must show it open
                    record = await self._save(record, sent=True)
                self._keep(record, end.call)
                if self.call.effect_class is EffectClass.IRREVERSIBLE:
                    raise self._parked(record, self._still_running())
                raise ToolTimeoutError(
                    f"{self.call.effect_type} {self._still_running()}; the run stays held by "
                    "this process until it ends and its outcome is recorded, then it can be "
                    "resumed."
                )
            # Ended: timed out and stopped; what it did is unknown
            record = machine.timed_out(record, now())
            if self.risky:
                record = await self._save(record, sent=True)
            if self.call.effect_class is EffectClass.IRREVERSIBLE:
                # ask the recipient, never re-send: the request may still arrive
                why = f"timed out after {self.call.timeout}s"
                return await self._reconcile(record, why, may_send=False)
            if not attempt.last:
                continue
            raise ToolTimeoutError(
                f"{self.call.effect_type} timed out after {self.call.timeout}s; its outcome "
                f"is unknown (effect {self.effect_id} stays pending). Resume the run to "
                "try again with the same idempotency key."
            )
        raise AssertionError("unreachable")  # pragma: no cover

    def _still_running(self) -> str:
        return (
            f"timed out after {self.call.timeout}s and was still running "
            f"{self.ctx.config.tool_grace or 0}s later, so its outcome is unknown and it may "
            "still reach the recipient"
        )

    # -- one call ----------------------------------------------------------------------------

    async def _call(self, record: EffectRecord) -> calls.CallEnd:
        effect = EffectContext(
            self.effect_id,
            self.call.effect_type,
            self.call.command_id,
            self.ctx.run_id,
            self.ctx.thread_id,
            len(record.attempts),
        )
        self._effect = effect
        runs = self.call.runs
        if runs == "inline":
            return calls.call_inline(self.call.fn, effect)
        call, self._thread = calls.start(self.call.fn, runs, effect)

        def stuck() -> None:  # the run is stopped from outside while the call goes on
            self._abandon()
            self._keep(record, call)

        end = await calls.wait(
            call,
            timeout=self.call.timeout,
            grace=self.ctx.config.tool_grace,
            stoppable=runs == "loop",
            on_cancel=stuck,
        )
        if isinstance(end, calls.InFlight):
            self._abandon()
        return end

    @property
    def _what(self) -> str:
        return f"tool {self.call.effect_type!r} (effect {self.effect_id})"

    def _abandon(self) -> None:
        """Stop waiting on a thread call that is still running: its thread is accounted."""
        if self._thread is not None and not self._thread.done():
            executor.current().abandon(self._thread, self._what)

    @property
    def _reference(self) -> str | None:
        effect = getattr(self, "_effect", None)
        return effect.provider_reference if effect is not None else None

    # -- calls that outlive their step ------------------------------------------------------

    def _keep(self, record: EffectRecord, call: asyncio.Future[Any]) -> None:
        """Hand a call still running to the run's claim, which records it when it ends."""
        claim = self.ctx.claim
        if claim is None:  # no claim (a bare TaskContext in a test): nothing can hold it
            return

        async def record_late(ended: Ended) -> None:
            t = now()
            if ended.cancelled():
                why = "cancelled after its step stopped"
                late = machine.end_attempt(record, AttemptOutcome.UNKNOWN, why, t)
            elif (error := ended.exception()) is not None:
                late = machine.failed(record, machine.error_text(error), t)
            else:
                late = machine.returned(record, ended.result(), t, reference=self._reference)
            await self._save(late, sent=True)
            log.info(
                "effect %s ended after its step stopped: recorded %s", late.effect_id, late.status
            )

        thread = self._thread if self.call.runs == "thread" else None
        claim.keep(call, record_late, thread=thread.to_future() if thread is not None else None)


async def perform(ctx: TaskContext, call: EffectCall) -> Performed:
    """Run ``call`` under the ledger's protocol; its (possibly recorded) result and id."""
    performer = _Performer(ctx, call, await hash_key(ctx.store))
    if call.mask or (isinstance(call.request, Mapping) and "mask" in call.request):
        remember_call(call.effect_type, call.request, call.mask)  # for reprs and spans
    with observe.effect_span(call, performer.effect_id, ctx):
        return Performed(await performer.run(), performer.effect_id)


__all__ = ["EffectCall", "Performed", "RunsOn", "ToolFailed", "perform"]
