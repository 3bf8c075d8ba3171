"""A ledger call inside an evidence or simulation replay: answered from the replayed
run's records or by a stand-in, never live (guarantee 9), by the call's replay class
(:mod:`oncegraph.graph.inputs`):

* ``repeat``: the function runs again, outside the ledger (nothing is recorded);
* a simulation uses the tool's ``simulate`` or a double passed to ``replay()``; without
  one, the record of a ``recorded`` call answers, and a ``live`` call is refused;
* an evidence replay serves the record (checked as the ledger checks any record found);
  a call without one is refused with an error naming it and the fixes.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

from oncegraph.errors import MissingRecordError
from oncegraph.graph.inputs import refusal
from oncegraph.ledger import machine
from oncegraph.runtime import executor
from oncegraph.runtime.replay import ReplayPolicy
from oncegraph.storage.records import EffectClass, EffectStatus

if TYPE_CHECKING:
    from oncegraph.ledger.perform import EffectCall, _Performer


async def answer(performer: _Performer, replay: ReplayPolicy) -> Any:
    """The result ``performer``'s call gets in ``replay`` (an evidence or simulation one)."""
    call = performer.call
    if call.replay == "repeat" and call.effect_class is not EffectClass.MODEL:
        return machine.outcome_of(await _again(call))[1]
    simulating = replay.mode == "simulation" and call.effect_class is not EffectClass.MODEL
    if simulating:
        double = replay.doubles.get(call.effect_type) or call.simulate
        if double is not None:
            value = double(*call.args, **call.kwargs)
            if inspect.isawaitable(value):
                value = await value
            return machine.outcome_of(value)[1]
        if call.replay == "live":
            raise MissingRecordError(refusal(_named(call), replay.evidence_run_id, simulate=True))
    found = await performer.store.get_effect(performer.effect_id)
    if found is None or found.status not in (EffectStatus.COMPLETED, EffectStatus.ACCEPTED):
        status = "no record" if found is None else f"a {found.status} record"
        if call.replay == "live":
            raise MissingRecordError(
                refusal(_named(call), replay.evidence_run_id, simulate=False)
                + f" (It found {status}.)"
            )
        if simulating:
            raise MissingRecordError(
                f"this simulation replay reached {call.effect_type!r} (command "
                f"{call.command_id}), which has no simulate=, no double and no recorded "
                f"result in run {replay.evidence_run_id} ({status}); pass "
                f"doubles={{{call.effect_type!r}: fn}} to replay(), mark it "
                "replay='repeat' if calling it again is harmless, or replay in mode='live'"
            )
        raise MissingRecordError(
            f"this evidence replay needs the recorded result of {call.effect_type!r} "
            f"(command {call.command_id}) in run {replay.evidence_run_id}, and found "
            f"{status}; an evidence replay never calls live. Mark it replay='repeat' if "
            "calling it again is harmless, or replay in mode='live' or 'simulation' to run it."
        )
    model = call.effect_class is EffectClass.MODEL
    # a model request names its checkpoint, which the replay's thread does not share
    performer._check_found(found, compare=not model)
    if not model:
        performer._check_hash(found)
    return found.result


def _named(call: EffectCall) -> str:
    return f"{call.effect_type!r} (command {call.command_id}, marked replay='live')"


async def _again(call: EffectCall) -> Any:
    """A ``repeat`` call in a replay: the function once more, outside the ledger."""
    if call.runs == "loop":
        return await call.fn()
    if call.runs == "inline":
        return call.fn()
    return await executor.start(call.fn)[1]


__all__ = ["answer"]
