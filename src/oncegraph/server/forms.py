"""What makes a web UI request this server's own: the page's token and the request's origin.

The login cookie goes with every request the browser makes to the server, whichever page
made it (``SameSite`` does not tell ports apart, nor sibling subdomains). So a
state-changing UI request must also prove that it came from a page this server rendered:

* **The form token** (:func:`token`): every form the UI renders carries it in the hidden
  field :data:`FIELD`; every state-changing UI request must send it back
  (:func:`token_ok`, a constant-time compare). It is an HMAC, under a key of the run
  service (:mod:`oncegraph.runs.signing`), of the digest of the API key the browser logged
  in with: bound to that login, the same in every replica and after a restart, and
  unreadable by another page (it is in no cookie; another origin cannot read the UI's
  pages, nor frame them).
* **The origin** (:func:`same_origin`): the request's ``Origin`` header, else the origin
  of its ``Referer``, must be one of the server's own origins: those configured
  (``create_app(origins=...)``, for a server behind a proxy), else the origin the request
  was addressed to. A request with neither header, or with ``Origin: null``, is refused.

A refused request changes nothing: both checks run before the command is read.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

from oncegraph.errors import ConfigError
from oncegraph.server.auth import digest

FIELD = "csrf"
"""The hidden form field that carries the token."""
_PREFIX = "f1."
_DEFAULT_PORTS = {"http": 80, "https": 443}


def token(key: bytes, api_key: str) -> str:
    """The form token for pages shown to whoever logged in with ``api_key``."""
    mac = hmac.new(key, b"ui-form:" + digest(api_key).encode(), hashlib.sha256).digest()
    return _PREFIX + base64.urlsafe_b64encode(mac).rstrip(b"=").decode()


def token_ok(key: bytes, api_key: str | None, sent: str | None) -> bool:
    """Is ``sent`` the form token of ``api_key``?"""
    if not api_key or not isinstance(sent, str) or not sent.isascii():
        return False
    return hmac.compare_digest(sent, token(key, api_key))


def origin_of(url: str) -> str | None:
    """``scheme://host[:port]`` of ``url``, lower case, without a default port; ``None``
    for anything that is not an absolute http(s) URL."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    host = parts.hostname
    if scheme not in _DEFAULT_PORTS or not host:
        return None
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    shown = f"{scheme}://{host}"
    return shown if port is None or port == _DEFAULT_PORTS[scheme] else f"{shown}:{port}"


def same_origin(headers: Mapping[str, str], own: str, allowed: tuple[str, ...] = ()) -> bool:
    """Did the request come from one of the server's origins? ``own``: the URL the request
    was addressed to (checked only when no origins are configured)."""
    sent = headers.get("origin")
    if sent is None:
        referer = headers.get("referer")
        sent = origin_of(referer) if referer else None
    else:
        sent = origin_of(sent)  # "null" (a sandboxed or privacy-redirected page) is None
    if sent is None:
        return False
    if allowed:
        return sent in allowed
    return sent == origin_of(own)


def parse_origins(values: str | Iterable[str] | None) -> tuple[str, ...]:
    """The public origins a server behind a proxy is reached at (``create_app(origins=)``):
    each ``scheme://host[:port]``, nothing after it. ``None`` or empty: the origin each
    request was addressed to."""
    if values is None:
        return ()
    if isinstance(values, str):
        values = [v for v in values.split(",") if v.strip()]
    found: list[str] = []
    for value in values:
        origin = origin_of(value) if isinstance(value, str) else None
        parts = urlsplit(value.strip()) if origin is not None else None
        if (
            origin is None
            or parts is None
            or parts.path not in ("", "/")
            or parts.query
            or parts.fragment
            or parts.username is not None
        ):
            raise ConfigError(
                f"origins: {value!r} is not an origin; give scheme://host[:port] as the "
                "browser shows it, e.g. https://ops.example.com (no path)"
            )
        found.append(origin)
    return tuple(dict.fromkeys(found))


__all__ = ["FIELD", "origin_of", "parse_origins", "same_origin", "token", "token_ok"]
