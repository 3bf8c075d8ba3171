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
(the web UI) the ``oncegraph_key`` cookie set by the login form.
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
    """One key: its secret, role, optional tenant and a name that goes to the audit log."""

    key: str
    role: Role
    tenant: str | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or len(self.key) < 8:
            raise ConfigError("an API key must be a string of at least 8 characters")
        if self.tenant is not None and (not self.tenant or ":" in self.tenant):
            raise ConfigError(f"a tenant name must be non-empty without ':'; got {self.tenant!r}")


@dataclass(frozen=True, slots=True)
class Principal:
    """The caller of one request, as its key says."""

    name: str
    role: Role
    tenant: str | None

    def can(self, role: Role) -> bool:
        return self.role >= role

    @property
    def actor(self) -> str:
        """Who acted, as the audit log records it."""
        return f"api:{self.name}"


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


class KeyRing:
    """The server's keys, by digest."""

    def __init__(self, keys: Iterable[ApiKey]) -> None:
        self._by_digest: dict[str, Principal] = {}
        for k in keys:
            digest = _digest(k.key)
            name = k.name or f"{k.role.label}-{digest[:8]}"
            self._by_digest[digest] = Principal(name, k.role, k.tenant)
        if not self._by_digest:
            raise ConfigError("the server needs at least one API key")

    def __len__(self) -> int:
        return len(self._by_digest)

    def find(self, key: str | None) -> Principal | None:
        if not key:
            return None
        return self._by_digest.get(_digest(key))


def parse_spec(text: str) -> list[ApiKey]:
    """Keys from ``"<key>=<role>[@<tenant>][#<name>],..."`` (``ONCEGRAPH_API_KEYS``)."""
    keys = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        key, sep, rest = item.partition("=")
        if not sep:
            raise ConfigError(
                f"API key entry {item[:4]!r}... has no role; write <key>=<role>[@tenant][#name]"
            )
        rest, _, name = rest.partition("#")
        role, _, tenant = rest.partition("@")
        keys.append(ApiKey(key.strip(), Role.parse(role), tenant.strip() or None, name or None))
    return keys


def key_ring(keys: Any) -> tuple[KeyRing, str | None]:
    """The key ring from ``serve(keys=...)``; the second value is a generated admin key
    (only when no key was given anywhere: it is printed once at start-up).

    ``keys`` is ``None`` (read ``ONCEGRAPH_API_KEYS``), a spec string (see
    :func:`parse_spec`), a mapping ``{key: "role[@tenant]"}`` or ``{key: {"role": ...,
    "tenant": ..., "name": ...}}``, or an iterable of :class:`ApiKey`."""
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
                found.append(ApiKey(str(key), role, value.get("tenant"), value.get("name")))
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


__all__ = ["COOKIE", "ENV_KEYS", "ApiKey", "KeyRing", "Principal", "Role", "key_ring", "parse_spec"]
