"""The audit log's chain: each record carries a MAC over itself and the previous record's.

Every store appends an audit record as the next link: it reads the last link
(``chain_seq``, ``chain_mac``) and writes the record with ``seq + 1`` and
``HMAC-SHA256(key, previous mac || canonical JSON of seq and the record)``, all in one
write transaction that serializes appends (SQLite's write lock; PostgreSQL a
transaction advisory lock; the memory store its lock). The MAC covers the record as
read back (reason and details decoded), so sealing a database later (``oncegraph db
encrypt``) leaves the chain valid.

The key: with encryption at rest, derived from the current encryption key (which is
kept outside the database), named in the MAC as ``k:<key id>``; without, derived from
the per-database secret (:mod:`oncegraph.storage.sql.dbsecret`), named ``db``. A MAC
is ``am1:<key name>:<hex>``.

What :func:`verify` finds: an edited record (its MAC, or with encryption its sealed
reason, no longer matches), a deleted one (a gap in the numbers, and the next record's
MAC names a previous MAC that is not there), a reordered one (the number is under the
MAC). Records written before the chain existed carry no number and are reported as
unchained, not as a break. What it cannot find: records cut from the END of the log
(nothing after them names them), and, without encryption at rest, a rewrite by someone
who can read the database secret (it is in the same database); a PostgreSQL role
without UPDATE and DELETE on ``oncegraph_audit`` prevents both.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from oncegraph._json import dumps_str
from oncegraph.errors import EncryptionKeyError, OnceGraphError
from oncegraph.storage.encryption import EncryptionKeys, PlaintextError
from oncegraph.storage.records import AuditRecord, audit_values

FORMAT = "am1"
DB_KEY = "db"
PURPOSE = "audit-chain"
"""Purpose of the key derived from the database secret (:func:`dbsecret.derive_key`)."""
PG_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended('oncegraph audit chain', 0))"

Link = tuple[int, str]
"""A record's place in the chain: its number (1, 2, ...) and its MAC."""


@dataclass(frozen=True, slots=True)
class ChainKey:
    """The key new links are written with: ``name`` (``db`` or ``k:<key id>``) and bytes."""

    name: str
    key: bytes


def chain_key(db_key: bytes, encryption: EncryptionKeys | None) -> ChainKey:
    """The key appends use: the current encryption key's, else the database secret's."""
    if encryption is None:
        return ChainKey(DB_KEY, db_key)
    return ChainKey(f"k:{encryption.current}", encryption.mac_key())


def _digest(key: bytes, seq: int, previous: str | None, record: AuditRecord) -> str:
    audit_id, at, *rest = audit_values(record)
    body = dumps_str([seq, previous, audit_id, float(at), *rest])
    return hmac.new(key, body.encode(), hashlib.sha256).hexdigest()


def next_link(head: Link | None, record: AuditRecord, key: ChainKey) -> Link:
    """The link of ``record`` appended after ``head`` (None: the first link)."""
    seq = 1 if head is None else head[0] + 1
    previous = None if head is None else head[1]
    return seq, f"{FORMAT}:{key.name}:{_digest(key.key, seq, previous, record)}"


def head_from_row(row: object) -> Link | None:
    """The last link from a ``SELECT chain_seq, chain_mac`` row (None: no link yet)."""
    if row is None:
        return None
    seq, mac = row[0], row[1]  # type: ignore[index]
    return int(seq), str(mac)


@dataclass(frozen=True, slots=True)
class ChainReport:
    """What :func:`verify` found. ``records``: every audit record; ``unchained``: those
    written before the chain existed; ``broken``: the first record that fails (its
    audit id) and ``problem`` in words; ``checked`` False when that record could not be
    checked for want of a key (not ok either: nothing after it was checked)."""

    records: int
    unchained: int = 0
    first_chained: str | None = None
    broken: str | None = None
    problem: str = ""
    checked: bool = True  # False: the records from ``broken`` on need keys not given

    @property
    def ok(self) -> bool:
        return self.broken is None

    def describe(self) -> str:
        if not self.checked:
            return f"audit log NOT CHECKED from record {self.broken} on: {self.problem}"
        if not self.ok:
            return f"audit log BROKEN at record {self.broken}: {self.problem}"
        text = f"audit log ok, {self.records} records"
        if self.unchained:
            before = f" before record {self.first_chained}" if self.first_chained else ""
            text += (
                f" ({self.unchained} written before the log was chained are unchained"
                f"{before})"
            )
        return text


