"""The fake provider, driven over real HTTP: through httpx and through ProviderClient.

It is the ground truth of the crash-matrix tests, so these tests pin the Stripe-style
idempotency contract it promises: one effect per key, replays of the first response, 422 on
a different request under the same key, 409 while the first request is in flight.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from oncegraph.testing.provider import (
    FakeProvider,
    ProviderClient,
    ProviderHTTPError,
    ProviderOutcomeUnknownError,
    ProviderProcess,
    ProviderTimeoutError,
    ProviderUnavailableError,
    serve_forever_in_subprocess,
)

CHARGE = {"amount": 1250, "currency": "eur", "order_id": "o-1"}


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    with FakeProvider() as running:
        yield running


@pytest.fixture
def http(provider: FakeProvider) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=provider.url, timeout=10.0) as client:
        yield client


@pytest.fixture
def client(provider: FakeProvider) -> ProviderClient:
    return ProviderClient(provider.url)


def _charge(http: httpx.Client, body: dict[str, Any], key: str | None = None) -> httpx.Response:
    headers = {"Idempotency-Key": key} if key is not None else {}
    return http.post("/v1/charges", json=body, headers=headers)


def _wait_until(predicate: Any, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.02)


# -- idempotency over httpx ----------------------------------------------------------------


def test_same_key_same_body_replays_the_first_response(http: httpx.Client) -> None:
    first = _charge(http, CHARGE, "key-1")
    second = _charge(http, dict(reversed(list(CHARGE.items()))), "key-1")  # key order is moot

    assert first.status_code == 200
    assert "Idempotent-Replayed" not in first.headers
    assert second.status_code == 200
    assert second.headers["Idempotent-Replayed"] == "true"
    assert second.json() == first.json()
    assert first.json()["status"] == "succeeded"
    stats = http.get("/v1/stats").json()
    assert stats["performed"] == 1
    assert stats["replayed"] == 1
    assert stats["by_kind"] == {"charge": 1}


def test_same_key_other_body_is_422_naming_the_key(http: httpx.Client) -> None:
    assert _charge(http, CHARGE, "key-2").status_code == 200

    other = _charge(http, {**CHARGE, "amount": 9999}, "key-2")
    other_kind = http.post("/v1/emails", json={"to": "a@b.c"}, headers={"Idempotency-Key": "key-2"})

    assert other.status_code == 422
    assert other.json()["error"]["idempotency_key"] == "key-2"
    assert "key-2" in other.json()["error"]["message"]
    assert other_kind.status_code == 422
    stats = http.get("/v1/stats").json()
    assert (stats["performed"], stats["rejected"], stats["replayed"]) == (1, 2, 0)
    assert len(http.get("/v1/effects").json()["data"]) == 1


def test_without_a_key_every_request_performs(http: httpx.Client) -> None:
    first = _charge(http, CHARGE)
    second = _charge(http, CHARGE)

    assert first.status_code == second.status_code == 200
    assert first.json()["id"] != second.json()["id"]
    assert http.get("/v1/stats").json()["performed"] == 2


def test_concurrent_requests_with_one_key_perform_once(
    provider: FakeProvider, http: httpx.Client
) -> None:
    provider.set_faults(delay_seconds=0.3)  # keeps the first request in flight
    workers = 8
    barrier = threading.Barrier(workers)
    responses: list[httpx.Response] = []
    lock = threading.Lock()

    def call() -> None:
        with httpx.Client(base_url=provider.url, timeout=10.0) as own:
            barrier.wait()
            response = _charge(own, CHARGE, "key-concurrent")
        with lock:
            responses.append(response)

    threads = [threading.Thread(target=call) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    statuses = sorted(r.status_code for r in responses)
    assert set(statuses) <= {200, 409}
    assert 200 in statuses
    assert len({r.json()["id"] for r in responses if r.status_code == 200}) == 1
    for r in responses:
        if r.status_code == 409:
            assert r.json()["error"]["code"] == "idempotency_key_in_use"
    stats = http.get("/v1/stats").json()
    assert stats["performed"] == 1
    assert stats["replayed"] + stats["conflicts"] == workers - 1


def test_lookup_by_key(http: httpx.Client) -> None:
    key = "run-1/effect 2?x"  # needs quoting in a path
    path = "/v1/effects/by-key/" + urllib.parse.quote(key, safe="")
    assert http.get(path).status_code == 404

    made = _charge(http, CHARGE, key).json()
    found = http.get(path)

    assert found.status_code == 200
    effect = found.json()
    assert effect["id"] == made["id"]
    assert effect["kind"] == "charge"
    assert effect["status"] == "succeeded"
    assert effect["body"] == CHARGE
    assert effect["idempotency_key"] == key
    assert effect["response"] == {"status": 200, "body": made}
    assert isinstance(effect["created_at"], float)


def test_bad_requests_store_nothing(http: httpx.Client) -> None:
    bad = _charge(http, {"amount": "ten", "currency": "eur"}, "key-bad")
    not_json = http.post("/v1/charges", content=b"{nope", headers={"Idempotency-Key": "key-bad"})
    good = _charge(http, CHARGE, "key-bad")

    assert bad.status_code == 400
    assert not_json.status_code == 400
    assert good.status_code == 200  # the key was not used up by the bad requests
    assert http.get("/v1/stats").json()["performed"] == 1
    assert http.post("/v1/faults", json={"explode": True}).status_code == 400
    assert http.get("/v1/nowhere").status_code == 404


def test_reset_forgets_everything(http: httpx.Client) -> None:
    _charge(http, CHARGE, "key-reset")
    http.post("/v1/faults", json={"fail_next": 3})

    assert http.post("/v1/reset", json={}).status_code == 200

    assert http.get("/v1/effects").json() == {"data": []}
    assert http.get("/v1/stats").json()["performed"] == 0
    assert http.get("/v1/faults").json()["fail_next"] == 0
    assert _charge(http, {**CHARGE, "amount": 1}, "key-reset").status_code == 200


# -- ProviderClient and faults ---------------------------------------------------------------


def test_client_kinds_lookup_and_stats(client: ProviderClient) -> None:
    charge = client.charge(10, "usd", "o-2", idempotency_key="c-1")
    email = client.send_email("x@example.com", "hi", "body", idempotency_key="e-1")
    ticket = client.create_ticket("broken", idempotency_key="t-1")
    again = client.charge(10, "usd", "o-2", idempotency_key="c-1")

    assert again == charge
    assert client.find_by_key("e-1") is not None
    assert client.find_by_key("t-1")["id"] == ticket["id"]  # type: ignore[index]
    assert client.find_by_key("missing") is None
    assert email["object"] == "email"
    stats = client.stats()
    assert stats["performed"] == 3
    assert stats["by_kind"] == {"charge": 1, "email": 1, "ticket": 1}
    assert stats["replayed"] == 1
    assert [e["kind"] for e in client.effects()] == ["charge", "email", "ticket"]
    with pytest.raises(ProviderHTTPError) as info:
        client.charge(11, "usd", "o-2", idempotency_key="c-1")
    assert info.value.status == 422
    assert info.value.body["error"]["idempotency_key"] == "c-1"


def test_lost_response_then_lookup_shows_the_effect(
    provider: FakeProvider, client: ProviderClient
) -> None:
    client.set_faults(delay_seconds=2.0)
    impatient = ProviderClient(provider.url, timeout=0.2)

    with pytest.raises(ProviderTimeoutError):
        impatient.charge(5, "eur", "o-3", idempotency_key="lost-1")

    found = client.find_by_key("lost-1")  # the effect happened although no answer came
    assert found is not None and found["status"] == "succeeded"
    client.set_faults()
    # A retry with the same key gets 409 while the first is in flight, then the replay.
    conflicts = 0
    while True:
        try:
            replay = client.request(
                "POST",
                "/v1/charges",
                {"amount": 5, "currency": "eur", "order_id": "o-3"},
                idempotency_key="lost-1",
            )
            break
        except ProviderHTTPError as exc:
            assert exc.status == 409 and conflicts < 500
            conflicts += 1
            time.sleep(0.02)
    assert replay.replayed
    assert replay.body["id"] == found["id"]
    assert client.stats()["performed"] == 1


def test_fail_next_performs_nothing(provider: FakeProvider, client: ProviderClient) -> None:
    provider.set_faults(fail_next=2, status=503)

    for _ in range(2):
        with pytest.raises(ProviderHTTPError) as info:
            client.charge(7, "eur", "o-4", idempotency_key="flaky")
        assert info.value.status == 503
    assert client.find_by_key("flaky") is None
    assert client.stats()["performed"] == 0

    made = client.request(
        "POST",
        "/v1/charges",
        {"amount": 7, "currency": "eur", "order_id": "o-4"},
        idempotency_key="flaky",
    )
    assert made.status == 200 and not made.replayed
    assert provider.stats()["performed"] == 1
    assert provider.stats()["failed"] == 2


def test_accept_only_is_pending_then_succeeded(
    provider: FakeProvider, client: ProviderClient
) -> None:
    provider.set_faults(accept_only=True)
    accepted = client.request(
        "POST", "/v1/emails", {"to": "a@b.c", "subject": "s", "text": ""}, idempotency_key="q-1"
    )
    provider.set_faults(accept_only=True, settle_seconds=3600)
    queued = client.send_email("d@e.f", "s", idempotency_key="q-2")

    assert accepted.status == 202
    assert accepted.body["status"] == "pending"
    assert queued["status"] == "pending"
    assert client.find_by_key("q-1")["status"] == "succeeded"  # type: ignore[index]
    assert client.find_by_key("q-2")["status"] == "pending"  # type: ignore[index]
    replay = client.request(
        "POST", "/v1/emails", {"to": "a@b.c", "subject": "s", "text": ""}, idempotency_key="q-1"
    )
    assert (replay.status, replay.replayed, replay.body) == (202, True, accepted.body)
    assert provider.stats()["performed"] == 2


def test_stopped_provider_is_unavailable() -> None:
    provider = FakeProvider().start()
    url = provider.url
    provider.stop()

    with pytest.raises(ProviderUnavailableError):
        ProviderClient(url, timeout=2.0).stats()


# -- its own OS process ----------------------------------------------------------------------


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Any]:
    started: list[ProviderProcess] = []

    def start(state_file: Path | None = None) -> ProviderProcess:
        port_file = tmp_path / f"port-{len(started)}"
        proc = serve_forever_in_subprocess(port_file, state_file=state_file)
        started.append(proc)
        assert int(port_file.read_text()) == proc.port
        return proc

    yield start
    for proc in started:
        proc.stop()


@pytest.mark.slow
def test_subprocess_killed_forgets_without_a_state_file(spawn: Any) -> None:
    first: ProviderProcess = spawn()
    client = ProviderClient(first.url)
    client.charge(3, "eur", "o-5", idempotency_key="sub-1")
    assert first.pid != os.getpid()

    os.kill(first.pid, signal.SIGKILL)
    first.process.wait()
    assert first.process.returncode == -signal.SIGKILL
    with pytest.raises(ProviderUnavailableError):
        client.stats()

    second: ProviderProcess = spawn()
    assert ProviderClient(second.url).find_by_key("sub-1") is None
    assert ProviderClient(second.url).stats()["performed"] == 0


@pytest.mark.slow
def test_subprocess_killed_mid_request_keeps_the_effect_in_its_state_file(
    spawn: Any, tmp_path: Path
) -> None:
    state_file = tmp_path / "provider.json"
    first: ProviderProcess = spawn(state_file)
    ProviderClient(first.url).set_faults(delay_seconds=60.0)
    outcome: list[BaseException] = []

    def worker() -> None:
        try:
            ProviderClient(first.url, timeout=120.0).charge(
                4, "eur", "o-6", idempotency_key="crash-1"
            )
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=worker)
    thread.start()
    _wait_until(
        lambda: ProviderClient(first.url).find_by_key("crash-1") is not None,
        "the provider has performed the charge",
    )
    first.kill()
    thread.join()

    assert len(outcome) == 1 and isinstance(outcome[0], ProviderOutcomeUnknownError)
    second: ProviderProcess = spawn(state_file)
    client = ProviderClient(second.url)
    found = client.find_by_key("crash-1")
    assert found is not None
    assert client.request("GET", "/v1/faults").body["delay_seconds"] == 0.0
    replay = client.request(
        "POST",
        "/v1/charges",
        {"amount": 4, "currency": "eur", "order_id": "o-6"},
        idempotency_key="crash-1",
    )
    assert replay.replayed and replay.body["id"] == found["id"]
    assert client.stats()["performed"] == 1
