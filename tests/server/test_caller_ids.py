"""Ids in request paths: a thread or run id holding a control, format or line-separator
character (U+0085, U+2028, U+2029, a bidi override, NUL) is a 400 naming the character,
never a lookup (a 404 would log and echo it as any other id), and nothing is started."""

from __future__ import annotations

from urllib.parse import quote

from shop import ADMIN, OPERATOR, USER, VIEWER, Shop, auth
from starlette.testclient import TestClient

from oncegraph.server.auth import COOKIE

FORGED = ["t\u2028FORGED", "t\u2029x", "t\x85x", "t\u202ex", "t\u200bx", "t\x00x", "t\rx"]


def _refused(response: object) -> str:
    status = getattr(response, "status_code", None)
    assert status == 400, getattr(response, "text", response)
    message: str = response.json()["error"]["message"]  # type: ignore[attr-defined]
    assert "must not contain control characters" in message and "U+" in message
    return message


def test_a_thread_or_run_id_with_an_invisible_character_is_a_400(
    sqlite_shop: Shop, sqlite_client: TestClient
) -> None:
    client = sqlite_client
    run_id = sqlite_shop.completed("t-ok")
    for forged in FORGED:
        path = quote(forged, safe="")
        for url in (
            f"/api/threads/{path}",
            f"/api/threads/{path}/state",
            f"/api/threads/{path}/history",
            f"/api/threads/{path}/effects",
        ):
            assert "thread_id" in _refused(client.get(url, headers=auth(VIEWER)))
        started = client.post(
            f"/api/threads/{path}/runs", headers=auth(OPERATOR), json={"input": USER}
        )
        assert "thread_id" in _refused(started)
        bad_run = quote(run_id + forged, safe="")
        for url in (
            f"/api/runs/{bad_run}",
            f"/api/runs/{bad_run}/history",
            f"/api/runs/{bad_run}/effects",
            f"/api/runs/{bad_run}/audit",
        ):
            assert "run_id" in _refused(client.get(url, headers=auth(VIEWER)))
        for command, body in (
            ("continue", {"reason": "r"}),
            ("replay", {"reason": "r", "mode": "evidence"}),
            ("abandon", {"reason": "r"}),
        ):
            answer = client.post(f"/api/runs/{bad_run}/{command}", headers=auth(ADMIN), json=body)
            assert "run_id" in _refused(answer)
    assert "U+2028 LINE SEPARATOR at position 1" in _refused(
        client.get(f"/api/threads/{quote(FORGED[0], safe='')}", headers=auth(VIEWER))
    )
    client.cookies.set(COOKIE, VIEWER)  # the operator UI's run page says the same
    page = client.get(f"/ui/runs/{quote(run_id + FORGED[0], safe='')}")
    assert page.status_code == 400 and "U+2028 LINE SEPARATOR" in page.text
    client.cookies.clear()
    # nothing was started or changed: the one run there is, as it was
    runs = client.get("/api/runs", headers=auth(VIEWER)).json()["runs"]
    assert [(r["run_id"], r["status"]) for r in runs] == [(run_id, "completed")]
    assert sqlite_shop.performed() == 1
