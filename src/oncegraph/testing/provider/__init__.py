"""A fake payment-style provider: a real local HTTP server that honours ``Idempotency-Key``.

Tests and the demo use it as the ground truth that counts side effects. It runs in a
thread (:class:`FakeProvider`) or in its own OS process (:func:`serve_forever_in_subprocess`,
``python -m oncegraph.testing.provider --port 0 --port-file F``) so it outlives a worker that
is SIGKILLed in the middle of a tool call. Standard library only.

One job per submodule; every public name is re-exported here:

- :mod:`~oncegraph.testing.provider.state`: :class:`ProviderState` (effects, keys, counters,
  faults, the state file), :class:`Faults`, :class:`Effect`, :func:`body_hash`.
- :mod:`~oncegraph.testing.provider.server`: the HTTP handler and server, and
  :class:`FakeProvider` (the server in a background thread).
- :mod:`~oncegraph.testing.provider.client`: :class:`ProviderClient`,
  :class:`ProviderResponse` and the :class:`ProviderError` hierarchy.
- :mod:`~oncegraph.testing.provider.process`: :class:`ProviderProcess`,
  :func:`serve_forever_in_subprocess` and :func:`main` (what ``python -m`` runs).

Endpoints (JSON in, JSON out)::

    POST /v1/charges  {"amount": num, "currency": str, ...}   kind "charge"
    POST /v1/emails   {"to": str, ...}                        kind "email"
    POST /v1/tickets  {"title": str, ...}                     kind "ticket"
    GET  /v1/effects/by-key/{key}   the effect stored under a key, or 404
    GET  /v1/effects                every effect, oldest first
    GET  /v1/stats                  {"performed", "by_kind", "replayed", "rejected", ...}
    GET  /v1/faults                 the faults in force
    POST /v1/faults                 replace the faults (see :class:`Faults`)
    POST /v1/reset                  forget every effect, key, counter and fault

Invariants, as Stripe keeps them (all decided in :class:`ProviderState`):

- An effect request without a key always performs a new effect.
- The first request with a key performs the effect and stores the key with the request's
  kind, canonical body hash and the response. A later request with the same key and the
  same kind and body gets that first response again with ``Idempotent-Replayed: true`` and
  performs nothing; with another kind or body it gets 422 and performs nothing.
- While the first request with a key is still in flight, another request with that key
  gets 409 and performs nothing, so concurrent requests perform at most one effect.
- With ``changed_payload="first_response"`` (``--changed-payload first_response``) a known
  key with another body gets the first response again instead of 422, as some providers
  answer; the changed request is dropped. With ``key_ttl`` (``--key-ttl S``) a key is
  forgotten S seconds after its first request, and a request with it performs anew.
  (:mod:`oncegraph.testing.recipient` tells such providers apart.)
- A request that fails validation (400) or by an injected fault stores nothing, so a retry
  with the same key may still perform.
- State is in memory and dies with the process unless a ``state_file`` is given; the file
  is replaced atomically after every change (it survives a kill, not a power loss). Faults
  are never saved: a restarted provider starts without any.
"""

from __future__ import annotations

from oncegraph.testing.provider.client import (
    ProviderClient,
    ProviderError,
    ProviderHTTPError,
    ProviderOutcomeUnknownError,
    ProviderResponse,
    ProviderTimeoutError,
    ProviderUnavailableError,
)
from oncegraph.testing.provider.process import (
    ProviderProcess,
    main,
    serve_forever_in_subprocess,
)
from oncegraph.testing.provider.server import FakeProvider
from oncegraph.testing.provider.state import Effect, Faults, ProviderState, body_hash
from oncegraph.testing.provider.state import Reply as Reply  # importable here before the split

__all__ = [
    "Effect",
    "FakeProvider",
    "Faults",
    "ProviderClient",
    "ProviderError",
    "ProviderHTTPError",
    "ProviderOutcomeUnknownError",
    "ProviderProcess",
    "ProviderResponse",
    "ProviderState",
    "ProviderTimeoutError",
    "ProviderUnavailableError",
    "body_hash",
    "main",
    "serve_forever_in_subprocess",
]
