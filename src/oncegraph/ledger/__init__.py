"""The effect ledger: intent before effect, result right after, check before call."""

from oncegraph.ledger.helpers import aeffect, effect
from oncegraph.ledger.outcomes import Accepted, Completed, Reconciled
from oncegraph.ledger.perform import EffectCall, perform

__all__ = ["Accepted", "Completed", "EffectCall", "Reconciled", "aeffect", "effect", "perform"]
