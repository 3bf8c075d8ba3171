"""A fake payment-style provider: a real local HTTP server that honours ``Idempotency-Key``.

Tests and the demo use it as the ground truth that counts side effects. It runs in a
thread (:class:`FakeProvider`) or in its own OS process (:func:`serve_forever_in_subprocess`,
``python -m oncegraph.testing.provider --port 0 --port-file F``) so it outlives a worker that
is SIGKILLed in the middle of a tool call. Standard library only.

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

Invariants, as Stripe keeps them:

- An effect request without a key always performs a new effect.
- The first request with a key performs the effect and stores the key with the request's
  kind, canonical body hash and the response. A later request with the same key and the
  same kind and body gets that first response again with ``Idempotent-Replayed: true`` and
  performs nothing; with another kind or body it gets 422 and performs nothing.
- While the first request with a key is still in flight, another request with that key
  gets 409 and performs nothing, so concurrent requests perform at most one effect.
- A request that fails validation (400) or by an injected fault stores nothing, so a retry
  with the same key may still perform.
- State is in memory and dies with the process unless a ``state_file`` is given; the file
  is replaced atomically after every change (it survives a kill, not a power loss). Faults
  are never saved: a restarted provider starts without any.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, Self

_KINDS: dict[str, tuple[str, str]] = {  # path segment -> (kind, id prefix)
    "charges": ("charge", "ch"),
    "emails": ("email", "em"),
    "tickets": ("ticket", "tk"),
}
_BY_KEY = "/v1/effects/by-key/"


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
    """The provider's effects, keys, counters and faults; every method is thread-safe."""

    state_file: Path | None = None
    _lock: threading.Lock = field(init=False, default_factory=threading.Lock)
    _effects: list[Effect] = field(init=False, default_factory=list)
    _by_key: dict[str, Effect] = field(init=False, default_factory=dict)
    _in_flight: set[str] = field(init=False, default_factory=set)
    _counts: dict[str, Any] = field(init=False, default_factory=dict)
    _faults: Faults = field(init=False, default_factory=Faults)

    def __post_init__(self) -> None:
        self._reset_locked()
        if self.state_file is not None and self.state_file.exists():
            data = json.loads(self.state_file.read_text())
            self._effects = [Effect.from_json(e) for e in data["effects"]]
            self._by_key = {e.idempotency_key: e for e in self._effects if e.idempotency_key}
            self._counts = data["counts"]

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
            if key is not None and key in self._by_key:
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

    def _replay_locked(self, first: Effect, key: str, digest: str) -> Reply:
        if first.body_hash != digest:
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
            effect = self._by_key.get(key)
            return None if effect is None else effect.to_json(time.time())

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


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: every reply carries Content-Length
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        return  # quiet: tests read stats, not logs

    def _read_json(self) -> tuple[bool, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return True, {}
        try:
            return True, json.loads(raw)
        except ValueError:
            return False, None

    def _send(self, reply: Reply) -> None:
        data = json.dumps(reply.body).encode()
        self.send_response(reply.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if reply.replayed:
            self.send_header("Idempotent-Replayed", "true")
        try:
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (a lost response)

    def do_GET(self) -> None:
        state = self.server.state
        path = urllib.parse.urlsplit(self.path).path
        if path.startswith(_BY_KEY) and len(path) > len(_BY_KEY):
            key = urllib.parse.unquote(path[len(_BY_KEY) :])
            found = state.find_by_key(key)
            if found is None:
                self._send(_error(404, "not_found", f"no effect with Idempotency-Key {key!r}"))
            else:
                self._send(Reply(200, found))
        elif path == "/v1/effects":
            self._send(Reply(200, {"data": state.effects()}))
        elif path == "/v1/stats":
            self._send(Reply(200, state.stats()))
        elif path == "/v1/faults":
            self._send(Reply(200, state.faults().to_json()))
        else:
            self._send(_error(404, "not_found", f"no route GET {path}"))

    def do_POST(self) -> None:
        state = self.server.state
        path = urllib.parse.urlsplit(self.path).path
        ok, body = self._read_json()
        segment = path.removeprefix("/v1/")
        if not ok:
            self._send(_error(400, "invalid_request_error", "the body is not valid JSON"))
        elif path.startswith("/v1/") and segment in _KINDS:
            self._send(state.perform(segment, body, self.headers.get("Idempotency-Key")))
        elif path == "/v1/faults":
            try:
                faults = Faults.from_json(body if isinstance(body, dict) else {"?": body})
            except (TypeError, ValueError) as exc:
                self._send(_error(400, "invalid_request_error", str(exc)))
                return
            state.set_faults(faults)
            self._send(Reply(200, faults.to_json()))
        elif path == "/v1/reset":
            state.reset()
            self._send(Reply(200, {"reset": True}))
        else:
            self._send(_error(404, "not_found", f"no route POST {path}"))


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], state: ProviderState) -> None:
        self.state = state
        super().__init__(address, _Handler)


