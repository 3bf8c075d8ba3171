"""The dialect port of the one SQL store: what SQLite and PostgreSQL each do their way.

Every protocol method is written once, in :mod:`.store_runs` and :mod:`.store_ledger`,
over the hooks of :class:`SqlPort`. A dialect (:mod:`.sqlite`, :mod:`.postgres`)
implements the hooks, the step commit, run locks, its connections and migrations, and
nothing else. The statements the shared code passes are those of
:mod:`~oncegraph.storage.sql.statements`, with ``?`` placeholders; a dialect converts
them to its parameter style (once per statement text).

Invariants a dialect keeps:

* **Driver errors never leave a hook.** Each hook maps them to ``cls`` (a
  :class:`~oncegraph.errors.StorageError`; :class:`~oncegraph.errors.StorageFullError`
  when the disk is full); the store's own errors pass through unchanged.
* **A fenced write writes nothing unless the run still holds the token.**
  ``_write(..., fence=(run_id, token))`` raises ``RunNotFoundError`` or
  ``LeaseLostError`` when the fence does not hold (SQLite checks it first inside its
  write transaction; PostgreSQL adds the check to the statement itself).
* **A unique-key conflict** on a write given ``duplicate=`` raises
  ``StorageError(duplicate)``, the same message on every dialect.
* **A transaction's body never suspends** except in the :class:`Tx` methods, and
  ``Tx.discard()`` makes it roll back at the end instead of committing.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol, TypedDict, Unpack

from oncegraph.errors import StorageError
from oncegraph.storage import auditchain as chain
from oncegraph.storage.lifecycle import Closing
from oncegraph.storage.records import AuditRecord, now
from oncegraph.storage.sql import dbsecret, rows
from oncegraph.storage.sql import statements as S
from oncegraph.storage.sql.listing import RunListing
from oncegraph.storage.sql.rows import Rows

Fence = tuple[str, int]
"""``(run_id, fencing token)``: a write that must carry the run's current token."""


class How(TypedDict, total=False):
    """How a write (:meth:`SqlPort._write`) goes: ``fence``, the run's token it must
    carry; ``audit``, a record appended in its transaction when it changed a row;
    ``duplicate``, the message of a unique-key conflict."""

    fence: Fence | None
    audit: AuditRecord | None
    duplicate: str | None


@dataclass(frozen=True, slots=True)
class FirstWrite:
    """An insert the first writer wins (:meth:`SqlPort._first_writer`): ``insert`` with
    ``params``; ``select`` at ``key`` reads the row that won; ``fence`` as a write's."""

    insert: str
    params: Sequence[Any]
    select: str
    key: Sequence[Any]
    fence: Fence | None = None


class Tx(Protocol):
    """An open write transaction (statements with ``?`` placeholders)."""

    async def one(self, sql: str, params: Sequence[Any]) -> Any:
        """The statement's first row, or None."""

    async def all(self, sql: str, params: Sequence[Any]) -> list[Any]:
        """The statement's rows."""

    async def count(self, sql: str, params: Sequence[Any]) -> int:
        """Run the statement; the number of rows it changed."""

    async def count_many(self, sql: str, seq: Sequence[Sequence[Any]]) -> int:
        """Run the statement once per parameter set; the rows changed in all."""

    async def lock_audit(self) -> None:
        """Serialize audit-chain appends for the rest of the transaction."""

    def discard(self) -> None:
        """Roll the transaction back when its block ends (a dry run)."""


