"""Request limits, as ASGI middleware: body size (413) and rate (429), JSON errors.

* Size: a ``Content-Length`` over ``max_body`` is refused before the body is read; a
  body sent without one is counted as it arrives by :func:`oncegraph.server.bodies.read`
  and refused once it passes the limit. The route never acts on a partial body.
* Rate: a token bucket per caller (the API key's digest, else the client address):
  ``rate`` requests per second on average, bursts of ``burst``. A refused request gets
  ``Retry-After``. Static files are not counted.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections import OrderedDict
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from oncegraph.server.auth import COOKIE
from oncegraph.server.problems import ApiError, response


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


class RateLimit:
    def __init__(self, app: ASGIApp, rate: float, burst: int, max_callers: int = 10_000):
        self.app = app
        self.rate = rate
        self.burst = burst
        self.max_callers = max_callers
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path", "").startswith("/static/"):
            await self.app(scope, receive, send)
            return
        wait = self._take(_caller(scope))
        if wait > 0:
            error = ApiError(
                429,
                "rate_limited",
                f"too many requests: the limit is {self.rate:g} per second (bursts of "
                f"{self.burst}); retry after {math.ceil(wait)} s",
            )
            await response(error, {"Retry-After": str(math.ceil(wait))})(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _take(self, caller: str) -> float:
        """Take a token for ``caller``: 0 if granted, else seconds until one is free."""
        t = time.monotonic()
        tokens, last = self._buckets.pop(caller, (float(self.burst), t))
        tokens = min(float(self.burst), tokens + (t - last) * self.rate)
        if tokens >= 1.0:
            self._buckets[caller] = (tokens - 1.0, t)
            wait = 0.0
        else:
            self._buckets[caller] = (tokens, t)
            wait = (1.0 - tokens) / self.rate
        while len(self._buckets) > self.max_callers:
            self._buckets.popitem(last=False)
        return wait


def _caller(scope: Scope) -> str:
    headers: dict[bytes, bytes] = dict(scope.get("headers", ()))
    key: Any = headers.get(b"x-api-key") or headers.get(b"authorization")
    if not key:
        cookie = headers.get(b"cookie", b"")
        if COOKIE.encode() in cookie:
            key = cookie
    if key:
        return "k:" + hashlib.sha256(key).hexdigest()
    client = scope.get("client")
    return "a:" + (str(client[0]) if client else "?")


__all__ = ["BodyLimit", "RateLimit"]
