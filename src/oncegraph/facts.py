"""``now()``, ``uuid4()``, ``random()``: the clock, ids and random numbers as recorded facts.

Node code that reads the clock or draws a random number or a new id makes its run depend
on a value nobody can compute again. Inside a running node (or a ``@task``, or a node of
a subgraph at any depth) these helpers record each value as a fact of the run the first
time, and give the same value back every later time that code runs for that step: a
resume after a crash, an interrupt or a park, a node retry, and a replay in any mode. An
evidence replay that reaches a value the original run never drew refuses it.

Values are numbered by call order inside their node (and inside each ``@task`` call), so
keep that order stable, as with ``effect()``. Outside a running graph they return live
values: ``datetime.now(timezone.utc)``, ``uuid.uuid4()``, ``random.random()``.

What a crash keeps (:mod:`oncegraph.ledger.facts`): the values ride the step's commit, and
are committed earlier when an effect the node makes after drawing them records anything,
so any record that could carry a value carries the recorded one. A crash before either
re-runs the node from the top, and it draws fresh values that nothing recorded has seen.
"""

from __future__ import annotations

import random as _random
import uuid as _uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from oncegraph.func.tasks import current_call
from oncegraph.ledger.facts import draw
from oncegraph.runtime.context import current_task

_rng = _random.SystemRandom()


def _fact(kind: str, make: Callable[[], Any]) -> Any:
    ctx = current_task()
    if ctx is None:
        return None
    return draw(ctx, current_call(), kind, make)


def now() -> datetime:
    """The current time (timezone-aware, UTC), recorded: the same on every re-run."""
    stored = _fact("now", lambda: datetime.now(UTC).isoformat())
    if stored is None:
        return datetime.now(UTC)
    return datetime.fromisoformat(stored)


def uuid4() -> _uuid.UUID:
    """A new random UUID, recorded: the same on every re-run."""
    stored = _fact("uuid4", lambda: str(_uuid.uuid4()))
    if stored is None:
        return _uuid.uuid4()
    return _uuid.UUID(stored)


def random() -> float:
    """A random float in [0.0, 1.0), recorded: the same on every re-run."""
    stored = _fact("random", _rng.random)
    if stored is None:
        return _rng.random()
    return float(stored)


__all__ = ["now", "random", "uuid4"]
