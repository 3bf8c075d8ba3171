"""The ledger's vocabulary, in one place to import it from.

The records themselves are storage types (:mod:`oncegraph.storage.records`, which every
store reads and writes); their meaning is the ledger's:

* :class:`EffectRecord`: every attempt at one external result, keyed by ``effect_id``;
  its ``request_hash`` is fixed at the first insert (guarantee 6).
* :class:`EffectStatus`: ``pending`` (intent committed, outcome unknown until recorded),
  ``accepted`` (the recipient queued the work), ``completed``, ``failed``.
* :class:`EffectClass`: what a tool does to the world, which decides what happens on an
  unknown outcome (guarantee 5): ``read``, ``write``, ``irreversible`` (and ``model`` for
  recorded model calls).
* :class:`Attempt`: one try, with its start, end and outcome; an attempt with no end is
  either in flight (its claim holder is alive) or was cut off by a crash (unknown).
* :class:`RetryPolicy`: how often a class is tried, and how long to wait between tries.
"""

from oncegraph.ledger.retry import DEFAULT_POLICIES, RetryPolicy, policy_for
from oncegraph.storage.records import Attempt, EffectClass, EffectRecord, EffectStatus

__all__ = [
    "DEFAULT_POLICIES",
    "Attempt",
    "EffectClass",
    "EffectRecord",
    "EffectStatus",
    "RetryPolicy",
    "policy_for",
]
