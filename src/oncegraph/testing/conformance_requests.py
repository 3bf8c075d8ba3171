"""Contract tests of :class:`~oncegraph.storage.protocols.IdempotencyStore`, mixed into
:class:`~oncegraph.testing.conformance.CheckpointerConformance` (every bundled store
keeps idempotency keys). Fixtures as there: ``checkpointer`` (a set-up store) and the
optional ``reopen``. Every test uses fresh random scopes, so the suite may share a
database and run in parallel; times are fixed, so no test depends on the clock.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from oncegraph.errors import ConfigError
from oncegraph.storage.protocols import Checkpointer, IdempotencyStore
from oncegraph.storage.requests import MAX_KEY, IdempotencyRecord

T0 = 1_800_000_000.0  # a fixed time: the records' windows are set from it
WINDOW = 3600.0


def _scope() -> str:
    return f'["app-{uuid.uuid4().hex}",null,"ada"]'


def _record(
    scope: str, key: str = "key-1", *, at: float = T0, run_id: str | None = None, hash: str = "h1"
) -> IdempotencyRecord:
    return IdempotencyRecord(
        scope=scope,
        key=key,
        request_hash=hash,
        run_id=run_id,
        created_at=at,
        expires_at=at + WINDOW,
    )


def _store(checkpointer: Checkpointer) -> IdempotencyStore:
    assert isinstance(checkpointer, IdempotencyStore)
    return checkpointer


ANSWER: dict[str, Any] = {
    "run_id": "run_1",
    "run": {"input": {"text": 'héllo "quoted" \\ ✓', "n": 2**63 - 1}, "status": "running"},
    "list": [1, 2.5, None, True],
}


class IdempotencyConformance:
    """Contract tests of idempotency keys (see the module docstring)."""

    async def test_keeps_idempotency_keys(self, checkpointer: Checkpointer) -> None:
        assert isinstance(checkpointer, IdempotencyStore)

    async def test_a_key_is_claimed_once_and_read_back(self, checkpointer: Checkpointer) -> None:
        store = _store(checkpointer)
        scope = _scope()
        first = _record(scope, run_id="run_bound")
        stored, created = await store.claim_request(first)
        assert created and stored == first
        again, created = await store.claim_request(_record(scope, at=T0 + 5, hash="h2"))
        assert not created and again == first  # the first claim stands, untouched
        assert await store.get_request(scope, "key-1") == first
        assert await store.get_request(scope, "other") is None
        # another scope's key of the same name is another key
        elsewhere, created = await store.claim_request(_record(_scope()))
        assert created and elsewhere.scope != scope

    async def test_concurrent_claims_of_one_key_make_one_record(
        self, checkpointer: Checkpointer
    ) -> None:
        store = _store(checkpointer)
        scope = _scope()
        claims = [_record(scope, run_id=f"run_{n}", at=T0 + n / 100) for n in range(8)]
        found = await asyncio.gather(*(store.claim_request(c) for c in claims))
        winners = [stored for stored, created in found if created]
        assert len(winners) == 1
        assert all(stored == winners[0] for stored, _ in found)
        assert await store.get_request(scope, "key-1") == winners[0]

    async def test_the_answer_is_recorded_once_on_its_own_claim(
        self, checkpointer: Checkpointer
    ) -> None:
        store = _store(checkpointer)
        scope = _scope()
        claim, _ = await store.claim_request(_record(scope))
        assert not claim.finished
        assert await store.finish_request(claim, status_code=202, response=ANSWER)
        done = await store.get_request(scope, "key-1")
        assert done is not None and done.finished
        assert (done.status_code, done.response) == (202, ANSWER)
        assert done.request_hash == claim.request_hash and done.created_at == claim.created_at
        # a second answer changes nothing
        assert not await store.finish_request(claim, status_code=500, response={"x": 1})
        assert await store.get_request(scope, "key-1") == done
        # releasing a finished key leaves it
        await store.release_request(claim)
        assert await store.get_request(scope, "key-1") == done
        # a later claim of the key (expired and replaced) is not answered by the old one
        stale = _record(scope, at=T0 - 2 * WINDOW)
        assert not await store.finish_request(stale, status_code=200, response={})

    async def test_a_refused_request_gives_its_key_back(self, checkpointer: Checkpointer) -> None:
        store = _store(checkpointer)
        scope = _scope()
        claim, _ = await store.claim_request(_record(scope))
        await store.release_request(_record(scope, at=T0 + 1))  # not this claim: kept
        assert await store.get_request(scope, "key-1") == claim
        await store.release_request(claim)
        assert await store.get_request(scope, "key-1") is None
        again, created = await store.claim_request(_record(scope, at=T0 + 2, hash="h2"))
        assert created and again.request_hash == "h2"

    async def test_an_expired_key_is_claimed_anew_and_pruned(
        self, checkpointer: Checkpointer
    ) -> None:
        store = _store(checkpointer)
        scope = _scope()
        old, _ = await store.claim_request(_record(scope, "old"))
        await store.finish_request(old, status_code=200, response={"run_id": "run_old"})
        live, _ = await store.claim_request(_record(scope, "live", at=T0 + WINDOW))
        # within the window the old key's record stands
        kept, created = await store.claim_request(_record(scope, "old", at=T0 + WINDOW - 1))
        assert not created and kept.finished
        # at its end it is replaced, in flight again, by the new request
        new = _record(scope, "old", at=T0 + WINDOW, hash="h-new", run_id="run_new")
        stored, created = await store.claim_request(new)
        assert created and stored == new and not stored.finished
        assert await store.get_request(scope, "old") == new
        # prune: what expired by then goes, the rest stays
        assert await store.prune_requests(before=T0 + WINDOW) == 0
        assert await store.prune_requests(before=T0 + 2 * WINDOW) >= 2
        assert await store.get_request(scope, "old") is None
        assert await store.get_request(scope, "live") is None
        assert await store.prune_requests(before=T0 + 2 * WINDOW) == 0
        assert live.expires_at == T0 + 2 * WINDOW

    async def test_keys_and_scopes_keep_any_text(self, checkpointer: Checkpointer) -> None:
        store = _store(checkpointer)
        scope = _scope() + " 'quoted'; -- ? %s $1 \\"
        key = "k'; DROP TABLE x; -- ? %s $1 \\ " + "z" * (MAX_KEY - 40)
        record = _record(scope, key)
        _, created = await store.claim_request(record)
        assert created and await store.get_request(scope, key) == record
        assert await store.finish_request(record, status_code=201, response=ANSWER)
        found = await store.get_request(scope, key)
        assert found is not None and found.response == ANSWER

    def test_a_bad_key_is_refused_before_any_store(self) -> None:
        for bad in ["", "x" * (MAX_KEY + 1), "tab\there", "é", None, 7]:
            with pytest.raises(ConfigError, match="idempotency key"):
                IdempotencyRecord(
                    scope="s", key=bad, request_hash="h", created_at=T0, expires_at=T0  # type: ignore[arg-type]
                )

    async def test_idempotency_keys_are_durable(
        self, checkpointer: Checkpointer, reopen: Any
    ) -> None:
        if reopen is None:
            pytest.skip("this backend's fixture gives no reopen factory")
        store = _store(checkpointer)
        scope = _scope()
        claim, _ = await store.claim_request(_record(scope, run_id="run_durable"))
        await store.finish_request(claim, status_code=202, response=ANSWER)
        other = _store(await reopen())  # the fixture closes it
        found = await other.get_request(scope, "key-1")
        assert found is not None and found.run_id == "run_durable"
        assert (found.status_code, found.response) == (202, ANSWER)


__all__ = ["IdempotencyConformance"]
