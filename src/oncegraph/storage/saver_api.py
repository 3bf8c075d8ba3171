"""LangGraph's checkpointer API on oncegraph's stores (a mixin of each store class).

Reading is LangGraph's: ``get_tuple`` / ``aget_tuple`` and ``list`` / ``alist`` give
``CheckpointTuple``s made from oncegraph's records (:mod:`oncegraph.checkpoint.tuples`),
``get_next_version`` numbers channel versions as LangGraph's in-memory saver does, and
``serde`` is the JSON serializer the records are kept with. The SQL stores also have
``from_conn_string`` (a context manager, ``with`` or ``async with``, that sets the store
up and closes it).

Writing a checkpoint from outside the graph is refused: ``put`` / ``aput`` and
``put_writes`` / ``aput_writes`` would let a caller mark a step (and the tool calls it
recorded) as done without the graph running it, which would bypass the effect ledger.
Their errors name the graph's own way (``update_state``, which writes a new checkpoint
with lineage under a run of its own).

``delete_thread`` / ``adelete_thread`` delete what LangGraph's saver holds of a thread:
its checkpoints (its subgraphs' too), their task writes and the thread's channel logs
(the message lists), so ``get_tuple`` finds nothing and the history is empty. The run
records, the effect ledger and the audit log stay: a record of a call that moved money
or sent a message is the proof it was made, and stays that long; the deletion itself is
kept in the audit log (``action="delete_thread"``). A thread with an unfinished run
(waiting for an answer, parked, failed, running, queued, paused) is refused and nothing
is deleted: that run still needs its checkpoints to go on.

The LangGraph shapes belong to the compatibility layer (:mod:`oncegraph.checkpoint`),
which is built over the stores: it installs the reads (:func:`read_tuples_with`) when
``oncegraph`` is imported, so the stores never import it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from oncegraph._blocking import iter_twin, run_sync, sync_twin
from oncegraph.errors import ConfigError, UnfinishedRunError
from oncegraph.ids import new_audit_id
from oncegraph.storage.lifecycle import Closing
from oncegraph.storage.records import AuditRecord, PruneReport

if TYPE_CHECKING:
    from oncegraph.checkpoint.tuples import CheckpointTuple
    from oncegraph.storage.protocols import CheckpointStore

_NO_PUT = (
    "{method}() of a checkpoint from outside the graph is not supported: a checkpoint "
    "written by hand could mark a step, and the tool calls it recorded, as done without "
    "running it. Write state through the graph instead: app.update_state(config, values, "
    "as_node=...) makes a new checkpoint with lineage, then app.invoke(None, config) "
    "goes on from it."
)


#: The LangGraph-shaped reads of a store: ``(store, config)`` to its checkpoint's tuple,
#: and ``(store, config, filter=, before=, limit=)`` to its tuples, newest first.
GetTuple = Callable[["CheckpointStore", Mapping[str, Any]], Awaitable["CheckpointTuple | None"]]
ListTuples = Callable[..., AsyncIterator["CheckpointTuple"]]
_reads: tuple[GetTuple, ListTuples] | None = None


def read_tuples_with(get_tuple: GetTuple, list_tuples: ListTuples) -> None:
    """Install the reads behind ``get_tuple`` / ``list`` (:mod:`oncegraph.checkpoint.tuples`
    does, when ``oncegraph`` is imported)."""
    global _reads
    _reads = (get_tuple, list_tuples)


def _installed() -> tuple[GetTuple, ListTuples]:
    if _reads is None:
        raise ConfigError(
            "the LangGraph-shaped checkpoint reads are not installed; import oncegraph "
            "(or oncegraph.checkpoint.tuples) before calling get_tuple() or list()"
        )
    return _reads


DELETE_THREAD = "delete_thread"
"""The audit action (and actor) of a thread's deletion."""


def deletion_audit(thread_id: str, report: PruneReport) -> AuditRecord:
    """The audit record of deleting ``thread_id``: what went (``report``'s counts)."""
    return AuditRecord(
        audit_id=new_audit_id(),
        actor=DELETE_THREAD,
        action=DELETE_THREAD,
        target_kind="thread",
        target_id=thread_id,
        thread_id=thread_id,
        reason="checkpointer.delete_thread(thread_id)",
        details={
            "threads": report.threads,
            "checkpoints": report.checkpoints,
            "task_writes": report.task_writes,
            "kept": ["runs", "effects", "audit"],
        },
    )


def refuse_deleting(thread_id: str, run_id: str, status: str) -> UnfinishedRunError:
    """The error of deleting a thread whose run ``run_id`` is unfinished."""
    return UnfinishedRunError(
        f"thread {thread_id!r} has an unfinished run {run_id} ({status}): deleting the "
        "thread would take the checkpoints it needs to go on (an answer it waits for, an "
        "effect to settle). Finish it first (invoke(None, config), or invoke(Command("
        "resume=...), config) for a question), or give it up with app.abandon(config), "
        "then delete the thread; nothing was deleted"
    )


