"""Perform one side effect through the ledger (laws 2 to 7).

The protocol, for one command of one run::

    look up / insert the intent (pending, attempt n)     -- committed BEFORE the call
    call the tool under tool_timeout, with current_effect() set
    record completed | accepted | failed                 -- committed right after,
                                                            or folded into the checkpoint
                                                            when the call is the node's
                                                            last act

A record found on the way in decides instead of the call: ``completed`` returns the
recorded result; ``accepted`` asks the probe; ``pending`` is an UNKNOWN outcome handled
by class (read and write run again with the same key, irreversible reconciles or parks);
a different ``request_hash`` is a ``RequestMismatchError``. ``read`` and ``model``
effects are not side effects: they skip the intent commit and are recorded once done.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from oncegraph.errors import (
    EffectFailedError,
    LedgerUnavailableError,
    LedgerWriteError,
    RequestMismatchError,
    StorageError,
    ToolTimeoutError,
    _ParkSignal,
)
from oncegraph.ledger.keys import effect_id_for, request_hash
from oncegraph.ledger.outcomes import Accepted, Completed, Reconciled
from oncegraph.ledger.retry import RetryPolicy, policy_for
from oncegraph.runtime.context import EffectContext, TaskContext, reset_effect, set_effect
from oncegraph.storage.records import Attempt, EffectClass, EffectRecord, EffectStatus, now

log = logging.getLogger("oncegraph.ledger")

Hook = Callable[[EffectRecord], Any]

RECORD_RETRY_DELAYS = (0.05, 0.2, 0.8)


@dataclass(frozen=True, slots=True)
class EffectCall:
    effect_type: str
    effect_class: EffectClass
    command_id: str
    request: Any
    fn: Callable[[], Awaitable[Any]]
    recipient: str | None = None
    reconcile: Hook | None = None
    probe: Hook | None = None
    retry: RetryPolicy | None = None
    timeout: float | None = None
    fold: bool = False  # the call is the node's last act: its result may ride the checkpoint


class _Unknown(Exception):
    """The call's outcome is unknown (timeout)."""


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
        f"({record.recipient or 'unknown'}) and either redeliver the effect or abandon the run.",
    )