class FakeProvider:
    """The provider served from a background thread of this process.

    ``with FakeProvider() as provider: ProviderClient(provider.url).charge(...)``.
    The in-process methods read and change the same state the HTTP API serves.
    """

    def __init__(
        self, host: str = "127.0.0.1", port: int = 0, *, state_file: str | Path | None = None
    ) -> None:
        self._address = (host, port)
        self.state = ProviderState(Path(state_file) if state_file is not None else None)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> Self:
        if self._server is not None:
            raise RuntimeError("FakeProvider is already started")
        self._server = _Server(self._address, self.state)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"fake-provider-{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("FakeProvider is not started; call start() first")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self._address[0]}:{self.port}"

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def stats(self) -> dict[str, Any]:
        return self.state.stats()

    def effects(self) -> list[dict[str, Any]]:
        return self.state.effects()

    def find_by_key(self, key: str) -> dict[str, Any] | None:
        return self.state.find_by_key(key)

    def reset(self) -> None:
        self.state.reset()

    def set_faults(self, **faults: Any) -> Faults:
        """Replace the faults, e.g. ``set_faults(fail_next=1, status=503)``; none clears."""
        new = Faults.from_json(faults)
        self.state.set_faults(new)
        return new


# -- the client -----------------------------------------------------------------------------


class ProviderError(Exception):
    """The fake provider could not be used; what a real provider's SDK would raise::

    ProviderError
    ├── ProviderHTTPError            an HTTP error status; nothing was performed
    ├── ProviderUnavailableError     connection refused; nothing was received
    └── ProviderOutcomeUnknownError  sent, but no answer: performed or not, unknown
        └── ProviderTimeoutError     no answer in time
    """


class ProviderHTTPError(ProviderError):
    """The provider answered with an HTTP error; ``status`` and the JSON ``body`` say why."""

    def __init__(self, method: str, url: str, status: int, body: Any) -> None:
        detail = body.get("error", {}).get("message") if isinstance(body, dict) else body
        super().__init__(f"{method} {url} -> HTTP {status}: {detail}")
        self.status = status
        self.body = body


class ProviderUnavailableError(ProviderError, ConnectionError):
    """No connection to the provider (refused): the request was not received."""


class ProviderOutcomeUnknownError(ProviderError):
    """The request was sent but no answer came back: it may or may not have been performed."""


class ProviderTimeoutError(ProviderOutcomeUnknownError, TimeoutError):
    """No answer in time; the outcome is unknown."""


@dataclass(frozen=True, slots=True)
class ProviderResponse:
    status: int
    body: Any
    replayed: bool


