"""Limits on verified identity: the rate limit counts what a key proves, not what a header
says; guessing keys is limited per address; an unauthenticated body is never read.

Real apps over Starlette's TestClient (one client address, ``testclient``) and a real
uvicorn on a socket where the wire matters (a body sent in chunks).
"""

from __future__ import annotations

import secrets
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from shop import ADMIN, OPERATOR, VIEWER, Shop, auth
from starlette.testclient import TestClient
from test_ui import ORIGIN

from conftest import client_for, start_live, stop_live
from oncegraph.errors import ConfigError
from oncegraph.server import create_app
from oncegraph.server.auth import COOKIE, ApiKey, Role, key_ring, parse_spec
from oncegraph.server.factory import AUTH_BURST, AUTH_RATE, BURST, RATE
from oncegraph.server.limits import address_of


def _codes(responses: Any) -> dict[int, int]:
    found: dict[int, int] = {}
    for r in responses:
        found[r.status_code] = found.get(r.status_code, 0) + 1
    return found


def test_headers_that_verify_nothing_do_not_make_a_new_budget(sqlite_shop: Shop) -> None:
    with client_for(sqlite_shop, rate=0.01, burst=10) as client:
        # the same viewer key, and a fresh random X-API-Key each time: one budget
        codes = _codes(
            client.get("/api/me", headers={**auth(VIEWER), "X-API-Key": secrets.token_hex(8)})
            for _ in range(40)
        )
        assert codes == {200: 10, 429: 30}
        # the UI with the key's cookie and a junk cookie each time: the same key's budget
        client.cookies.clear()
        codes = _codes(
            client.get(
                "/ui/runs",
                headers={"Cookie": f"{COOKIE}={VIEWER}; junk={secrets.token_hex(8)}"},
                follow_redirects=False,
            )
            for _ in range(5)
        )
        assert codes == {429: 5}
        # another key has its own budget
        assert client.get("/api/me", headers=auth(OPERATOR)).status_code == 200


def test_guessing_keys_is_limited_per_address_with_a_precise_retry_after(
    sqlite_shop: Shop,
) -> None:
    with client_for(sqlite_shop, auth_rate=0.5, auth_burst=5) as client:
        answers = [
            client.get("/api/runs", headers=auth(secrets.token_urlsafe(24))) for _ in range(8)
        ]
        assert [a.status_code for a in answers] == [401] * 5 + [429] * 3
        refused = answers[-1]
        error = refused.json()["error"]
        assert error["code"] == "rate_limited" and "without a valid API key" in error["message"]
        assert 0 < error["retry_after"] <= 2.0  # one token at 0.5/s is at most 2 s away
        assert 0 <= int(refused.headers["Retry-After"]) - error["retry_after"] <= 1
        # no key at all, and the login form, draw on the same budget
        assert client.get("/api/runs").status_code == 429
        form = client.post(
            "/ui/login", data={"key": secrets.token_urlsafe(24)}, headers={"Origin": ORIGIN}
        )
        assert form.status_code == 429
        # ... which a key holder's own requests do not touch, nor a load balancer's probe
        assert client.get("/api/runs", headers=auth(VIEWER)).status_code == 200
        assert [client.get("/api/health").status_code for _ in range(10)] == [200] * 10


def test_a_key_holder_cannot_guess_other_keys_at_its_own_rate(sqlite_shop: Shop) -> None:
    """The login form takes the key in its body: with a valid cookie it still counts per
    address, at the guessing rate."""
    with client_for(sqlite_shop, auth_rate=0.01, auth_burst=3) as client:
        client.cookies.set(COOKIE, VIEWER)
        codes = [
            client.post(
                "/ui/login",
                data={"key": secrets.token_urlsafe(24)},
                headers={"Origin": ORIGIN},
            ).status_code
            for _ in range(6)
        ]
        assert codes == [401] * 3 + [429] * 3
        assert client.get("/ui/runs").status_code == 200  # the viewer's own budget


