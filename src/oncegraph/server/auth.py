"""API keys and roles: who may read, who may act, who may send again.

Roles are ordered; each includes the ones before it:

* ``viewer``: read runs, state, history, effects and the audit log, payloads masked;
* ``operator``: start runs and the run commands (Continue, Resolve, Check, Replay,
  Branch, Abandon);
* ``admin``: Redeliver, and payloads unmasked where the run service allows.

A key may be bound to a tenant: it then sees only that tenant's threads
(:mod:`oncegraph.server.tenancy`). Keys are compared by their SHA-256 digest, so the
table never keeps a key in the clear and a lookup leaks no timing about its prefix.

A key reaches the server as ``Authorization: Bearer <key>``, ``X-API-Key: <key>``, or
(the web UI) the ``oncegraph_key`` cookie set by the login form; :func:`credential` is the
one place that picks which (the rate limit and the routes see the same key). A key may
carry its own rate limit (``rate``/``burst``), else the server's applies.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from starlette.requests import cookie_parser

from oncegraph.errors import ConfigError

COOKIE = "oncegraph_key"
ENV_KEYS = "ONCEGRAPH_API_KEYS"


class Role(IntEnum):
    VIEWER = 1
    OPERATOR = 2
    ADMIN = 3

    @classmethod
    def parse(cls, text: str) -> Role:
        try:
            return cls[text.strip().upper()]
        except KeyError:
            raise ConfigError(
                f"unknown role {text!r}; a key's role is viewer, operator or admin"
            ) from None

    @property
    def label(self) -> str:
        return self.name.lower()


@dataclass(frozen=True, slots=True)
class ApiKey:
    """One key: its secret, role, optional tenant, a name that goes to the audit log, and
    optionally its own rate limit (requests per second on average, bursts of ``burst``;
    ``None``: the server's)."""

    key: str
    role: Role
    tenant: str | None = None
    name: str | None = None
    rate: float | None = None
    burst: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or len(self.key) < 8:
            raise ConfigError("an API key must be a string of at least 8 characters")
        if self.tenant is not None and (not self.tenant or ":" in self.tenant):
            raise ConfigError(f"a tenant name must be non-empty without ':'; got {self.tenant!r}")
        if self.rate is not None and not (
            isinstance(self.rate, (int, float)) and 0 < self.rate < float("inf")
        ):
            raise ConfigError(f"a key's rate must be a positive number; got {self.rate!r}")
        if self.burst is not None and not (
            isinstance(self.burst, int) and not isinstance(self.burst, bool) and self.burst >= 1
        ):
            raise ConfigError(f"a key's burst must be a whole number >= 1; got {self.burst!r}")


@dataclass(frozen=True, slots=True)
class Principal:
    """The caller of one request, as its key says (with the key's own rate limit, if any)."""

    name: str
    role: Role
    tenant: str | None
    rate: float | None = None
    burst: int | None = None

    def can(self, role: Role) -> bool:
        return self.role >= role

    @property
    def actor(self) -> str:
        """Who acted, as the audit log records it."""
        return f"api:{self.name}"


def digest(key: str) -> str:
    """A key's SHA-256, hex: how the ring finds it, and what UI tokens are bound to."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def credential(headers: Mapping[str, str], *, cookie: bool) -> str | None:
    """The key a request presents: ``Authorization: Bearer``, else ``X-API-Key``, else
    (only where ``cookie``: the web UI) the login cookie. ``headers`` are the request's,
    names in lower case."""
    header = headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        return header[7:].strip()
    key = headers.get("x-api-key")
    if key:
        return key.strip()
    if not cookie:
        return None
    return cookie_parser(headers.get("cookie", "")).get(COOKIE)  # as request.cookies reads it


class KeyRing:
    """The server's keys, by digest."""

    def __init__(self, keys: Iterable[ApiKey]) -> None:
        self._by_digest: dict[str, Principal] = {}
        for k in keys:
            hashed = digest(k.key)
            name = k.name or f"{k.role.label}-{hashed[:8]}"
            self._by_digest[hashed] = Principal(name, k.role, k.tenant, k.rate, k.burst)
        if not self._by_digest:
            raise ConfigError("the server needs at least one API key")

    def __len__(self) -> int:
        return len(self._by_digest)

    def find(self, key: str | None) -> Principal | None:
        if not key:
            return None
        return self._by_digest.get(digest(key))


SPEC = "<key>=<role>[@tenant][#name][;rate=<per second>][;burst=<n>]"


def parse_spec(text: str) -> list[ApiKey]:
    """Keys from ``"<key>=<role>[@<tenant>][#<name>][;rate=<r>][;burst=<b>],..."``
    (``ONCEGRAPH_API_KEYS``)."""
    keys = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        key, sep, rest = item.partition("=")
        if not sep:
            raise ConfigError(f"API key entry {item[:4]!r}... has no role; write {SPEC}")
        rest, *limits = rest.split(";")
        rest, _, name = rest.partition("#")
        role, _, tenant = rest.partition("@")
        options = _limits(limits, key[:4])
        keys.append(
            ApiKey(key.strip(), Role.parse(role), tenant.strip() or None, name or None, **options)
        )
    return keys


def _limits(parts: list[str], hint: str) -> dict[str, Any]:
    """``rate=<r>`` and ``burst=<b>`` of a spec entry."""
    found: dict[str, Any] = {}
    for part in parts:
        name, _, value = part.strip().partition("=")
        try:
            if name == "rate":
                found["rate"] = float(value)
            elif name == "burst":
                found["burst"] = int(value)
            else:
                raise ValueError(name)
        except ValueError:
            raise ConfigError(
                f"API key entry {hint!r}...: {part.strip()!r} is not rate=<requests per "
                f"second> or burst=<whole number>; write {SPEC}"
            ) from None
    return found


def key_ring(
    keys: str | Mapping[str, Any] | Iterable[ApiKey] | None,
) -> tuple[KeyRing, str | None]:
    """The key ring from ``serve(keys=...)``; the second value is a generated admin key
    (only when no key was given anywhere: it is printed once at start-up).

    ``keys`` is ``None`` (read ``ONCEGRAPH_API_KEYS``), a spec string (see
    :func:`parse_spec`), a mapping ``{key: "role[@tenant]"}`` or ``{key: {"role": ...,
    "tenant": ..., "name": ..., "rate": ..., "burst": ...}}``, or an iterable of
    :class:`ApiKey`."""
    generated = None
    if keys is None:
        spec = os.environ.get(ENV_KEYS, "")
        if spec.strip():
            found = parse_spec(spec)
        else:
            generated = secrets.token_urlsafe(24)
            found = [ApiKey(generated, Role.ADMIN, name="generated-admin")]
    elif isinstance(keys, str):
        found = parse_spec(keys)
    elif isinstance(keys, Mapping):
        found = []
        for key, value in keys.items():
            if isinstance(value, Mapping):
                role = Role.parse(str(value.get("role", "")))
                found.append(
                    ApiKey(
                        str(key),
                        role,
                        value.get("tenant"),
                        value.get("name"),
                        value.get("rate"),
                        value.get("burst"),
                    )
                )
            else:
                found.extend(parse_spec(f"{key}={value}"))
    else:
        found = []
        for k in keys:
            if not isinstance(k, ApiKey):
                raise ConfigError(f"keys must be ApiKey values; got {k!r}")
            found.append(k)
    return KeyRing(found), generated


def announce(generated: str, out: Any = None) -> None:
    """Print a generated key once, where the person who started the server sees it."""
    print(
        f"oncegraph: no API keys configured; generated an admin key for this process:\n"
        f"  {generated}\n"
        f"  (set {ENV_KEYS}='<key>=admin,<key>=viewer@tenant' to choose your own)",
        file=out or sys.stderr,
        flush=True,
    )


__all__ = [
    "COOKIE",
    "ENV_KEYS",
    "ApiKey",
    "KeyRing",
    "Principal",
    "Role",
    "credential",
    "digest",
    "key_ring",
    "parse_spec",
]
