"""Planned intents: the pending records of calls a step's checkpoint already decides.

A model turn's assistant message names the tool calls the next step (a ``ToolNode``)
will make. Their intents can be written in the SAME transaction as that checkpoint
(``StepCommit.intents``), so the tools step needs no commit of its own before calling:
a tool loop costs two commits per step, not three. Guarantee 2 holds: the intent is durable
before the call.

Which calls are planned: ``write`` tools only.

* A ``read`` tool has no intent at all.
* An ``irreversible`` tool keeps its own intent commit right before the call: its attempt
  is then recorded as begun, so a crash before the call leaves an intent whose attempt
  is open only if the call may have started. A planned intent found after a crash says
  nothing about whether the call started; for a ``write`` tool that is harmless (it goes
  again with the same idempotency key, as any unknown outcome of its class does), but an
  ``irreversible`` tool would park for review after every crash between the two steps.

A planned record is ``pending`` with no attempts and ``row_version`` 1. The tools step
that finds one, fresh after the commit that wrote it in this process, calls at once;
found any other time (a resume), it is an unknown outcome like any other ``pending``
record, and the class's policy decides.
"""

from __future__ import annotations

from typing import Any

from oncegraph.ledger.keys import effect_id_for, request_hash
from oncegraph.runtime.context import CallSite
from oncegraph.storage.records import Attempt, EffectClass, EffectRecord, EffectStatus


def intent_record(
    site: CallSite,
    *,
    effect_type: str,
    effect_class: EffectClass,
    command_id: str,
    request: Any,
    recipient: str | None,
    status: EffectStatus = EffectStatus.PENDING,
    attempts: tuple[Attempt, ...] = (),
    hashed: str | None = None,
    key: bytes | None = None,
    row_version: int = 0,
) -> EffectRecord:
    """The record of one command called at ``site`` as the ledger writes it first
    (planned or begun); ``hashed`` is its request hash, else it is computed under the
    store's ``key`` (:func:`oncegraph.ledger.keys.hash_key`); ``row_version`` 1 for a
    planned record (as inserted with its checkpoint)."""
    return EffectRecord(
        effect_id=effect_id_for(site.key_run_id, effect_type, command_id),
        effect_type=effect_type,
        effect_class=effect_class,
        command_id=command_id,
        run_id=site.run_id,
        thread_id=site.thread_id,
        node=site.node,
        request_hash=hashed if hashed is not None else request_hash(request, key),
        status=status,
        checkpoint_id=site.checkpoint_id,
        request=request,
        recipient=recipient,
        attempts=attempts,
        row_version=row_version,
    )


def planned(effect_class: EffectClass) -> bool:
    """Whether calls of ``effect_class`` get their intent written with the checkpoint
    that decides them (see the module docstring)."""
    return effect_class is EffectClass.WRITE


def is_untouched_plan(record: EffectRecord, hashed: str) -> bool:
    """``record`` is a planned intent nobody has attempted or changed since."""
    return (
        record.status is EffectStatus.PENDING
        and not record.attempts
        and record.row_version == 1
        and record.request_hash == hashed
    )


__all__ = ["intent_record", "is_untouched_plan", "planned"]
