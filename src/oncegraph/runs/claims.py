"""Taking a run before any work on it (guarantee 13).

Whoever continues a run (invoke, stream, a worker, an operator's command) first takes
its liveness lock (it dies with this process: a crashed holder is never waited for) and
then takes the run over by bumping its fencing token (a compare-and-set, so an operator
who abandoned it meanwhile wins). A second taker gets :class:`RunBusyError` at once,
before anything runs. Every write of the run then carries the new token.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from oncegraph.errors import LeaseLostError, RunBusyError, RunNotFoundError, UnfinishedRunError
from oncegraph.runs.holders import holder_alive
from oncegraph.runtime.claim import Claim
from oncegraph.storage.protocols import Checkpointer, ThreadOpening
from oncegraph.storage.records import AuditRecord, RunRecord, RunStatus, ThreadRecord

# How often a takeover retries when the token moved between its read and its write.
_TAKEOVER_TRIES = 5
# How many running runs of a thread are looked at (one is already one too many).
_RUNNING_LOOK = 16

Check = Callable[[RunRecord], RunRecord]


async def busy_error(store: Checkpointer, run_id: str) -> RunBusyError:
    run = await store.get_run(run_id)
    owner = run.lease_owner if run is not None else None
    held_by = f" (held by {owner})" if owner else ""
    return RunBusyError(
        f"run {run_id} is being executed by another process right now{held_by}; nothing was "
        "done here. Wait for it to finish (app.get_run(run_id).status); a holder that "
        "crashed lets go at once, so if that process is gone, simply retry.",
        run_id=run_id,
        owner=owner,
    )


async def thread_free(store: Checkpointer, thread_id: str, run_id: str) -> None:
    """Raise :class:`UnfinishedRunError` if another run of ``thread_id`` than ``run_id`` is
    running under a live holder: its liveness lock is held (by another process, or by
    this one), or its worker's lease has not run out. A thread runs one run at a time
    (whatever the clocks of the processes that started them said); a running run whose
    holder died does not keep the thread."""
    found = await store.list_runs(
        thread_id=thread_id, statuses=[RunStatus.RUNNING], limit=_RUNNING_LOOK
    )
    for other in found:
        if other.run_id == run_id or not await holder_alive(store, other):
            continue
        held_by = f", held by {other.lease_owner}" if other.lease_owner else ""
        raise UnfinishedRunError(
            f"thread {thread_id!r} has another run, {other.run_id}, running right now"
            f"{held_by}: a thread runs one run at a time, so nothing was started here and "
            "nothing was written. Wait for that run to finish (app.get_run(run_id).status) "
            "and try again."
        )


async def take(
    store: Checkpointer,
    run_id: str,
    *,
    owner: str,
    check: Check,
    status: RunStatus | None = RunStatus.RUNNING,
    audit: AuditRecord | None = None,
) -> tuple[Claim, RunRecord]:
    """Lock and take over ``run_id``: returns the claim and the run as stored now.

    ``check(run)`` sees the run as read under the lock and raises if the call no longer
    applies to it (it finished meanwhile, say); it returns the run to take.
    """

    async def first(found: RunRecord) -> None:  # set running: no other run of its thread is
        if status is RunStatus.RUNNING:
            await thread_free(store, found.thread_id, run_id)

    lock = await store.lock_run(run_id)
    if lock is None:
        raise await busy_error(store, run_id)
    try:
        taken = await _fence(
            store, run_id, owner=owner, status=status, check=check, audit=audit, first=first
        )
        return Claim(run_id, taken.fencing_token, lock), taken
    except BaseException:
        await lock.release()
        raise


async def take_as_is(store: Checkpointer, run_id: str, *, owner: str) -> tuple[Claim, RunRecord]:
    """:func:`take` ``run_id`` whatever its status, and leave the status as it is: an
    operator's command holds the run meanwhile (any holder is fenced out)."""
    return await take(store, run_id, owner=owner, check=_as_is, status=None)


def _as_is(run: RunRecord) -> RunRecord:
    return run


async def hold(
    store: Checkpointer, run: RunRecord, *, token: int
) -> tuple[Claim, ThreadRecord | None]:
    """Lock ``run`` for a holder that already has its token (a worker's lease claim), and
    return the run's thread row with the claim: read after the lock, in the one request
    that checks the token (:meth:`ThreadOpening.open_run` where the store has it)."""
    lock = await store.lock_run(run.run_id)
    if lock is None:
        raise await busy_error(store, run.run_id)
    try:
        found, thread = await open_run(store, run.run_id)
    except BaseException:
        await lock.release()
        raise
    if found is None or found.fencing_token != token:
        await lock.release()
        raise LeaseLostError(
            f"run {run.run_id} is no longer held with fencing token {token}: another "
            "process took it over; nothing was written."
        )
    return Claim(run.run_id, token, lock), thread


async def open_run(
    store: Checkpointer, run_id: str
) -> tuple[RunRecord | None, ThreadRecord | None]:
    """The run and its thread's row: one request where the store can
    (:meth:`ThreadOpening.open_run`), else two."""
    if isinstance(store, ThreadOpening):
        return await store.open_run(run_id)
    found = await store.get_run(run_id)
    return found, None if found is None else await store.get_thread(found.thread_id)


@asynccontextmanager
async def new(store: Checkpointer, run: RunRecord) -> AsyncIterator[Claim]:
    """Lock a run that is about to be created (its id is fresh; its token is its own),
    for the block: the claim is let go when it ends, however it ends."""
    lock = await store.lock_run(run.run_id)
    if lock is None:  # pragma: no cover - a fresh id cannot be held by anyone
        raise await busy_error(store, run.run_id)
    claim = Claim(run.run_id, run.fencing_token, lock)
    try:
        yield claim
    finally:
        await claim.release()


async def overrule(
    store: Checkpointer,
    run_id: str,
    *,
    owner: str,
    status: RunStatus,
    error: str | None,
    check: Check,
    audit: AuditRecord | None = None,
) -> RunRecord:
    """An operator's decision: set the status and bump the token WITHOUT the lock, so a
    holder that is still working is fenced out and can overwrite nothing."""
    return await _fence(
        store, run_id, owner=owner, status=status, error=error, check=check, audit=audit
    )


async def _fence(
    store: Checkpointer,
    run_id: str,
    *,
    owner: str,
    status: RunStatus | None,
    check: Check,
    audit: AuditRecord | None,
    error: str | None = None,
    first: Callable[[RunRecord], Awaitable[None]] | None = None,
) -> RunRecord:
    """Read the run, ``check`` it, and move its fencing token on (setting ``owner``,
    ``status``, ``error``), again from the run as read anew while another writer moves
    it first; ``first(run)`` runs once, before the first try. The run as stored now,
    else ``RunBusyError``."""
    for attempt in range(_TAKEOVER_TRIES):
        found = await store.get_run(run_id)
        if found is None:
            raise RunNotFoundError(f"no run {run_id!r}")
        found = check(found)
        if not attempt and first is not None:
            await first(found)
        done = await store.fence_run(
            run_id,
            expected_token=found.fencing_token,
            owner=owner,
            status=status,
            error=error,
            audit=audit,
        )
        if done is not None:
            return done
    raise await busy_error(store, run_id)


__all__ = [
    "busy_error",
    "hold",
    "new",
    "open_run",
    "overrule",
    "take",
    "take_as_is",
    "thread_free",
]
