"""The fake provider's state: effects, idempotency keys, counters and injected faults.

:class:`ProviderState` keeps them in memory (and, given a ``state_file``, in a JSON file
replaced atomically after every change) and decides every effect request; the HTTP layer
(:mod:`oncegraph.testing.provider.server`) only translates. Standard library only.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

_KINDS: dict[str, tuple[str, str]] = {  # path segment -> (kind, id prefix)
    "charges": ("charge", "ch"),
    "emails": ("email", "em"),
    "tickets": ("ticket", "tk"),
}
_BY_KEY = "/v1/effects/by-key/"

ChangedPayload = Literal["reject", "first_response"]
CHANGED_PAYLOAD_MODES: tuple[ChangedPayload, ...] = ("reject", "first_response")


@dataclass(frozen=True, slots=True)
class Faults:
    """Injected faults; ``POST /v1/faults`` replaces all of them at once.

    ``delay_seconds``: sleep after performing an effect, before answering (a lost response
    when the client times out). ``fail_next``: the next n effect requests fail with
    ``fail_status`` (JSON field ``status``) before anything else, performing nothing.
    ``accept_only``: answer 202 with status ``pending``; the effect reads ``succeeded``
    once ``settle_seconds`` have passed.
    """

    delay_seconds: float = 0.0
    fail_next: int = 0
    fail_status: int = 500
    accept_only: bool = False
    settle_seconds: float = 0.0

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Faults:
        known = {"delay_seconds", "fail_next", "status", "accept_only", "settle_seconds"}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown fault fields {sorted(unknown)}; known: {sorted(known)}")
        faults = cls(
            delay_seconds=float(data.get("delay_seconds", 0.0)),
            fail_next=int(data.get("fail_next", 0)),
            fail_status=int(data.get("status", 500)),
            accept_only=bool(data.get("accept_only", False)),
            settle_seconds=float(data.get("settle_seconds", 0.0)),
        )
        if faults.delay_seconds < 0 or faults.fail_next < 0 or faults.settle_seconds < 0:
            raise ValueError("delay_seconds, fail_next and settle_seconds must be >= 0")
        if not 400 <= faults.fail_status <= 599:
            raise ValueError("status must be an HTTP error status (400..599)")
        return faults

    def to_json(self) -> dict[str, Any]:
        return {
            "delay_seconds": self.delay_seconds,
            "fail_next": self.fail_next,
            "status": self.fail_status,
            "accept_only": self.accept_only,
            "settle_seconds": self.settle_seconds,
        }


@dataclass(frozen=True, slots=True)
class Effect:
    """One performed effect with the first response it was answered with."""

    id: str
    kind: str
    idempotency_key: str | None
    body: dict[str, Any]
    body_hash: str
    created_at: float
    settles_at: float | None  # set when accepted only; None when done at once
    response_status: int
    response_body: dict[str, Any]

    def to_json(self, now: float) -> dict[str, Any]:
        pending = self.settles_at is not None and now < self.settles_at
        return {
            "id": self.id,
            "kind": self.kind,
            "idempotency_key": self.idempotency_key,
            "status": "pending" if pending else "succeeded",
            "body": self.body,
            "body_hash": self.body_hash,
            "created_at": self.created_at,
            "response": {"status": self.response_status, "body": self.response_body},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Effect:
        return cls(
            id=data["id"],
            kind=data["kind"],
            idempotency_key=data["idempotency_key"],
            body=data["body"],
            body_hash=data["body_hash"],
            created_at=data["created_at"],
            settles_at=data.get("settles_at"),
            response_status=data["response"]["status"],
            response_body=data["response"]["body"],
        )


@dataclass(frozen=True, slots=True)
class Reply:
    """What the server answers: status, JSON body and whether it is a replay."""

    status: int
    body: Any
    replayed: bool = False


def body_hash(kind: str, body: Mapping[str, Any]) -> str:
    """``sha256:<hex>`` of the kind and the canonical JSON of the body."""
    canon = json.dumps([kind, body], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canon.encode()).hexdigest()


def _error(status: int, type_: str, message: str, **extra: Any) -> Reply:
    return Reply(status, {"error": {"type": type_, "message": message, **extra}})


def _invalid(kind: str, body: Mapping[str, Any]) -> str | None:
    def is_num(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    if kind == "charge":
        if not is_num(body.get("amount")) or body["amount"] <= 0:
            return "amount must be a positive number"
        if not isinstance(body.get("currency"), str) or not body["currency"]:
            return "currency must be a non-empty string"
    elif kind == "email" and not isinstance(body.get("to"), str):
        return "to must be a string"
    elif kind == "ticket" and not isinstance(body.get("title"), str):
        return "title must be a string"
    return None


@dataclass(slots=True)
class ProviderState:
    """The provider's effects, keys, counters and faults; every method is thread-safe.

    How it treats keys is configuration, fixed for the provider's life (unlike faults):
    ``changed_payload`` is what a known key with another body gets: ``"reject"`` (422,
    as Stripe does) or ``"first_response"`` (the first response again, as some providers
    do: the changed request is silently dropped). ``key_ttl``: seconds a key is kept
    after its first request (None: forever); an expired key is forgotten, so a request
    with it performs a new effect.
    """

    state_file: Path | None = None
    changed_payload: ChangedPayload = "reject"
    key_ttl: float | None = None
    _lock: threading.Lock = field(init=False, default_factory=threading.Lock)
    _effects: list[Effect] = field(init=False, default_factory=list)
    _by_key: dict[str, Effect] = field(init=False, default_factory=dict)
    _in_flight: set[str] = field(init=False, default_factory=set)
    _counts: dict[str, Any] = field(init=False, default_factory=dict)
    _faults: Faults = field(init=False, default_factory=Faults)

    def __post_init__(self) -> None:
        if self.changed_payload not in CHANGED_PAYLOAD_MODES:
            raise ValueError(
                f"changed_payload must be one of {CHANGED_PAYLOAD_MODES}, "
                f"got {self.changed_payload!r}"
            )
        if self.key_ttl is not None and self.key_ttl < 0:
            raise ValueError("key_ttl must be >= 0 seconds (or None: keep keys forever)")
        self._reset_locked()
        if self.state_file is not None and self.state_file.exists():
            data = json.loads(self.state_file.read_text())
            self._effects = [Effect.from_json(e) for e in data["effects"]]
            self._by_key = {e.idempotency_key: e for e in self._effects if e.idempotency_key}
            self._counts.update(data["counts"])

    def _reset_locked(self) -> None:
        self._effects, self._by_key, self._in_flight = [], {}, set()
        self._faults = Faults()
        self._counts = {
            "performed": 0,
            "by_kind": {},
            "replayed": 0,
            "rejected": 0,
            "conflicts": 0,
            "failed": 0,
            "invalid": 0,
            "expired": 0,
        }

    def _save_locked(self) -> None:
        if self.state_file is None:
            return
        now = time.time()
        effects = []
        for e in self._effects:
            effects.append({**e.to_json(now), "settles_at": e.settles_at})
        data = {"effects": effects, "counts": self._counts}  # faults are per process
        tmp = self.state_file.with_name(self.state_file.name + ".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self.state_file)

    # -- the effect endpoints ----------------------------------------------------------

    def perform(self, segment: str, body: Any, key: str | None) -> Reply:
        """Handle ``POST /v1/<segment>``; sleeps for ``delay_seconds`` outside the lock."""
        kind, prefix = _KINDS[segment]
        with self._lock:
            if self._faults.fail_next > 0:
                faults = self._faults
                self._faults = dataclasses.replace(faults, fail_next=faults.fail_next - 1)
                self._counts["failed"] += 1
                self._save_locked()
                return _error(faults.fail_status, "api_error", "injected failure; nothing done")
            if not isinstance(body, dict):
                self._counts["invalid"] += 1
                return _error(400, "invalid_request_error", "the body must be a JSON object")
            problem = _invalid(kind, body)
            if problem is not None:
                self._counts["invalid"] += 1
                return _error(400, "invalid_request_error", problem)
            digest = body_hash(kind, body)
            if key is not None and self._known_locked(key):
                return self._replay_locked(self._by_key[key], key, digest)
            effect = self._new_effect_locked(kind, prefix, body, digest, key)
            delay = self._faults.delay_seconds
            if key is not None:
                self._in_flight.add(key)
        try:
            if delay:
                time.sleep(delay)
        finally:
            if key is not None:
                with self._lock:
                    self._in_flight.discard(key)
        return Reply(effect.response_status, effect.response_body)

    def _known_locked(self, key: str) -> bool:
        """Is ``key`` stored and not expired? An expired key is forgotten here."""
        first = self._by_key.get(key)
        if first is None:
            return False
        if self.key_ttl is not None and time.time() - first.created_at >= self.key_ttl:
            del self._by_key[key]
            self._counts["expired"] += 1
            return False
        return True

    def _replay_locked(self, first: Effect, key: str, digest: str) -> Reply:
        if first.body_hash != digest and self.changed_payload == "reject":
            self._counts["rejected"] += 1
            self._save_locked()
            return _error(
                422,
                "idempotency_error",
                f"Idempotency-Key {key!r} was first used with other parameters "
                f"(a {first.kind} with body hash {first.body_hash}); nothing was done.",
                idempotency_key=key,
            )
        if key in self._in_flight:
            self._counts["conflicts"] += 1
            self._save_locked()
            return _error(
                409,
                "idempotency_error",
                f"a request with Idempotency-Key {key!r} is still in progress; retry later",
                code="idempotency_key_in_use",
                idempotency_key=key,
            )
        self._counts["replayed"] += 1
        self._save_locked()
        return Reply(first.response_status, first.response_body, replayed=True)

    def _new_effect_locked(
        self, kind: str, prefix: str, body: dict[str, Any], digest: str, key: str | None
    ) -> Effect:
        now = time.time()
        accept_only = self._faults.accept_only
        effect_id = f"{prefix}_{len(self._effects) + 1:06d}_{os.urandom(4).hex()}"
        response = {
            **body,
            "id": effect_id,
            "object": kind,
            "status": "pending" if accept_only else "succeeded",
            "created": now,
            "idempotency_key": key,
        }
        effect = Effect(
            id=effect_id,
            kind=kind,
            idempotency_key=key,
            body=body,
            body_hash=digest,
            created_at=now,
            settles_at=now + self._faults.settle_seconds if accept_only else None,
            response_status=202 if accept_only else 200,
            response_body=response,
        )
        self._effects.append(effect)
        if key is not None:
            self._by_key[key] = effect
        self._counts["performed"] += 1
        by_kind = self._counts["by_kind"]
        by_kind[kind] = by_kind.get(kind, 0) + 1
        self._save_locked()
        return effect

    # -- reads and controls ------------------------------------------------------------

    def find_by_key(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            if not self._known_locked(key):
                return None
            return self._by_key[key].to_json(time.time())

    def effects(self) -> list[dict[str, Any]]:
        with self._lock:
            now = time.time()
            return [e.to_json(now) for e in self._effects]

    def stats(self) -> dict[str, Any]:
        with self._lock:
            copy: dict[str, Any] = json.loads(json.dumps(self._counts))  # a deep copy
            return copy

    def faults(self) -> Faults:
        with self._lock:
            return self._faults

    def set_faults(self, faults: Faults) -> None:
        with self._lock:
            self._faults = faults
            self._save_locked()

    def reset(self) -> None:
        with self._lock:
            in_flight = self._in_flight
            self._reset_locked()
            self._in_flight = in_flight  # their requests still finish and clear themselves
            self._save_locked()


__all__ = [
    "CHANGED_PAYLOAD_MODES",
    "ChangedPayload",
    "Effect",
    "Faults",
    "ProviderState",
    "Reply",
    "body_hash",
]