Chained = tuple[int | None, str | None, Callable[[], AuditRecord], str]
"""A stored record as :func:`verify` reads it: its number and MAC (None before the
chain existed), a function that decodes it (raising if it cannot be read), its id."""


def verify(
    found: Iterable[Chained],
    *,
    db_key: bytes | None,
    encryption: EncryptionKeys | None,
    unchained: int = 0,
    latest_unchained: tuple[str, float] | None = None,
) -> ChainReport:
    """Check the chained records of ``found``, in number order; ``unchained`` counts the
    records without a number (written before the chain existed), ``latest_unchained``
    is the newest of them (its id and time): one newer than the first chained record
    was not written before the chain, so it was inserted or unlinked by hand."""
    previous: str | None = None
    expected = 1
    count = unchained
    first: str | None = None
    for seq, mac, decode, audit_id in found:
        count += 1
        if seq is None or mac is None:
            return _broken(count, unchained, first, audit_id, "it has no chain link")
        first = first or audit_id
        if seq != expected:
            what = (
                f"record number {expected} is missing (deleted), the next one found is {seq}"
                if seq > expected
                else f"it is numbered {seq} where {expected} was expected (reordered)"
            )
            return _broken(count, unchained, first, audit_id, what)
        head, _, digest = mac.rpartition(":")
        parts = [*head.split(":", 1), digest]
        if len(parts) != 3 or parts[0] != FORMAT:
            return _broken(count, unchained, first, audit_id, f"its MAC {mac!r} is malformed")
        try:
            key = _key(parts[1], db_key, encryption)
            record = decode()
        except PlaintextError as exc:  # a clear value where the store seals: written by hand
            return _broken(count, unchained, first, audit_id, f"it cannot be read: {exc}")
        except EncryptionKeyError as exc:  # a key the caller did not give
            return ChainReport(count, unchained, first, audit_id, str(exc), checked=False)
        except OnceGraphError as exc:  # a corrupt value (tampered, moved)
            return _broken(count, unchained, first, audit_id, f"it cannot be read: {exc}")
        if seq == 1 and latest_unchained is not None and latest_unchained[1] > record.at:
            return _broken(
                count,
                unchained,
                first,
                latest_unchained[0],
                "it has no chain link but is newer than the first chained record "
                f"{audit_id}: it was inserted, or its link removed, after the log was chained",
            )
        if not hmac.compare_digest(parts[2], _digest(key, seq, previous, record)):
            return _broken(
                count,
                unchained,
                first,
                audit_id,
                "its MAC does not match its content (edited, reordered, or the record "
                "before it was deleted or edited)",
            )
        previous = mac
        expected += 1
    return ChainReport(count, unchained, first)


def _broken(
    count: int, unchained: int, first: str | None, at: str, problem: str
) -> ChainReport:
    return ChainReport(count, unchained, first, at, problem)


def _key(name: str, db_key: bytes | None, encryption: EncryptionKeys | None) -> bytes:
    if name == DB_KEY:
        if db_key is None:  # pragma: no cover - every store has its secret
            raise EncryptionKeyError("the database secret is not available")
        return db_key
    if name.startswith("k:"):
        if encryption is None:
            raise EncryptionKeyError(
                f"it is chained with encryption key {name[2:]!r}: give the store its "
                "EncryptionKeys (on the command line: --keys-file FILE) to check it"
            )
        return encryption.mac_key(name[2:])
    raise EncryptionKeyError(f"its MAC names an unknown key {name!r}")


__all__ = [
    "DB_KEY",
    "FORMAT",
    "PG_LOCK",
    "PURPOSE",
    "ChainKey",
    "ChainReport",
    "Chained",
    "Link",
    "chain_key",
    "head_from_row",
    "next_link",
    "verify",
]
