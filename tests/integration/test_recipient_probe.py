"""The recipient contract probe tells recipients apart, against the REAL fake provider
process over HTTP in each configuration, and through the CLI.

* ``changed_payload="reject"`` (Stripe's way): deduplicates, rejects a changed payload;
* ``changed_payload="first_response"``: deduplicates, answers a changed payload with the
  first response (the changed request is dropped silently);
* ``key_ttl``: the retention probe finds the key forgotten after it expired.

The probe's own logic is also checked with in-process recipients (a recipient that
ignores keys, one that refuses repeats), with an injected clock so nothing waits.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from oncegraph.cli.commands import app
from oncegraph.errors import ConfigError
from oncegraph.testing.provider import (
    ProviderClient,
    ProviderProcess,
    serve_forever_in_subprocess,
)
from oncegraph.testing.recipient import (
    RecipientHTTPError,
    field_id,
    http_sender,
    probe_recipient,
)

PAYLOAD = {"amount": 10.0, "currency": "eur", "order_id": "probe"}
CHANGED = {"amount": 20.0, "currency": "eur", "order_id": "probe"}


def _start(tmp_path: Path, name: str, **options: Any) -> ProviderProcess:
    return serve_forever_in_subprocess(tmp_path / f"{name}.port", **options)


@pytest.fixture
def rejecting(tmp_path: Path) -> Iterator[ProviderProcess]:
    with _start(tmp_path, "reject") as provider:
        yield provider


@pytest.fixture
def first_response(tmp_path: Path) -> Iterator[ProviderProcess]:
    with _start(tmp_path, "first", changed_payload="first_response") as provider:
        yield provider


def test_the_probe_tells_the_two_configurations_apart(
    rejecting: ProviderProcess, first_response: ProviderProcess
) -> None:
    strict = probe_recipient(
        http_sender(rejecting.url + "/v1/charges"), payload=PAYLOAD, changed_payload=CHANGED
    )
    lenient = probe_recipient(
        http_sender(first_response.url + "/v1/charges"), payload=PAYLOAD, changed_payload=CHANGED
    )
    assert strict.deduplicates is True and lenient.deduplicates is True
    assert strict.changed_payload == "rejected"
    assert strict.changed_payload_error is not None and "422" in strict.changed_payload_error
    assert lenient.changed_payload == "first_response"
    assert "rejected" in strict.describe()
    assert "the FIRST response again" in lenient.describe()
    # both deduplicate, so both are safe for the write class (oncegraph never re-sends a
    # key with another payload: that is a RequestMismatchError before the call)
    assert strict.safe_for_write and lenient.safe_for_write

    # what the probe did at each provider: 1 effect for the repeat, 1 for the changed
    # payload (the change performed nothing), and the answers it got
    for provider, stats_key in ((rejecting, "rejected"), (first_response, "replayed")):
        stats = ProviderClient(provider.url).stats()
        assert stats["performed"] == 2, stats
        assert stats[stats_key] >= 1, stats
    assert ProviderClient(first_response.url).stats()["replayed"] == 2  # repeat + changed


def test_the_retention_probe_finds_an_expired_key(tmp_path: Path) -> None:
    with _start(tmp_path, "ttl", key_ttl=0.2) as provider:
        report = probe_recipient(
            http_sender(provider.url + "/v1/charges"),
            payload=PAYLOAD,
            changed_payload=CHANGED,
            retention=(1.0, 5.0),
        )
        stats = ProviderClient(provider.url).stats()
    # (the repeat and changed-payload checks race the 0.2 s TTL: not asserted here)
    assert len(report.retention) == 1  # stopped at the first check that found it forgotten
    (check,) = report.retention
    assert not check.kept and check.waited >= 1.0
    assert report.forgotten_by is not None and report.forgotten_by >= 1.0
    assert not report.safe_for_write
    assert "FORGOTTEN" in report.describe()
    assert stats["expired"] >= 1


def test_a_key_that_is_kept_passes_the_retention_probe(rejecting: ProviderProcess) -> None:
    report = probe_recipient(
        http_sender(rejecting.url + "/v1/charges"),
        payload=PAYLOAD,
        changed_payload=CHANGED,
        retention=(0.3,),
    )
    (check,) = report.retention
    assert check.kept and check.waited >= 0.3
    assert report.kept_for_at_least == check.waited
    assert report.safe_for_write
    assert "for resumes within" in report.describe()


def test_the_cli_command(rejecting: ProviderProcess, first_response: ProviderProcess) -> None:
    runner = CliRunner()
    args = ["--payload", '{"amount": 10, "currency": "eur"}']
    args += ["--changed-payload", '{"amount": 11, "currency": "eur"}']
    strict = runner.invoke(app, ["probe-recipient", rejecting.url + "/v1/charges", *args])
    assert strict.exit_code == 0, strict.output
    assert "changed payload: rejected" in strict.output
    lenient = runner.invoke(
        app,
        ["probe-recipient", first_response.url + "/v1/charges", *args, "-H", "X-Test: 1"],
    )
    assert lenient.exit_code == 0, lenient.output
    assert "the FIRST response again" in lenient.output
    bad = ["--payload", "{}", "--changed-payload", '{"amount": 1}']
    refused = runner.invoke(app, ["probe-recipient", rejecting.url + "/v1/charges", *bad])
    assert refused.exit_code == 2
    assert "refused the probe's first request" in refused.output


# -- the probe's logic, with in-process recipients ------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_a_recipient_that_ignores_keys() -> None:
    ids = itertools.count(1)

    def send(payload: Any, key: str) -> dict[str, Any]:
        return {"id": f"r{next(ids)}"}

    clock = _Clock()
    report = probe_recipient(
        send,
        payload=PAYLOAD,
        changed_payload=CHANGED,
        retention=(60, 600),
        sleep=clock.sleep,
        clock=clock,
    )
    assert report.deduplicates is False
    assert report.changed_payload == "performed_again"
    assert [c.kept for c in report.retention] == [False]
    assert clock.slept == [60]  # no real waiting, and it stopped at the first lost key
    assert not report.safe_for_write
    assert "PERFORMED AGAIN (keys are ignored)" in report.describe()


def test_a_recipient_that_refuses_repeats_and_keeps_keys_for_a_while() -> None:
    seen: dict[str, int] = {}
    clock = _Clock()
    results: dict[str, tuple[str, float]] = {}

    def send(payload: Any, key: str) -> dict[str, Any]:
        if key.endswith("-repeat"):
            seen[key] = seen.get(key, 0) + 1
            if seen[key] > 1:
                raise RecipientHTTPError(409, {"error": "duplicate request"})
        found = results.get(key)
        if found is not None and clock.now - found[1] < 100:  # keys kept for 100 s
            return {"data": {"id": found[0]}}
        results[key] = (f"r{len(results)}", clock.now)
        return {"data": {"id": results[key][0]}}

    report = probe_recipient(
        send,
        payload=PAYLOAD,
        changed_payload=CHANGED,
        result_id=field_id("data.id"),
        retention=(600, 50),
        sleep=clock.sleep,
        clock=clock,
    )
    assert report.deduplicates is None
    assert report.repeat_error is not None and "409" in report.repeat_error
    assert report.changed_payload == "first_response"
    assert [(c.planned, c.kept) for c in report.retention] == [(50, True), (600, False)]
    assert report.kept_for_at_least == 50 and report.forgotten_by == 600
    assert "REFUSED" in report.describe()


def test_bad_probe_input_is_refused() -> None:
    def send(payload: Any, key: str) -> dict[str, Any]:
        return {"no_id": 1}

    with pytest.raises(ConfigError, match="must differ"):
        probe_recipient(send, payload=PAYLOAD, changed_payload=dict(PAYLOAD))
    with pytest.raises(ConfigError, match="seconds > 0"):
        probe_recipient(send, payload=PAYLOAD, changed_payload=CHANGED, retention=(0,))
    with pytest.raises(ConfigError, match="no field 'id'"):
        probe_recipient(send, payload=PAYLOAD, changed_payload=CHANGED)
