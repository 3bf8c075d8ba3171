"""The sealing format and the audit chain as pure functions: a value bound to its place
opens only there, an older value still opens, a clear value is refused where the store
seals; a chain names the first edited or reordered record, and a record it cannot check
for want of a key is not called broken."""

from __future__ import annotations

import dataclasses

import pytest

from oncegraph.errors import PlaintextError
from oncegraph.storage import auditchain as chain
from oncegraph.storage.encryption import EncryptionKeys, place
from oncegraph.storage.records import AuditRecord

KEYS = EncryptionKeys({"k1": bytes(range(32))}, current="k1")
HERE = place("oncegraph_effects", "recipient", "eff_1")


def test_a_bound_value_opens_only_in_its_place() -> None:
    sealed = KEYS.seal("alice@example.org", HERE)
    assert sealed.startswith("enc2:k1:")
    assert KEYS.open(sealed, HERE) == "alice@example.org"
    for elsewhere in (
        place("oncegraph_effects", "recipient", "eff_2"),  # another row
        place("oncegraph_effects", "result", "eff_1"),  # another column
        place("oncegraph_audit", "recipient", "eff_1"),  # another table
    ):
        with pytest.raises(ValueError, match="does not authenticate"):
            KEYS.open(sealed, elsewhere)


def test_a_place_is_unambiguous() -> None:
    assert place("t", "c", "a:b", "c") != place("t", "c", "a", "b:c")


def test_an_older_value_still_opens_and_a_clear_one_is_refused() -> None:
    older = KEYS.seal("card 4111")  # enc1: no place
    assert older.startswith("enc1:k1:") and KEYS.open(older, HERE) == "card 4111"
    with pytest.raises(PlaintextError, match="oncegraph db encrypt") as caught:
        KEYS.open("written without the key", HERE)
    assert "oncegraph_effects.recipient" in str(caught.value)
    assert KEYS.open("no place given", None) == "no place given"


def _records(n: int) -> list[AuditRecord]:
    return [
        AuditRecord(f"aud-{i}", "cli:ana", "abandon", "run", f"r{i}", reason=f"r {i}", at=1.0 + i)
        for i in range(n)
    ]


def _chained(records: list[AuditRecord], key: chain.ChainKey) -> list[chain.Chained]:
    out: list[chain.Chained] = []
    head = None
    for record in records:
        head = chain.next_link(head, record, key)
        out.append((head[0], head[1], lambda r=record: r, record.audit_id))
    return out


def test_a_chain_names_its_first_edited_or_reordered_record() -> None:
    key = chain.chain_key(b"s" * 32, None)
    records = _records(4)
    links = _chained(records, key)
    assert chain.verify(links, db_key=b"s" * 32, encryption=None).describe() == (
        "audit log ok, 4 records"
    )
    edited = dataclasses.replace(records[2], reason="approved by the customer")
    links[2] = (links[2][0], links[2][1], lambda: edited, "aud-2")
    report = chain.verify(links, db_key=b"s" * 32, encryption=None)
    assert not report.ok and report.broken == "aud-2" and report.checked
    swapped = _chained(records, key)
    swapped[1], swapped[2] = (
        (2, swapped[2][1], swapped[2][2], "aud-2"),
        (3, swapped[1][1], swapped[1][2], "aud-1"),
    )
    assert chain.verify(swapped, db_key=b"s" * 32, encryption=None).broken == "aud-2"


def test_a_record_chained_under_a_key_not_given_is_not_checked() -> None:
    links = _chained(_records(2), chain.chain_key(b"s" * 32, KEYS))
    report = chain.verify(links, db_key=b"s" * 32, encryption=None)
    assert not report.ok and not report.checked and report.broken == "aud-0"
    assert "NOT CHECKED" in report.describe() and "--keys-file" in report.describe()
    assert chain.verify(links, db_key=b"s" * 32, encryption=KEYS).ok


def test_a_link_is_the_mac_existing_chains_were_written_with() -> None:
    # Links a chain written by an earlier release holds: the MAC's input (the record's
    # fields in their stored order) must never change, or those chains stop verifying.
    key = chain.ChainKey("db", b"k" * 32)
    first, second = _records(2)
    details = {"before": "running", "n": [1, 2.5]}
    second = dataclasses.replace(second, thread_id="t1", details=details, at=1700000000)
    head = chain.next_link(None, first, key)
    assert head == (1, "am1:db:a6de840c31cdd4f581eba3bfc3d84657f7aa90fedc5279a03cc88045461a83c1")
    assert chain.next_link(head, second, key) == (
        2,
        "am1:db:a051c49c7ba9c94d8d21784595bd09c2263d40985b889c2f88e399ec64f7e0f2",
    )
