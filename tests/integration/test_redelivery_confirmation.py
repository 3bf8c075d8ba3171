"""The redelivery confirmation: only a preview's token sends, once, for its own actor.

Every case runs on memory, SQLite and PostgreSQL against the fake payment provider (a
real HTTP server that counts charges). The effect is made redeliverable as production
makes one: parked after a crash inside the call, resolved done, the run continued.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from test_operator_commands import Shop, T

from oncegraph.errors import RunStateError
from oncegraph.runs import confirm
from oncegraph.runs.commands import Redelivered, RedeliveryPreview
from oncegraph.runtime.portal import run_sync
from oncegraph.storage.checkpointer import PgCheckpointer, SqliteCheckpointer
from oncegraph.storage.protocols import Checkpointer
from oncegraph.testing.provider import FakeProvider


@pytest.fixture
def shop(checkpointer: Checkpointer) -> Any:
    with FakeProvider() as provider:
        yield Shop(checkpointer, provider)


def _redeliverable(shop: Shop) -> str:
    run_id, effect_id = shop.parked()
    shop.app.resolve_effect(effect_id, "done", actor="ana", reason="found", result="ch_1")
    shop.app.resume(run_id, actor="ana")
    return effect_id


def _redelivered(shop: Shop, effect_id: str) -> int:
    return sum(1 for a in shop.app.audit(target_id=effect_id) if a.action == "redeliver")


def _preview(shop: Shop, effect_id: str, actor: str, new_key: bool = False) -> RedeliveryPreview:
    found = shop.app.redeliver(effect_id, actor=actor, reason="preview", new_key=new_key)
    assert isinstance(found, RedeliveryPreview)
    return found


def test_a_token_computed_without_a_preview_is_refused(shop: Shop) -> None:
    """What a viewer sees (effect id, a small row version) no longer makes a token."""
    effect_id = _redeliverable(shop)
    before = shop.performed()
    (record,) = [e for e in shop.app.effects(thread_id=T) if e.effect_id == effect_id]
    for version in range(1, 10):
        for new_key in (False, True):
            key = f"{effect_id}:redelivery:{len(record.attempts) + 1}" if new_key else effect_id
            offline = hashlib.sha256(f"{effect_id}:{version}:{new_key}:{key}".encode())
            with pytest.raises(RunStateError, match="not one that a preview"):
                shop.app.redeliver(
                    effect_id,
                    actor="mallory",
                    reason="no preview",
                    new_key=new_key,
                    confirm=offline.hexdigest()[:32],
                )
    assert shop.performed() == before
    assert _redelivered(shop, effect_id) == 0


def test_a_preview_token_sends_once_and_only_for_its_actor_and_key_choice(shop: Shop) -> None:
    effect_id = _redeliverable(shop)
    before = shop.performed()
    preview = _preview(shop, effect_id, "cy", new_key=True)
    assert preview.expires_at > 0
    with pytest.raises(RunStateError, match="another actor"):
        shop.app.redeliver(effect_id, actor="dee", reason="r", new_key=True, confirm=preview.token)
    with pytest.raises(RunStateError, match="other key choice"):
        shop.app.redeliver(effect_id, actor="cy", reason="r", new_key=False, confirm=preview.token)
    tampered = preview.token[:-2] + ("AA" if not preview.token.endswith("AA") else "BB")
    with pytest.raises(RunStateError, match="not one that a preview"):
        shop.app.redeliver(effect_id, actor="cy", reason="r", new_key=True, confirm=tampered)
    assert shop.performed() == before and _redelivered(shop, effect_id) == 0

    done = shop.app.redeliver(
        effect_id, actor="cy", reason="customer asked", new_key=True, confirm=preview.token
    )
    assert isinstance(done, Redelivered) and done.preview.expires_at == preview.expires_at
    assert shop.performed() == before + 1
    with pytest.raises(RunStateError, match="changed since the preview"):
        shop.app.redeliver(
            effect_id, actor="cy", reason="again", new_key=True, confirm=preview.token
        )
    assert shop.performed() == before + 1 and _redelivered(shop, effect_id) == 1


def test_an_expired_preview_token_is_refused(shop: Shop, monkeypatch: pytest.MonkeyPatch) -> None:
    effect_id = _redeliverable(shop)
    before = shop.performed()
    preview = _preview(shop, effect_id, "cy")
    assert preview.expires_at - confirm.clock() <= confirm.TTL
    monkeypatch.setattr(confirm, "clock", lambda: preview.expires_at + 1)
    with pytest.raises(RunStateError, match="expired"):
        shop.app.redeliver(effect_id, actor="cy", reason="late", confirm=preview.token)
    assert shop.performed() == before and _redelivered(shop, effect_id) == 0


def test_a_preview_token_is_stale_once_the_effect_moved(shop: Shop) -> None:
    """Two admins preview; one sends: the other's preview no longer shows the effect."""
    effect_id = _redeliverable(shop)
    before = shop.performed()
    first, second = _preview(shop, effect_id, "ana"), _preview(shop, effect_id, "bo")
    shop.app.redeliver(effect_id, actor="bo", reason="customer asked", confirm=second.token)
    with pytest.raises(RunStateError, match="changed since the preview"):
        shop.app.redeliver(effect_id, actor="ana", reason="me too", confirm=first.token)
    assert shop.performed() == before  # the same key: the provider deduplicated bo's send
    assert _redelivered(shop, effect_id) == 1


@pytest.mark.parametrize("checkpointer", ["sqlite", "postgres"], indirect=True)
def test_an_open_preview_survives_a_restart(
    request: pytest.FixtureRequest, checkpointer: Checkpointer, tmp_path: Path
) -> None:
    """The key comes from the database's secret: another process (a restart, a replica)
    on the same database accepts a preview the first one handed out."""
    kind = "sqlite" if isinstance(checkpointer, SqliteCheckpointer) else "postgres"
    dsn = request.getfixturevalue("fresh_dsn") if kind == "postgres" else None
    with FakeProvider() as provider:
        first = Shop(checkpointer, provider)
        effect_id = _redeliverable(first)
        preview = _preview(first, effect_id, "cy", new_key=True)
        before = first.performed()
        # the same database, a new store (as the checkpointer fixture made the first)
        again: Checkpointer = (
            SqliteCheckpointer(tmp_path / "oncegraph.db") if dsn is None else PgCheckpointer(dsn)
        )
        try:
            restarted = Shop(again, provider)
            done = restarted.app.redeliver(
                effect_id,
                actor="cy",
                reason="after a restart",
                new_key=True,
                confirm=preview.token,
            )
            assert isinstance(done, Redelivered)
            assert first.performed() == before + 1
        finally:
            run_sync(again.aclose(), "aclose")