class JsonSerde:
    """LangGraph's serializer protocol over JSON, the format oncegraph's records keep
    (``dumps_typed(obj) -> ("json", bytes)`` and ``loads_typed`` back)."""

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        return "json", json.dumps(obj, separators=(",", ":")).encode()

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        kind, payload = data
        if kind != "json":
            raise ValueError(f"cannot read a {kind!r} payload: oncegraph keeps JSON")
        return json.loads(payload)


class SaverMethods:
    """LangGraph's ``BaseCheckpointSaver`` methods, over the store's own protocol."""

    serde: JsonSerde = JsonSerde()
    # the masked fields of the graphs compiled on this store (CompiledGraph adds them):
    # what the LangGraph-shaped reads mask, as the graph's own views do
    known_masks: dict[str, tuple[str, ...]] | None = None

    def remember_masks(self, masks: Mapping[str, tuple[str, ...]]) -> None:
        """Keep ``masks`` (a graph's masked fields by effect type) for this store's reads."""
        if masks:
            self.known_masks = {**(self.known_masks or {}), **masks}

    def _store(self) -> CheckpointStore:
        return self  # type: ignore[return-value]  # mixed into a CheckpointStore

    async def aget_tuple(self, config: Mapping[str, Any]) -> CheckpointTuple | None:
        """The tuple of ``config``'s checkpoint (the thread's head when it names none)."""
        get_tuple, _ = _installed()
        return await get_tuple(self._store(), config)

    get_tuple = sync_twin(aget_tuple)

    async def aget(self, config: Mapping[str, Any]) -> Any:
        """The checkpoint of ``config`` (its ``get_tuple``'s ``checkpoint``), or None."""
        found = await self.aget_tuple(config)
        return None if found is None else found.checkpoint

    get = sync_twin(aget)

    async def alist(
        self,
        config: Mapping[str, Any] | None,
        *,
        filter: Mapping[str, Any] | None = None,
        before: Mapping[str, Any] | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """The thread's checkpoints, newest first; with no ``checkpoint_ns`` in
        ``config``, its subgraphs' too (as LangGraph lists them)."""
        _, list_tuples = _installed()
        async for item in list_tuples(
            self._store(), config, filter=filter, before=before, limit=limit
        ):
            yield item

    list = iter_twin(alist)

    def get_next_version(self, current: Any, channel: Any = None) -> int:
        """The version after ``current`` (None: the first), as LangGraph numbers them."""
        if current is None:
            return 1
        if isinstance(current, int):
            return current + 1
        return int(str(current).split(".")[0]) + 1

    async def adelete_thread(self, thread_id: str) -> None:
        """Delete the thread's checkpoints, task writes and channel logs, its subgraphs'
        too; runs, effect records and the audit log stay, and the deletion is audited
        (see the module docstring). Refused, deleting nothing, while a run of the thread
        is unfinished (``UnfinishedRunError``)."""
        deleting = getattr(self, "_delete_thread", None)
        if deleting is None:
            raise ConfigError(
                f"{type(self).__name__} cannot delete a thread (it has no _delete_thread); "
                "use InMemoryCheckpointer, SqliteCheckpointer or PgCheckpointer"
            )
        await deleting(str(thread_id))

    delete_thread = sync_twin(adelete_thread)

    async def aput(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        raise ConfigError(_NO_PUT.format(method="put"))

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        raise ConfigError(_NO_PUT.format(method="put"))

    async def aput_writes(
        self, config: Any, writes: Any, task_id: str, task_path: str = ""
    ) -> None:
        raise ConfigError(_NO_PUT.format(method="put_writes"))

    def put_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
        raise ConfigError(_NO_PUT.format(method="put_writes"))


class Opened(Closing):
    """``from_conn_string``'s context manager: the store, set up on entry and closed on
    exit, in sync (``with``) or async (``async with``) code. It opens and closes the
    store as the store's own ``async with`` does (:class:`~.lifecycle.Closing`), and
    hands out the store, not itself."""

    def __init__(self, store: Any) -> None:
        self.store = store

    async def setup(self) -> None:
        await self.store.setup()

    async def aclose(self) -> None:
        await self.store.aclose()

    def __enter__(self) -> Any:
        run_sync(self.setup(), "from_conn_string")
        return self.store

    def __exit__(self, *exc_info: object) -> None:
        run_sync(self.aclose(), "from_conn_string")

    async def __aenter__(self) -> Any:
        await self.setup()
        return self.store


class FromConnString:
    """``from_conn_string(conn)`` of a store whose first argument is its connection string
    (a SQLite path, a PostgreSQL DSN)."""

    @classmethod
    def from_conn_string(cls, conn_string: str, **kwargs: Any) -> Opened:
        return Opened(cls(conn_string, **kwargs))  # type: ignore[call-arg]


__all__ = [
    "DELETE_THREAD",
    "FromConnString",
    "JsonSerde",
    "Opened",
    "SaverMethods",
    "deletion_audit",
    "read_tuples_with",
    "refuse_deleting",
]
