"""The client: a small urllib client for the fake provider and the errors it raises.

Standard library only.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from oncegraph.testing.provider.state import _BY_KEY
from oncegraph.testing.recipient import error_body


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
            raise ProviderHTTPError(method, url, exc.code, error_body(exc)) from None
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


__all__ = [
    "ProviderClient",
    "ProviderError",
    "ProviderHTTPError",
    "ProviderOutcomeUnknownError",
    "ProviderResponse",
    "ProviderTimeoutError",
    "ProviderUnavailableError",
]
