"""A node's retry policy (``add_node(retry_policy=...)``), as data.

Two shapes are accepted and normalized to :class:`NodeRetry`: LangGraph's
(:class:`RetryPolicy` below, also exported as ``oncegraph.types.RetryPolicy``:
``initial_interval``, ``backoff_factor``, ``max_interval``, ``max_attempts``,
``jitter``, ``retry_on``) and oncegraph's tool policy
(:class:`oncegraph.EffectRetry`: ``max_attempts``, ``initial_delay``, ``backoff``,
``max_delay``, ``jitter``), which retries any exception that is not oncegraph's own.

A retried node restarts from the top in the same step: its effects are keyed by
position, so an effect the failed attempt recorded is served from the ledger, not sent
again. The wait before attempt ``n + 1`` is
``min(max_interval, initial_interval * backoff_factor ** (n - 1))``, plus, when
``jitter`` is set, a random ``random.uniform(0, 1)`` seconds for LangGraph's shape (as
LangGraph adds) or up to 100% of the wait for the tool policy's, and is slept through
``RunConfig.sleep`` (tests pass a fake sleeper; nothing waits for real). A sync run
(``invoke``, ``stream``) waits with ``time.sleep`` in a worker thread, as LangGraph's
sync runs do, never blocking the event loop; the async paths with ``asyncio.sleep``.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from oncegraph.errors import ConfigError, OnceGraphError


def default_retry_on(exc: Exception) -> bool:
    """LangGraph's default: retry what looks transient (connection errors, 5xx answers,
    unknown errors); never programming or input errors (``ValueError``, ``TypeError``,
    ``LookupError``, ``RuntimeError``, ``OSError`` and their kin)."""
    if isinstance(exc, ConnectionError):
        return True
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    if isinstance(status, int) and type(exc).__name__ in ("HTTPStatusError", "HTTPError"):
        return 500 <= status < 600
    if isinstance(exc, OnceGraphError):
        return False
    return not isinstance(
        exc,
        (
            ValueError,
            TypeError,
            ArithmeticError,
            ImportError,
            LookupError,
            NameError,
            SyntaxError,
            RuntimeError,
            ReferenceError,
            StopIteration,
            StopAsyncIteration,
            OSError,
        ),
    )


RetryOn = type[Exception] | Sequence[type[Exception]] | Callable[[Exception], bool]


class RetryPolicy(NamedTuple):
    """LangGraph's node retry policy (same fields, same defaults)."""

    initial_interval: float = 0.5
    backoff_factor: float = 2.0
    max_interval: float = 128.0
    max_attempts: int = 3
    jitter: bool = True
    retry_on: RetryOn = default_retry_on


@dataclass(frozen=True, slots=True)
class NodeRetry:
    """A node's retry policy, normalized (see the module docstring)."""

    max_attempts: int
    initial_interval: float
    backoff_factor: float
    max_interval: float
    jitter: bool
    retry_on: Callable[[Exception], bool]
    # a sequence of policies (LangGraph's ``retry_policy=(p1, p2)``): the first whose
    # ``retry_on`` takes the error decides (its attempts, its waits); this one is the first
    alternatives: tuple[NodeRetry, ...] = ()
    # jitter: up to this many seconds more (LangGraph's shape: 1); None: up to the wait
    jitter_seconds: float | None = None

    def retries(self, exc: Exception) -> bool:
        return self.chosen(exc) is not None

    def chosen(self, exc: Exception) -> NodeRetry | None:
        """The policy that handles ``exc``: this one, or the first of a sequence whose
        ``retry_on`` takes it; None when none does."""
        if self.alternatives:
            return next((p for p in self.alternatives if p.retry_on(exc)), None)
        return self if self.retry_on(exc) else None

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        base = min(self.max_interval, self.initial_interval * self.backoff_factor ** (attempt - 1))
        if not self.jitter:
            return base
        if self.jitter_seconds is not None:
            return base + random.uniform(0, self.jitter_seconds)
        return base + random.uniform(0, base)


def _predicate(retry_on: Any) -> Callable[[Exception], bool]:
    if isinstance(retry_on, type) and issubclass(retry_on, BaseException):
        return lambda exc: isinstance(exc, retry_on)
    if isinstance(retry_on, (tuple, list)) and all(
        isinstance(t, type) and issubclass(t, BaseException) for t in retry_on
    ):
        kinds = tuple(retry_on)
        return lambda exc: isinstance(exc, kinds)
    if callable(retry_on):
        return retry_on  # type: ignore[no-any-return]
    raise ConfigError(
        f"retry_on must be an exception class, a sequence of them, or a function of the "
        f"exception; got {retry_on!r}"
    )


def node_retry(node: str, policy: Any) -> NodeRetry | None:
    """``policy`` (either shape, or ``None``) as a :class:`NodeRetry`."""
    if policy is None:
        return None
    if isinstance(policy, (list, tuple)) and not isinstance(policy, RetryPolicy):
        if not policy:
            raise ConfigError(f"node {node!r}: retry_policy=() names no policy; pass one")
        if len(policy) > 1:  # chosen by the error: the first whose retry_on takes it
            each = tuple(r for r in (node_retry(node, p) for p in policy) if r is not None)
            return dataclasses.replace(each[0], alternatives=each)
        policy = policy[0]
    if hasattr(policy, "initial_interval"):  # LangGraph's shape (ours or LangGraph's own)
        retry = NodeRetry(
            int(policy.max_attempts),
            float(policy.initial_interval),
            float(policy.backoff_factor),
            float(policy.max_interval),
            bool(policy.jitter),
            _predicate(policy.retry_on),
            jitter_seconds=1.0,
        )
    elif hasattr(policy, "initial_delay"):  # oncegraph's tool policy, EffectRetry
        retry = NodeRetry(
            int(policy.max_attempts),
            float(policy.initial_delay),
            float(policy.backoff),
            float(policy.max_delay),
            bool(policy.jitter),
            lambda exc: not isinstance(exc, OnceGraphError),
        )
    else:
        raise ConfigError(
            f"node {node!r}: retry_policy must be a RetryPolicy (oncegraph.types.RetryPolicy) "
            f"or an oncegraph.EffectRetry; got {policy!r}"
        )
    if retry.max_attempts < 1:
        raise ConfigError(f"node {node!r}: max_attempts counts the first attempt; use >= 1")
    if retry.initial_interval < 0 or retry.max_interval < 0 or retry.backoff_factor < 1:
        raise ConfigError(f"node {node!r}: retry intervals must be >= 0 and backoff >= 1")
    return retry


__all__ = ["NodeRetry", "RetryPolicy", "default_retry_on", "node_retry"]
