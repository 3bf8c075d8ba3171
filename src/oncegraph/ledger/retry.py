"""Retry policy is data: one frozen :class:`EffectRetry` per tool (or model) call."""

from __future__ import annotations

import random
from dataclasses import dataclass

from oncegraph.errors import ConfigError
from oncegraph.storage.records import EffectClass


@dataclass(frozen=True, slots=True, kw_only=True)
class EffectRetry:
    """How often a tool that raised is tried again, and how long to wait.

    The wait before attempt ``n + 1`` (``n >= 1``) is
    ``min(max_delay, initial_delay * backoff ** (n - 1)) * (1 + jitter * U(-1, 1))``.
    ``max_attempts`` counts the first attempt, so ``1`` means "never retry".
    Irreversible tools are never retried automatically, whatever their policy says:
    they are reconciled instead.
    """

    max_attempts: int = 1
    initial_delay: float = 0.1
    backoff: float = 2.0
    max_delay: float = 5.0
    jitter: float = 0.1

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigError("EffectRetry.max_attempts counts the first try; use >= 1")
        if self.initial_delay < 0 or self.max_delay < 0 or self.backoff < 1:
            raise ConfigError("EffectRetry delays must be >= 0 and backoff >= 1")

    def delay(self, attempt: int) -> float:
        base = min(self.max_delay, self.initial_delay * self.backoff ** max(0, attempt - 1))
        return max(0.0, base * (1 + self.jitter * random.uniform(-1, 1)))


# The name it had when it shared it with a node's policy (oncegraph.types.RetryPolicy);
# the public ``oncegraph.RetryPolicy`` is a deprecated alias of EffectRetry.
RetryPolicy = EffectRetry

DEFAULT_POLICIES = {
    EffectClass.READ: EffectRetry(max_attempts=3),
    EffectClass.WRITE: EffectRetry(max_attempts=1),
    EffectClass.IRREVERSIBLE: EffectRetry(max_attempts=1),
    EffectClass.MODEL: EffectRetry(max_attempts=3),
}


def policy_for(effect_class: EffectClass, policy: EffectRetry | None) -> EffectRetry:
    if effect_class is EffectClass.IRREVERSIBLE:
        return EffectRetry(max_attempts=1)
    return policy or DEFAULT_POLICIES[effect_class]
