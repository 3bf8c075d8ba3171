"""Security headers on every response (pages, JSON, event streams, static files, refusals).

* ``Content-Security-Policy``: the UI's pages load only the server's own script and style
  sheet (no inline script or style anywhere in the templates), post forms only to the
  server, and may not be framed (``frame-ancestors 'none'``; ``X-Frame-Options: DENY``
  for older browsers);
* ``X-Content-Type-Options: nosniff``: a JSON body or a static file is never run as
  something else;
* ``Referrer-Policy: same-origin``: a UI URL (run ids, filters) is never sent to another
  site;
* ``Cross-Origin-Opener-Policy: same-origin``: a page that opened the UI in a window
  gets no handle on it;
* ``Cache-Control: no-store`` on everything but static files (pages and JSON hold run
  data), unless the route set its own.

A header the route already set is kept.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

CSP = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self'",
        "connect-src 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
    )
)
HEADERS = (
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
)
NO_STORE = (b"cache-control", b"no-store")


class SecurityHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        static = str(scope.get("path", "")).startswith("/static/")
        extra = HEADERS if static else (*HEADERS, NO_STORE)

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                present = {name.lower() for name, _ in headers}
                headers.extend(h for h in extra if h[0] not in present)
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, sending)


__all__ = ["CSP", "HEADERS", "SecurityHeaders"]
