"""Probe a recipient's idempotency contract, against a sandbox of your provider.

The ``write`` tool class re-sends a call whose outcome is unknown with the SAME
idempotency key. That is only safe where the recipient deduplicates on the key, and
only for as long as it keeps keys. Providers differ: Stripe answers a repeated key with
the first response and refuses the same key with another payload; some return the
first response for any payload; some keep keys for a day, some for minutes, some not at
all. Run this probe against a SANDBOX (it performs real effects there) before you trust
the ``write`` class with a recipient::

    from oncegraph.testing.recipient import http_sender, probe_recipient

    send = http_sender("https://sandbox.example/v1/refunds",
                       headers={"Authorization": "Bearer sk_test_..."})
    report = probe_recipient(send, payload={"amount": 100, "currency": "eur"},
                             changed_payload={"amount": 200, "currency": "eur"},
                             retention=(60, 600))
    print(report.describe())

(``oncegraph probe-recipient URL --payload ... --changed-payload ...`` does the same.)

What it sends, each under a fresh key made for this probe:

1. **repeat**: ``payload`` twice with one key. Deduplicates if the second answer names
   the same result (``result_id``) and performs nothing new.
2. **changed payload**: ``payload`` then ``changed_payload`` with one key. ``rejected``
   (the second raised: the safe answer), ``first_response`` (the first result again: the
   changed request was dropped silently), or ``performed_again`` (a new result: the
   key is ignored when the payload changes).
3. **retention** (only if ``retention`` delays are given): ``payload`` once, then again
   after each delay (seconds since the first send, ascending; the probe stops at the
   first check that finds the key forgotten). Bounded by the delays you pass.

Effects performed at the sandbox: 1 (repeat) + 1 or 2 (changed payload) + 1 (retention)
+ 1 more for a forgotten key, or for each repeat that was not deduplicated.

``send(payload, key)`` is any callable that sends one request with the key and returns
the response, raising on a refusal; :func:`http_sender` makes one for a JSON HTTP API
(``Idempotency-Key`` header). ``result_id(response)`` names the result a response
reports (default: its ``"id"`` field). ``sleep`` and ``clock`` are injectable, so a
test never waits out real retention delays.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from oncegraph.errors import ConfigError

__all__ = [
    "ProbeReport",
    "RecipientHTTPError",
    "RetentionCheck",
    "field_id",
    "http_sender",
    "probe_recipient",
]

Send = Callable[[Mapping[str, Any], str], Any]
ChangedPayloadVerdict = Literal["rejected", "first_response", "performed_again"]


class RecipientHTTPError(Exception):
    """The recipient answered with an HTTP error status (a refusal)."""

    def __init__(self, status: int, body: Any) -> None:
        super().__init__(f"HTTP {status}: {_short(body)}")
        self.status = status
        self.body = body


@dataclass(frozen=True, slots=True)
class RetentionCheck:
    """One resend of the retention key: ``waited`` seconds after the first send
    (``planned``: the delay asked for); ``kept``: it was still deduplicated."""

    planned: float
    waited: float
    kept: bool


@dataclass(frozen=True, slots=True)
class ProbeReport:
    """What the recipient did. ``deduplicates`` is None when a repeat was refused
    (``repeat_error`` says how); ``changed_payload_error`` is the refusal's text."""

    deduplicates: bool | None
    changed_payload: ChangedPayloadVerdict
    retention: tuple[RetentionCheck, ...] = ()
    repeat_error: str | None = None
    changed_payload_error: str | None = None

    @property
    def kept_for_at_least(self) -> float | None:
        """The longest wait after which the key was still honoured."""
        kept = [c.waited for c in self.retention if c.kept]
        return max(kept) if kept else None

    @property
    def forgotten_by(self) -> float | None:
        """The wait after which the key was found forgotten, if it was."""
        gone = [c.waited for c in self.retention if not c.kept]
        return min(gone) if gone else None

    @property
    def safe_for_write(self) -> bool:
        """A repeat is deduplicated and no retention check found the key forgotten."""
        return self.deduplicates is True and self.forgotten_by is None

    def describe(self) -> str:
        lines = []
        if self.deduplicates:
            lines.append("repeated key, same payload: deduplicated (the first result again)")
        elif self.deduplicates is None:
            lines.append(
                f"repeated key, same payload: REFUSED ({self.repeat_error}); a resumed write "
                "gets an error instead of its result"
            )
        else:
            lines.append("repeated key, same payload: PERFORMED AGAIN (keys are ignored)")
        lines.append(
            {
                "rejected": "same key, changed payload: rejected "
                f"({self.changed_payload_error})",
                "first_response": "same key, changed payload: the FIRST response again "
                "(the changed request was silently dropped)",
                "performed_again": "same key, changed payload: PERFORMED AGAIN (the key is "
                "ignored when the payload changes)",
            }[self.changed_payload]
        )
        for check in self.retention:
            state = "still honoured" if check.kept else "FORGOTTEN (performed again)"
            lines.append(f"key after {check.waited:.1f}s (asked {check.planned:g}s): {state}")
        if not self.retention:
            lines.append("key retention: not probed (pass retention delays)")
        verdict = (
            "safe for the write class"
            if self.safe_for_write
            else "NOT safe for the write class: declare its tools irreversible with reconcile"
        )
        if self.safe_for_write and self.kept_for_at_least is not None:
            verdict += (
                f" for resumes within {self.kept_for_at_least:.0f}s of the first attempt"
            )
        lines.append(f"verdict: {verdict}")
        return "\n".join(lines)


