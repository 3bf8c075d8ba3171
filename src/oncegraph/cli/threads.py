"""Thread reads: ``threads`` (each thread by its latest run) and ``state THREAD`` (its
state now, or at a checkpoint). Both work from the database alone: with ``--app`` the
state is read as the graph reads it, its masked fields masked; without it the stored
values are shown (log channels as their stored entries) with every value a tool was
given masked (:func:`oncegraph.cli.views.masked_for`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from oncegraph.cli import output as o
from oncegraph.cli.session import ANYWHERE, JsonOpt, ThreadArg, Where, run, where_command
from oncegraph.cli.views import _statuses, masked_for
from oncegraph.storage.records import RunStatus

if TYPE_CHECKING:
    from oncegraph.runs.service import RunService
    from oncegraph.storage.records import RunRecord

SCAN = 500  # runs read per page while gathering threads
MAX_SCAN = 20_000  # runs read at most for one listing


def register(app: typer.Typer) -> None:
    @where_command(app)
    def threads(
        status: Annotated[
            list[str] | None,
            typer.Option("--status", help="only threads whose latest run has this status"),
        ] = None,
        limit: Annotated[int, typer.Option(min=1, help="at most this many threads")] = 50,
        where: Where = ANYWHERE,
        as_json: JsonOpt = False,
    ) -> None:
        """List threads by their latest run, newest first, with how many runs each has."""
        wanted = {str(s) for s in _statuses(status, RunStatus, "--status") or ()}

        async def listed(service: RunService) -> list[dict[str, Any]]:
            latest: dict[str, RunRecord] = {}
            counts: dict[str, int] = {}
            before: RunRecord | None = None
            read = 0
            while read < MAX_SCAN:
                page = await service.runs(limit=SCAN, before=before)
                for r in page:  # newest first: a thread's first run seen is its latest
                    counts[r.thread_id] = counts.get(r.thread_id, 0) + 1
                    latest.setdefault(r.thread_id, r)
                read += len(page)
                if len(page) < SCAN:
                    break
                before = page[-1]
            kept = [r for r in latest.values() if not wanted or str(r.status) in wanted]
            return [
                {
                    "thread_id": r.thread_id,
                    "app": r.app,
                    "latest_run_id": r.run_id,
                    "status": str(r.status),
                    "runs": counts[r.thread_id],
                    "updated_at": r.updated_at,
                }
                for r in kept[:limit]
            ]

        found = run(where, listed)
        if as_json:
            o.emit_json(found)
            return
        if not found:
            o.console.print("no threads" + (" with such a latest run" if wanted else ""))
            return
        o.table(
            ("thread_id", "app", "latest run", "status", "runs", "updated"),
            (
                (
                    t["thread_id"],
                    t["app"],
                    t["latest_run_id"],
                    t["status"],
                    t["runs"],
                    o.when(t["updated_at"]),
                )
                for t in found
            ),
            ids=("thread_id", "latest run"),
        )

    @where_command(app)
    def state(
        thread_id: ThreadArg,
        checkpoint: Annotated[
            str | None, typer.Option(help="the state at this checkpoint (default: now)")
        ] = None,
        where: Where = ANYWHERE,
        as_json: JsonOpt = False,
    ) -> None:
        """A thread's state now (or at a checkpoint): its values, what runs next, and
        which run wrote it."""

        async def read(service: RunService) -> dict[str, Any]:
            if service.spec is not None:
                from oncegraph.runs import reading
                from oncegraph.runs.snapshots import timestamp

                snap = await reading.state(service.context, thread_id, checkpoint)
                return {
                    "thread_id": thread_id,
                    "checkpoint_id": snap.config.get("checkpoint_id"),
                    "run_id": snap.run_id,
                    "step": snap.metadata.get("step"),
                    "next": list(snap.next),
                    "values": snap.values,
                    "interrupts": list(snap.interrupts),
                    "created_at": timestamp(snap.created_at),
                    "as_stored": False,
                }
            from oncegraph.runs.stored import raw_state

            found = await raw_state(service.context, thread_id, checkpoint)
            masker = await masked_for(service, (thread_id,))
            cp = found.checkpoint
            return {
                "thread_id": thread_id,
                "checkpoint_id": cp.checkpoint_id,
                "run_id": cp.run_id,
                "step": cp.step,
                "next": list(cp.next),
                "values": masker.value(found.values),
                "logs": list(found.logs),
                "created_at": cp.created_at,
                "as_stored": True,
            }

        got = run(where, read)
        if as_json:
            o.emit_json(got)
            return
        o.fields(
            [
                ("thread", got["thread_id"]),
                ("checkpoint", got["checkpoint_id"] or ""),
                ("run", got["run_id"] or ""),
                ("step", got["step"]),
                ("next", ", ".join(got["next"]) or "(the end)"),
                ("created", o.when(got["created_at"])),
            ]
        )
        if got.get("interrupts"):
            o.fields([("waiting for an answer", o.payload(got["interrupts"]))])
        o.table(
            ("field", "value"),
            ((name, o.payload(value)) for name, value in got["values"].items()),
        )
        if got["as_stored"]:
            o.console.print(
                "as stored (no --app): log fields list their entries as written, and every "
                "value a tool was given is masked; pass --app MODULE:APP to read the state "
                "as the graph does"
            )


__all__ = ["register"]
