"""The server's recovery pass: runs a dead process left ``running`` are taken over.

At start-up, and then every ``every`` seconds, the server looks for its app's runs that
are ``running`` with no lease and no live holder (:func:`oncegraph.runs.orphans.
left_running`: their process died, a server killed under load, an ``invoke`` whose
process crashed) and goes on with each in its hub (:meth:`~oncegraph.server.hub.RunHub.
resume`), through the audited Continue: the audit log says which server took it over
and why, the ledger keeps every effect from happening twice (a ``write`` is sent again
with its key, an ``irreversible`` one is reconciled or the run parks for review), and
its events can be followed at ``/api/runs/{id}/events`` like any run this server
started. A run a live process holds is refused by its lock and left alone; a worker's
run is left to the workers, which take over an expired lease.

A run that cannot go on here (another version of the app, say) is logged once and left
for an operator. Each pass also prunes the idempotency keys whose window ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket

from oncegraph._cancel import cancel_and_wait
from oncegraph.errors import (
    ConfigError,
    IncompatibleVersionError,
    NoRunToResumeError,
    OnceGraphError,
    RunBusyError,
    RunNotFoundError,
)
from oncegraph.runs.launch import Launch
from oncegraph.runs.orphans import left_running
from oncegraph.server.hub import RunHub
from oncegraph.storage.protocols import IdempotencyStore
from oncegraph.storage.records import now

log = logging.getLogger("oncegraph.server.recovery")

RECOVER_EVERY = 30.0
REASON = "taken over: the process that was executing it had stopped"


def server_actor() -> str:
    """Who takes a run over, as the audit log records it."""
    return f"server:{socket.gethostname()}:{os.getpid()}"


class Recovery:
    """The recovery pass of one server (see the module docstring). ``every``: seconds
    between passes after the first (``None``: the start-up pass only)."""

    def __init__(self, hub: RunHub, *, every: float | None = RECOVER_EVERY) -> None:
        if every is not None and (isinstance(every, bool) or not every > 0):
            raise ConfigError(
                f"recover_every must be a positive number of seconds, or None for the "
                f"start-up pass only; got {every!r}"
            )
        self.hub = hub
        self.every = every
        self.actor = server_actor()
        self._task: asyncio.Task[None] | None = None
        self._refused: set[str] = set()  # runs that cannot go on here: logged once

    async def run_once(self) -> list[str]:
        """One pass: the ids of the runs taken over."""
        taken: list[str] = []
        service = self.hub.graph.service
        async for run in left_running(service.context, skip=self.hub.running() | self._refused):
            launch = Launch(actor=self.actor, reason=REASON)
            try:
                await self.hub.resume(run, launch=launch)
            except (RunBusyError, NoRunToResumeError, RunNotFoundError):
                continue  # someone took it first, or it stopped meanwhile
            except (IncompatibleVersionError, OnceGraphError) as exc:
                self._refused.add(run.run_id)
                log.warning(
                    "run %s was left running by a process that stopped, and cannot go on here: %s",
                    run.run_id,
                    exc,
                )
                continue
            taken.append(run.run_id)
            log.info("run %s: %s; going on with it here", run.run_id, REASON)
        await self._prune_keys()
        return taken

    async def _prune_keys(self) -> None:
        store = self.hub.graph.store
        if isinstance(store, IdempotencyStore):
            await store.prune_requests(before=now())

    async def _loop(self) -> None:
        while True:
            try:
                await self.run_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a store that failed: the next pass tries again
                log.warning("the recovery pass failed (it runs again): %s", exc)
            if self.every is None:
                return
            await asyncio.sleep(self.every)

    def start(self) -> None:
        """Start passing in the background (the first pass at once)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._loop(), name="oncegraph-recovery"
            )

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            with contextlib.suppress(Exception):
                await cancel_and_wait(task)


__all__ = ["REASON", "RECOVER_EVERY", "Recovery", "server_actor"]