def test_a_key_may_have_its_own_limit(sqlite_shop: Shop) -> None:
    keys = {
        "slow-key-0001": {"role": "viewer", "name": "slow", "rate": 0.01, "burst": 2},
        "fast-key-0001": "viewer",
    }
    with TestClient(create_app(sqlite_shop.app, keys=keys)) as client:
        slow = [client.get("/api/me", headers=auth("slow-key-0001")).status_code for _ in range(4)]
        assert slow == [200, 200, 429, 429]
        limited = client.get("/api/me", headers=auth("slow-key-0001"))
        assert "key 'slow'" in limited.json()["error"]["message"]
        fast = [client.get("/api/me", headers=auth("fast-key-0001")).status_code for _ in range(20)]
        assert fast == [200] * 20
    assert parse_spec("aaaaaaaa=viewer@acme#vic;rate=2.5;burst=7") == [
        ApiKey("aaaaaaaa", Role.VIEWER, "acme", "vic", rate=2.5, burst=7)
    ]
    ring, _ = key_ring("bbbbbbbb=admin;burst=3")
    assert ring.find("bbbbbbbb").burst == 3  # type: ignore[union-attr]
    for bad, why in [
        ("aaaaaaaa=viewer;rate=fast", "rate=<requests per second>"),
        ("aaaaaaaa=viewer;speed=2", "burst=<whole number>"),
        ("aaaaaaaa=viewer;rate=0", "positive"),
        ("aaaaaaaa=viewer;burst=0", ">= 1"),
    ]:
        with pytest.raises(ConfigError, match=why):
            key_ring(bad)
    for options in ({"rate": 0}, {"auth_rate": -1}, {"auth_burst": 0}, {"burst": 1.5}):
        with pytest.raises(ConfigError):
            create_app(sqlite_shop.app, keys={ADMIN: "admin"}, **options)
    assert AUTH_RATE * 10 <= RATE and AUTH_BURST * 5 <= BURST  # guessing: much lower


BIG = b'{"input": ' + b"[" * 300_000 + b"]" * 300_000 + b"}"  # 600 KB, deeply nested
COMMANDS = [
    "/api/threads/t-big/runs",
    "/api/threads/t-big/runs/stream",
    "/api/runs/run_x/continue",
    "/api/runs/run_x/replay",
    "/api/runs/run_x/branch",
    "/api/runs/run_x/abandon",
    "/api/runs/run_x/effects/e/resolve",
    "/api/runs/run_x/effects/e/check",
    "/api/runs/run_x/effects/e/redeliver",
    "/api/agui",
]


def test_an_unauthenticated_body_is_never_read(sqlite_shop: Shop) -> None:
    json = {"Content-Type": "application/json"}
    with client_for(sqlite_shop, auth_rate=1e6, auth_burst=10**6) as client:
        for url in COMMANDS:
            for headers in ({}, auth("not-a-key-at-all"), {"X-API-Key": "nope-nope-nope"}):
                refused = client.post(url, content=BIG, headers={**json, **headers})
                assert refused.status_code == 401, (url, refused.text)
                assert refused.headers["WWW-Authenticate"] == "Bearer"
        # with a key, the same body is read (and refused for what it is)
        read = client.post(COMMANDS[0], content=BIG, headers={**json, **auth(OPERATOR)})
        assert read.status_code == 400


@pytest.fixture
def live_limited(sqlite_shop: Shop) -> Iterator[str]:
    found = start_live(sqlite_shop, max_body=10_000_000)
    yield found.url
    stop_live(found)


def test_an_unauthenticated_chunked_body_is_answered_before_it_is_sent(
    live_limited: str,
) -> None:
    """Over a real socket: the server answers 401 after the headers of a chunked body
    without waiting for the body (a client that sends none still gets its answer)."""
    host, port = live_limited.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(
            b"POST /api/threads/t-big/runs HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"10000\r\n" + b"[" * 100  # a chunk announced, barely begun, never finished
        )
        answer = s.recv(65536).decode("latin-1")
    assert answer.startswith("HTTP/1.1 401"), answer[:200]


def test_ipv6_clients_are_counted_by_their_64_prefix() -> None:
    def of(host: str) -> str:
        return address_of({"client": (host, 1234)})

    assert of("2001:db8:1:2::1") == of("2001:db8:1:2:ffff::9") == "2001:db8:1:2::/64"
    assert of("2001:db8:1:3::1") != of("2001:db8:1:2::1")
    assert of("::ffff:192.0.2.7") == of("192.0.2.7") == "192.0.2.7"
    assert of("testclient") == "testclient"