def _short(value: Any, limit: int = 200) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def field_id(path: str = "id") -> Callable[[Any], str]:
    """``result_id`` reading a (dotted) field of a JSON response, e.g. ``"data.id"``."""

    def read(response: Any) -> str:
        value = response
        for part in path.split("."):
            if not isinstance(value, Mapping) or part not in value:
                raise ConfigError(
                    f"the response has no field {path!r} to identify its result: "
                    f"{_short(response)}; pass result_id= (or --id-field)"
                )
            value = value[part]
        return str(value)

    return read


def probe_recipient(
    send: Send,
    *,
    payload: Mapping[str, Any],
    changed_payload: Mapping[str, Any],
    result_id: Callable[[Any], str] | None = None,
    retention: Sequence[float] = (),
    key_prefix: str = "oncegraph-probe",
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> ProbeReport:
    """Probe the recipient behind ``send``; see the module docstring for what is sent."""
    if dict(payload) == dict(changed_payload):
        raise ConfigError("changed_payload must differ from payload")
    delays = sorted(float(d) for d in retention)
    if any(d <= 0 for d in delays):
        raise ConfigError("retention delays are seconds > 0")
    ident = result_id or field_id("id")
    run = uuid.uuid4().hex[:16]

    def key(name: str) -> str:
        return f"{key_prefix}-{run}-{name}"

    def first_send(k: str) -> str:
        try:
            return ident(send(payload, k))
        except ConfigError:
            raise
        except Exception as exc:
            raise ConfigError(
                f"the recipient refused the probe's first request ({type(exc).__name__}: "
                f"{exc}); fix the payload, URL or credentials and probe again"
            ) from exc

    # 1. the same key and payload twice
    repeat_key = key("repeat")
    first = first_send(repeat_key)
    deduplicates: bool | None
    repeat_error = None
    try:
        deduplicates = ident(send(payload, repeat_key)) == first
    except ConfigError:
        raise
    except Exception as exc:
        deduplicates, repeat_error = None, f"{type(exc).__name__}: {exc}"

    # 2. the same key with another payload
    changed_key = key("changed")
    base = first_send(changed_key)
    verdict: ChangedPayloadVerdict
    changed_error = None
    try:
        changed = ident(send(changed_payload, changed_key))
    except ConfigError:
        raise
    except Exception as exc:
        verdict, changed_error = "rejected", f"{type(exc).__name__}: {exc}"
    else:
        verdict = "first_response" if changed == base else "performed_again"

    # 3. how long the key is kept (bounded by the delays asked for)
    checks: list[RetentionCheck] = []
    if delays:
        retention_key = key("retention")
        started = clock()
        original = first_send(retention_key)
        for delay in delays:
            remaining = started + delay - clock()
            if remaining > 0:
                sleep(remaining)
            try:
                kept = ident(send(payload, retention_key)) == original
            except ConfigError:
                raise
            except Exception:
                kept = False  # refused now: the key no longer yields its result
            checks.append(RetentionCheck(delay, clock() - started, kept))
            if not kept:
                break
    return ProbeReport(deduplicates, verdict, tuple(checks), repeat_error, changed_error)


def http_sender(
    url: str,
    *,
    header: str = "Idempotency-Key",
    headers: Mapping[str, str] | None = None,
    method: str = "POST",
    timeout: float = 30.0,
) -> Send:
    """``send(payload, key)`` for a JSON HTTP API: the payload as the JSON body, the key in
    ``header``; returns the decoded JSON answer, raises :class:`RecipientHTTPError` on a
    status >= 400. Standard library only."""
    extra = dict(headers or {})

    def send(payload: Mapping[str, Any], key: str) -> Any:
        request = urllib.request.Request(
            url,
            data=json.dumps(payload).encode(),
            method=method,
            headers={
                "Content-Type": "application/json",
                "Accept": "application/json",
                **extra,
                header: key,
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            raise RecipientHTTPError(exc.code, error_body(exc)) from None

    return send


def error_body(exc: urllib.error.HTTPError) -> Any:
    """The body of an HTTP error answer, read and closed: its JSON, else its text."""
    raw = exc.read()
    exc.close()
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")