class SqlPort(Closing):
    """The hooks a dialect implements, and the plumbing both share."""

    rows: Rows
    _listing: RunListing
    _secret: bytes | None
    _hash_key: bytes | None
    _chain_db_key: bytes | None

    def _init_port(self, codec: Rows, *, count_statuses: bool) -> None:
        self.rows = codec  # the row codec, with encryption at rest if any
        self._listing = RunListing(count_statuses=count_statuses)
        self._secret = None  # the database secret, read on first need
        self._hash_key = None
        self._chain_db_key = None  # the audit chain's, from the secret

    # -- the hooks ---------------------------------------------------------------------

    @property
    @abstractmethod
    def _label(self) -> str:
        """``SQLite <path>`` / ``PostgreSQL <database>``, for messages."""

    @abstractmethod
    async def _fetchall(
        self, op: str, sql: str, params: Sequence[Any], cls: type[StorageError] = StorageError
    ) -> list[Any]:
        """One read statement's rows."""

    async def _fetchone(
        self, op: str, sql: str, params: Sequence[Any], cls: type[StorageError] = StorageError
    ) -> Any:
        """A key lookup: its row or None."""
        found = await self._fetchall(op, sql, params, cls)
        return found[0] if found else None

    @abstractmethod
    async def _write(self, op: str, sql: str, params: Sequence[Any], **how: Unpack[How]) -> int:
        """One write statement (fenced, see the module docstring); its row count.
        ``audit`` is appended in the same transaction when the statement changed a row."""

    @abstractmethod
    async def _first_writer(
        self, op: str, w: FirstWrite, cls: type[StorageError] = StorageError
    ) -> tuple[bool, Any]:
        """``w.insert`` (``ON CONFLICT DO NOTHING RETURNING``): ``(True, None)`` when it
        inserted, else ``(False, row)`` with the row ``w.select`` reads at ``w.key`` (the
        first writer's, committed)."""

    @abstractmethod
    def _transaction(
        self, op: str, *, duplicate: str | None = None, chained: bool = False
    ) -> AbstractAsyncContextManager[Tx]:
        """A write transaction, committed when the block ends, rolled back if it raises.
        ``chained``: it appends an audit link (:meth:`_append_audit_in_tx`) as its last
        write, so a dialect whose chain lock is held until the commit may send the
        statements after the lock without waiting for their answers (PostgreSQL does:
        see :meth:`PgCheckpointer._transaction`)."""

    # -- shared plumbing ---------------------------------------------------------------

    async def request_hash_key(self) -> bytes:
        """The key of the ledger's request hashes (:mod:`oncegraph.ledger.keys`), derived
        from the database secret (:mod:`~oncegraph.storage.sql.dbsecret`), which the first
        process to need it creates: every process on this database computes the same key."""
        key = self._hash_key
        if key is None:
            secret = await self._database_secret()
            key = self._hash_key = dbsecret.derive_key(secret, dbsecret.REQUEST_HASH_PURPOSE)
        return key

    async def _database_secret(self) -> bytes:
        """This database's secret, created on first need; read once per store."""
        if self._secret is not None:
            return self._secret
        async with self._transaction("read the database secret") as tx:
            await tx.count(
                dbsecret.SECRET_INSERT, (dbsecret.SECRET_NAME, dbsecret.new_secret(), now())
            )
            row = await tx.one(dbsecret.SECRET_SELECT, (dbsecret.SECRET_NAME,))
        self._secret = dbsecret.secret_from_row(row, self._label)
        return self._secret

    async def _chain_key(self) -> chain.ChainKey:
        """The key new audit links are written with (:mod:`oncegraph.storage.auditchain`)."""
        return chain.chain_key(await self._audit_db_key(), self.rows.encryption)

    async def _audit_db_key(self) -> bytes:
        key = self._chain_db_key
        if key is None:
            secret = await self._database_secret()
            key = self._chain_db_key = dbsecret.derive_key(secret, chain.PURPOSE)
        return key

    async def _append_audit_in_tx(self, tx: Tx, record: AuditRecord, key: chain.ChainKey) -> None:
        """``record`` as the next link of the audit chain, in the open transaction, which
        serializes appends (so two never link to one head)."""
        await tx.lock_audit()
        head = chain.head_from_row(await tx.one(S.AUDIT_CHAIN_HEAD, ()))
        seq, mac = chain.next_link(head, record, key)
        await tx.count(S.AUDIT_CHAINED_INSERT, (*self.rows.audit_to_params(record), seq, mac))

    async def _explain_run(self, op: str, run_id: str, fence: int | None) -> None:
        """A run update changed no row: say why (no such run, a lost fence)."""
        rows.check_run(run_id, await self._fetchone(op, S.RUN_EXISTS, (run_id,)), fence)
        raise StorageError(f"run {run_id!r} could not be updated; nothing was written")


__all__ = ["Fence", "FirstWrite", "How", "SqlPort", "Tx"]