class ProviderClient:
    """A small stdlib (urllib) client, so tools in tests and the demo need no extra library."""

    def __init__(self, url: str, *, timeout: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        idempotency_key: str | None = None,
        timeout: float | None = None,
    ) -> ProviderResponse:
        """Send one request; raise :class:`ProviderHTTPError` on any status >= 400."""
        url = self.url + path
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key
        req = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout) as resp:
                replayed = resp.headers.get("Idempotent-Replayed") == "true"
                return ProviderResponse(resp.status, json.loads(resp.read()), replayed)
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            exc.close()
            try:
                payload: Any = json.loads(raw)
            except ValueError:
                payload = raw.decode(errors="replace")
            raise ProviderHTTPError(method, url, exc.code, payload) from None
        except TimeoutError as exc:
            raise ProviderTimeoutError(f"{method} {url}: no answer in time") from exc
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, TimeoutError):
                raise ProviderTimeoutError(f"{method} {url}: no answer in time") from exc
            if isinstance(exc.reason, ConnectionRefusedError):
                raise ProviderUnavailableError(f"{method} {url}: {exc.reason}") from exc
            raise ProviderOutcomeUnknownError(f"{method} {url}: {exc.reason}") from exc
        except (ConnectionError, http.client.HTTPException) as exc:  # the connection broke
            raise ProviderOutcomeUnknownError(f"{method} {url}: {exc!r}") from exc

    def _effect(self, segment: str, body: dict[str, Any], key: str | None) -> dict[str, Any]:
        result: dict[str, Any] = self.request(
            "POST", f"/v1/{segment}", body, idempotency_key=key
        ).body
        return result

    def charge(
        self,
        amount: float,
        currency: str,
        order_id: str,
        idempotency_key: str | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        body = {"amount": amount, "currency": currency, "order_id": order_id, **extra}
        return self._effect("charges", body, idempotency_key)

    def send_email(
        self, to: str, subject: str, text: str = "", idempotency_key: str | None = None
    ) -> dict[str, Any]:
        body = {"to": to, "subject": subject, "text": text}
        return self._effect("emails", body, idempotency_key)

    def create_ticket(
        self, title: str, text: str = "", idempotency_key: str | None = None
    ) -> dict[str, Any]:
        return self._effect("tickets", {"title": title, "text": text}, idempotency_key)

    def find_by_key(self, key: str) -> dict[str, Any] | None:
        """The effect stored under ``key``, or None if the provider never performed it."""
        try:
            found: dict[str, Any] = self.request(
                "GET", _BY_KEY + urllib.parse.quote(key, safe="")
            ).body
        except ProviderHTTPError as exc:
            if exc.status == 404:
                return None
            raise
        return found

    def effects(self) -> list[dict[str, Any]]:
        data: list[dict[str, Any]] = self.request("GET", "/v1/effects").body["data"]
        return data

    def stats(self) -> dict[str, Any]:
        stats: dict[str, Any] = self.request("GET", "/v1/stats").body
        return stats

    def set_faults(self, **faults: Any) -> dict[str, Any]:
        current: dict[str, Any] = self.request("POST", "/v1/faults", faults).body
        return current

    def reset(self) -> None:
        self.request("POST", "/v1/reset", {})


# -- a separate OS process ----------------------------------------------------------------


@dataclass(slots=True)
class ProviderProcess:
    """A provider running as its own OS process (see :func:`serve_forever_in_subprocess`)."""

    process: subprocess.Popen[bytes]
    port: int
    host: str = "127.0.0.1"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def kill(self) -> None:
        """SIGKILL the provider process and reap it."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the provider process (it stops cleanly), SIGKILL if it lingers."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def serve_forever_in_subprocess(
    port_file: str | Path,
    *,
    port: int = 0,
    state_file: str | Path | None = None,
    timeout: float = 120.0,
) -> ProviderProcess:
    """Start ``python -m oncegraph.testing.provider`` and wait until it has written its port.

    The child runs in its own session (a signal to the caller's process group does not
    reach it) and exits by itself when this process goes away.
    """
    port_path = Path(port_file)
    port_path.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "oncegraph.testing.provider", "--port", str(port)]
    argv += ["--port-file", str(port_path), "--exit-with-parent"]
    if state_file is not None:
        argv += ["--state-file", str(state_file)]
    process = subprocess.Popen(argv, start_new_session=True)
    deadline = time.monotonic() + timeout
    while not port_path.exists():
        if process.poll() is not None:
            raise RuntimeError(f"the provider process exited with code {process.returncode}")
        if time.monotonic() > deadline:
            process.kill()
            process.wait()
            raise RuntimeError(f"the provider process wrote no port file in {timeout}s")
        time.sleep(0.02)
    return ProviderProcess(process, int(port_path.read_text()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m oncegraph.testing.provider")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--port-file", help="write the bound port here (atomically)")
    parser.add_argument("--state-file", help="keep state in this JSON file across restarts")
    parser.add_argument("--exit-with-parent", action="store_true", help="exit when orphaned")
    args = parser.parse_args(argv)
    provider = FakeProvider(args.host, args.port, state_file=args.state_file).start()
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    if args.port_file:
        tmp = Path(args.port_file + ".tmp")
        tmp.write_text(str(provider.port))
        os.replace(tmp, args.port_file)
    print(f"fake provider listening on {provider.url}", flush=True)
    parent = os.getppid()
    while not stopping.wait(0.2):
        if args.exit_with_parent and os.getppid() != parent:
            break
    provider.stop()
    return 0


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


if __name__ == "__main__":
    raise SystemExit(main())
