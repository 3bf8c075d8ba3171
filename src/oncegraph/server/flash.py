"""The web UI's message after a command ("Effect ... resolved: completed."), kept off the URL.

A command's page redirects to its run's page, which shows what the command did. The
message travels in a short-lived, HTTP-only cookie signed by the server, never in the
URL (where anyone could write one, and where it would reach the access log and the
browser's history):

* the cookie holds the run id, the text and an expiry (:data:`TTL`), and an HMAC over
  them and the digest of the API key that ran the command, under the UI's key
  (:mod:`oncegraph.runs.signing`);
* the run page shows it only if the MAC holds for the key now logged in, it names that
  run, and it has not expired; then it is cleared. A cookie written by anyone else
  (another page of the same site can set cookies for this host) is ignored.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import math
from typing import Any

import orjson

from oncegraph.server.auth import digest

COOKIE = "oncegraph_flash"
TTL = 120.0
"""Seconds a message waits for its run page."""
MAX_BYTES = 1800
"""The longest message kept, in UTF-8 bytes (a cookie holds about 4 KB)."""


def seal(key: bytes, api_key: str, run_id: str, message: str, *, at: float) -> str:
    """The cookie value that shows ``message`` on ``run_id``'s page."""
    text = message.encode("utf-8", "replace")
    if len(text) > MAX_BYTES:
        message = text[: MAX_BYTES - 3].decode("utf-8", "ignore") + "..."
    body = _b64(orjson.dumps({"r": run_id, "m": message, "x": math.ceil(at + TTL)}))
    return f"{body}.{_mac(key, api_key, body)}"


def unseal(
    key: bytes, api_key: str | None, run_id: str, value: str | None, *, at: float
) -> str | None:
    """The message in ``value`` if this server wrote it for ``api_key`` and ``run_id``
    and it has not expired; else ``None``."""
    if not api_key or not value or not value.isascii():
        return None
    body, _, mac = value.partition(".")
    if not body or not hmac.compare_digest(mac, _mac(key, api_key, body)):
        return None
    try:
        fields: Any = orjson.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    except (binascii.Error, ValueError):
        return None
    if not isinstance(fields, dict) or fields.get("r") != run_id:
        return None
    expires, message = fields.get("x"), fields.get("m")
    if not isinstance(expires, int) or at > expires or not isinstance(message, str):
        return None
    return message


def _mac(key: bytes, api_key: str, body: str) -> str:
    signed = f"ui-flash:{digest(api_key)}:{body}".encode()
    return _b64(hmac.new(key, signed, hashlib.sha256).digest())


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


__all__ = ["COOKIE", "MAX_BYTES", "TTL", "seal", "unseal"]