class _Performer:
    def __init__(self, ctx: TaskContext, call: EffectCall) -> None:
        self.ctx = ctx
        self.call = call
        self.store = ctx.store
        self.policy = policy_for(call.effect_class, call.retry)
        self.effect_id = effect_id_for(ctx.run_id, call.effect_type, call.command_id)
        self.request_hash = request_hash(call.request)
        self.risky = call.effect_class in (EffectClass.WRITE, EffectClass.IRREVERSIBLE)

    # -- recording -------------------------------------------------------------------------

    def _new_record(self, status: EffectStatus, attempts: tuple[Attempt, ...]) -> EffectRecord:
        ctx, call = self.ctx, self.call
        return EffectRecord(
            effect_id=self.effect_id,
            effect_type=call.effect_type,
            effect_class=call.effect_class,
            command_id=call.command_id,
            run_id=ctx.run_id,
            thread_id=ctx.thread_id,
            node=ctx.node,
            request_hash=self.request_hash,
            status=status,
            checkpoint_id=ctx.checkpoint_id,
            request=call.request,
            recipient=call.recipient,
            attempts=attempts,
        )

    async def _save(self, record: EffectRecord) -> None:
        """Commit a record; retried with backoff, then fail loudly (law 7)."""
        for delay in (*RECORD_RETRY_DELAYS, None):
            try:
                await self.store.save_effect(record)
                return
            except StorageError as exc:
                if delay is None:
                    log.error(
                        "could not record effect %s (%s) after retries: %s",
                        record.effect_id,
                        record.status,
                        exc,
                    )
                    raise LedgerWriteError(
                        f"effect {record.effect_id} ran but its {record.status} result could "
                        f"not be recorded: {exc}. The run stops here; resuming it treats the "
                        "effect as UNKNOWN and applies the tool class's policy."
                    ) from exc
                await asyncio.sleep(delay)

    async def _finish(self, record: EffectRecord) -> None:
        if self.call.fold and self.ctx.may_fold:
            self.ctx.staged_effects.append(record)
            return
        await self._save(record)
        self.ctx.crash_point("after_effect_record")

    # -- entry -----------------------------------------------------------------------------

    async def run(self) -> Any:
        cls = self.call.effect_class
        if cls in (EffectClass.READ, EffectClass.MODEL):
            return await self._run_unprotected()
        self.ctx.crash_point("before_intent")
        started = now()
        intent = self._new_record(EffectStatus.PENDING, (Attempt(1, started),))
        try:
            stored, created = await self.store.begin_effect(intent)
        except StorageError as exc:
            raise LedgerUnavailableError(
                f"the effect ledger cannot be read or written ({exc}); {cls} tool "
                f"{self.call.effect_type!r} does not run. The run failed and can be resumed "
                "once the store is back."
            ) from exc
        self.ctx.crash_point("after_intent")
        if created:
            return await self._attempts(stored, fresh=True)
        return await self._decide(stored)

    async def _run_unprotected(self) -> Any:
        """read / model: no intent commit; a recorded result is reused.

        A model call on a fresh step (its checkpoint was just committed by this runner)
        cannot have been recorded before, so its lookup is skipped; reads always look, so an
        unreadable ledger is reported (law 7).
        """
        found = None
        if not (self.ctx.fresh and self.call.effect_class is EffectClass.MODEL):
            try:
                found = await self.store.get_effect(self.effect_id)
            except StorageError as exc:
                log.warning("ledger unreadable, running %s again: %s", self.call.effect_type, exc)
        if found is not None:
            self._check_hash(found)
            if found.status is EffectStatus.COMPLETED:
                return found.result
        attempts = found.attempts if found is not None else ()
        record = found or self._new_record(EffectStatus.PENDING, ())
        return await self._attempts(record, attempts=attempts, insert=found is None)

    def _check_hash(self, record: EffectRecord) -> None:
        if record.request_hash != self.request_hash:
            raise RequestMismatchError(record.effect_id, record.request_hash, self.request_hash)

    async def _decide(self, record: EffectRecord) -> Any:
        """A record already exists for this command: decide from it, not from hope."""
        self._check_hash(record)
        status = record.status
        if status is EffectStatus.COMPLETED:
            return record.result
        if status is EffectStatus.ACCEPTED:
            if self.call.probe is None:
                return record.result
            return await self._apply_reconcile(record, await _call_hook(self.call.probe, record))
        if status is EffectStatus.FAILED:
            if self.call.effect_class is EffectClass.IRREVERSIBLE:
                raise EffectFailedError(
                    f"irreversible effect {record.effect_id} failed earlier ({record.error}); "
                    "it is never retried automatically. Redeliver it explicitly if it must go."
                )
            return await self._attempts(record)
        # pending: the outcome is UNKNOWN
        if self.call.effect_class is EffectClass.IRREVERSIBLE:
            return await self._reconcile(record, "was sent but its outcome is unknown")
        return await self._attempts(record)  # write: again with the SAME key

    async def _reconcile(self, record: EffectRecord, why: str) -> Any:
        if self.call.reconcile is None:
            raise _park(record, why + " and the tool has no reconcile hook")
        verdict = await _call_hook(self.call.reconcile, record)
        return await self._apply_reconcile(record, verdict, why)

    async def _apply_reconcile(
        self, record: EffectRecord, verdict: Any, why: str = "is still pending"
    ) -> Any:
        if not isinstance(verdict, Reconciled) or verdict.verdict == "unknown":
            if record.status is EffectStatus.ACCEPTED:
                return record.result
            raise _park(record, why + " and reconcile could not tell")
        if verdict.verdict == "not_done":
            return await self._attempts(record)
        status = EffectStatus.COMPLETED if verdict.verdict == "done" else EffectStatus.ACCEPTED
        t = now()
        closed = tuple(_close_open(a) for a in record.attempts)
        done = record.replace(
            status=status,
            result=verdict.result,
            provider_reference=verdict.provider_reference or record.provider_reference,
            attempts=(*closed, Attempt(len(closed) + 1, t, t, "reconciled")),
            updated_at=t,
        )
        await self._save(done)
        return verdict.result

    # -- attempts --------------------------------------------------------------------------

    async def _attempts(
        self,
        record: EffectRecord,
        *,
        attempts: tuple[Attempt, ...] | None = None,
        insert: bool = False,
        fresh: bool = False,
    ) -> Any:
        """Call the tool up to the policy's budget.

        ``fresh``: the last attempt of ``record`` is the intent just committed for this
        call. Otherwise every call starts a new attempt, and an attempt left open by a
        crash is closed as ``unknown``.
        """
        history = [_close_open(a) for a in (record.attempts if attempts is None else attempts)]
        if fresh:
            history[-1] = record.attempts[-1]
        fresh_intent = fresh
        budget = self.policy.max_attempts
        for n in range(budget):
            if not fresh_intent:
                history.append(Attempt(len(history) + 1, now()))
                if self.risky:  # a new attempt of a side effect is an intent too (law 2)
                    record = record.replace(
                        status=EffectStatus.PENDING, attempts=tuple(history), updated_at=now()
                    )
                    await self._save(record)
            fresh_intent = False
            effect = EffectContext(
                self.effect_id,
                self.call.effect_type,
                self.call.command_id,
                self.ctx.run_id,
                self.ctx.thread_id,
                len(history),
            )
            token = set_effect(effect)
            try:
                value = await self._invoke()
            except _Unknown:
                history[-1] = _ended(history[-1], "timeout", "tool_timeout elapsed")
                record = record.replace(attempts=tuple(history), updated_at=now())
                if self.risky:
                    await self._save(record)
                if self.call.effect_class is EffectClass.IRREVERSIBLE:
                    return await self._reconcile(record, "timed out")
                if n + 1 < budget:
                    await asyncio.sleep(self.policy.delay(n + 1))
                    continue
                raise ToolTimeoutError(
                    f"{self.call.effect_type} timed out after {self.call.timeout}s; its outcome "
                    f"is unknown (effect {self.effect_id} stays pending). Resume the run to "
                    "try again with the same idempotency key."
                ) from None
            except Exception as exc:
                history[-1] = _ended(history[-1], "failed", f"{type(exc).__name__}: {exc}")
                if n + 1 < budget:
                    record = record.replace(attempts=tuple(history), updated_at=now())
                    await asyncio.sleep(self.policy.delay(n + 1))
                    continue
                failed = record.replace(
                    status=EffectStatus.FAILED,
                    attempts=tuple(history),
                    error=history[-1].error,
                    updated_at=now(),
                )
                await self._record(failed, insert)
                raise
            finally:
                reset_effect(token)
            self.ctx.crash_point("after_tool_return")
            status, result, reference = _outcome(value)
            history[-1] = _ended(history[-1], status.value, None)
            done = record.replace(
                status=status,
                result=result,
                provider_reference=reference or effect.provider_reference,
                attempts=tuple(history),
                error=None,
                updated_at=now(),
            )
            await self._record(done, insert)
            return result
        raise AssertionError("unreachable")  # pragma: no cover

    async def _record(self, record: EffectRecord, insert: bool) -> None:
        if insert and not (self.call.fold and self.ctx.may_fold):
            try:
                _, created = await self.store.begin_effect(record)
            except StorageError:
                created = False
            if created:
                self.ctx.crash_point("after_effect_record")
                return
        await self._finish(record)

    async def _invoke(self) -> Any:
        timeout = self.call.timeout
        if timeout is None:
            return await self.call.fn()
        try:
            async with asyncio.timeout(timeout) as cm:
                return await self.call.fn()
        except TimeoutError:
            if cm.expired():
                raise _Unknown from None
            raise


def _ended(attempt: Attempt, outcome: str, error: str | None) -> Attempt:
    return Attempt(attempt.number, attempt.started_at, now(), outcome, error)


def _close_open(attempt: Attempt) -> Attempt:
    """An attempt left open by a crash: its outcome is unknown."""
    if attempt.ended_at is not None:
        return attempt
    return _ended(attempt, "unknown", "no outcome was recorded (crash or lost response)")


def _outcome(value: Any) -> tuple[EffectStatus, Any, str | None]:
    if isinstance(value, Accepted):
        return EffectStatus.ACCEPTED, value.result, value.provider_reference
    if isinstance(value, Completed):
        return EffectStatus.COMPLETED, value.result, value.provider_reference
    return EffectStatus.COMPLETED, value, None


@dataclass(frozen=True, slots=True)
class Performed:
    """What :func:`perform` hands back: the result (recorded or fresh) and the effect id."""

    result: Any
    effect_id: str


async def perform(ctx: TaskContext, call: EffectCall) -> Performed:
    """Run ``call`` under the ledger's protocol; its (possibly recorded) result and id."""
    performer = _Performer(ctx, call)
    return Performed(await performer.run(), performer.effect_id)
