"""Request limits, as ASGI middleware: who is asking, how often, how much; JSON errors.

* **The gate** (:class:`Gate`), before anything reads the request: it verifies the key
  the request presents (:func:`oncegraph.server.auth.credential`, the routes' own
  choice), then takes a token from a bucket:

  - a verified key's bucket, by the key's name: ``rate`` requests per second on average
    and bursts of ``burst`` (the key's own ``rate``/``burst`` if it has them). Headers
    that verify nothing (a random ``X-API-Key``, a junk cookie) do not make a new bucket;
  - otherwise (no key, a wrong key, and every login attempt, whose key is in the body)
    the client address's bucket (IPv6 by its /64), at the much lower ``auth_rate`` and
    ``auth_burst``: guessing keys is limited per address.

  A refused request gets 429 with ``Retry-After`` (whole seconds, rounded up) and the
  exact wait in the body. Then an API request (``/api/...`` but ``/api/health``) without
  a verified key is answered 401 there: no route reads or parses its body. Static files
  and ``/api/health`` are neither counted nor checked: a load balancer's probe must not
  fail because someone guessed keys from its address.
* **Size** (:class:`BodyLimit`): a ``Content-Length`` over ``max_body`` is refused
  before the body is read; a body sent without one is counted as it arrives by
  :func:`oncegraph.server.bodies.read` and refused once it passes the limit. The route
  never acts on a partial body.

The client address is the connection's, or the one the ASGI server took from trusted
proxy headers (uvicorn's ``--forwarded-allow-ips``).
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections import OrderedDict

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from oncegraph.server.auth import KeyRing, Principal, credential
from oncegraph.server.problems import ApiError, response

UNAUTHORIZED = (
    "a valid API key is required: send 'Authorization: Bearer <key>' or 'X-API-Key: <key>'"
)
PUBLIC_API = frozenset({"/api/health"})


class BodyLimit:
    def __init__(self, app: ASGIApp, max_body: int) -> None:
        self.app = app
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    await self._refuse(scope, receive, send, 400, "bad Content-Length header")
                    return
                if declared > self.max_body:
                    await self._refuse(scope, receive, send, 413, self._message())
                    return
        await self.app(scope, receive, send)

    def _message(self) -> str:
        return too_large(self.max_body)

    async def _refuse(
        self, scope: Scope, receive: Receive, send: Send, status: int, message: str
    ) -> None:
        code = "payload_too_large" if status == 413 else "bad_request"
        await response(ApiError(status, code, message), {"Connection": "close"})(
            scope, receive, send
        )


def too_large(max_body: int) -> str:
    return (
        f"request body is over the limit of {max_body} bytes; send less (the server's "
        "limit is create_app(max_body=...))"
    )


class Buckets:
    """Token buckets by caller; the least recently used go first past ``max_callers``."""

    def __init__(self, max_callers: int) -> None:
        self.max_callers = max_callers
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def take(self, caller: str, rate: float, burst: int) -> float:
        """Take a token for ``caller``: 0 if granted, else seconds until one is free."""
        t = time.monotonic()
        tokens, last = self._buckets.pop(caller, (float(burst), t))
        tokens = min(float(burst), tokens + (t - last) * rate)
        if tokens >= 1.0:
            self._buckets[caller] = (tokens - 1.0, t)
            wait = 0.0
        else:
            self._buckets[caller] = (tokens, t)
            wait = (1.0 - tokens) / rate
        while len(self._buckets) > self.max_callers:
            self._buckets.popitem(last=False)
        return wait


class Gate:
    """Verify the caller, limit it, and refuse an unauthenticated API request before its
    body is read. See the module docstring."""

    def __init__(
        self,
        app: ASGIApp,
        keys: KeyRing,
        *,
        rate: float,
        burst: int,
        auth_rate: float,
        auth_burst: int,
        max_addresses: int = 10_000,
    ) -> None:
        self.app = app
        self.keys = keys
        self.rate, self.burst = rate, burst
        self.auth_rate, self.auth_burst = auth_rate, auth_burst
        # keys are few (the ring's names); addresses are many, and must not push keys out
        self._keys = Buckets(max_callers=max(len(keys), 1) * 2)
        self._addresses = Buckets(max_callers=max_addresses)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = str(scope.get("path", ""))
        if scope["type"] != "http" or path.startswith("/static/") or path in PUBLIC_API:
            await self.app(scope, receive, send)
            return
        principal = self._principal(scope, path)
        if principal is not None:
            rate, burst = principal.rate or self.rate, principal.burst or self.burst
            wait = self._keys.take(principal.name, rate, burst)
            who = f"key {principal.name!r}"
        else:
            rate, burst = self.auth_rate, self.auth_burst
            wait = self._addresses.take(address_of(scope), rate, burst)
            who = "requests without a valid API key from this address"
        if wait > 0:
            seconds = math.ceil(wait)
            error = ApiError(
                429,
                "rate_limited",
                f"too many requests: the limit for {who} is {rate:g} per second (bursts of "
                f"{burst}); retry after {seconds} s",
                retry_after=round(wait, 3),
            )
            await response(error, {"Retry-After": str(seconds)})(scope, receive, send)
            return
        if principal is None and path.startswith("/api/"):
            error = ApiError(401, "unauthorized", UNAUTHORIZED)
            await response(error, {"WWW-Authenticate": "Bearer"})(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _principal(self, scope: Scope, path: str) -> Principal | None:
        if path == "/ui/login" and scope.get("method") == "POST":
            return None  # the key tried is in the body: every attempt counts as a guess
        return self.keys.find(credential(Headers(scope=scope), cookie=path.startswith("/ui/")))


def address_of(scope: Scope) -> str:
    """The bucket of the client's address: an IPv6 address by its /64 (one host holds a
    whole /64), anything else as it is."""
    client = scope.get("client")
    host = str(client[0]) if client else "?"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


__all__ = ["PUBLIC_API", "UNAUTHORIZED", "BodyLimit", "Buckets", "Gate", "address_of"]
