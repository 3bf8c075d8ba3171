"""The fake provider's HTTP server, and :class:`FakeProvider` serving it from a thread.

The handler maps the endpoints (see :mod:`oncegraph.testing.provider`) onto
:class:`~oncegraph.testing.provider.state.ProviderState`. Standard library only.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from oncegraph.testing.provider.state import (
    _BY_KEY,
    _KINDS,
    ChangedPayload,
    Faults,
    ProviderState,
    Reply,
    _error,
)


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
    ``changed_payload`` and ``key_ttl`` configure how keys are treated (see
    :class:`~oncegraph.testing.provider.state.ProviderState`).
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        state_file: str | Path | None = None,
        changed_payload: ChangedPayload = "reject",
        key_ttl: float | None = None,
    ) -> None:
        self._address = (host, port)
        self.state = ProviderState(
            Path(state_file) if state_file is not None else None,
            changed_payload=changed_payload,
            key_ttl=key_ttl,
        )
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


__all__ = ["FakeProvider"]
