"""Read commands: ``runs``, ``show RUN``, ``history THREAD``, ``effects``, ``effect EFFECT``,
``audit``. They call the run service's views; none reads a store directly; none needs
the app's code (``--app`` adds what only the graph knows: masks, decoded states).

Everything they print is masked (:func:`masked_for`): with ``--app``, by the tools'
``mask=[...]`` fields and the values their effects were given in them; without it the
masks are unknown, so payloads are not shown and every value a tool was given (at
least four characters long) is masked in errors and reasons."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import TYPE_CHECKING, Annotated, Any

import typer

from oncegraph.cli import output as o
from oncegraph.cli.output import CliError
from oncegraph.cli.session import (
    ANYWHERE,
    EffectArg,
    JsonOpt,
    ThreadArg,
    Where,
    run,
    where_command,
)
from oncegraph.errors import ForeignRunError, RunNotFoundError
from oncegraph.runs import compensating
from oncegraph.runs.holders import Holder, holder, holders
from oncegraph.runs.masking import Masker
from oncegraph.runs.snapshots import timestamp
from oncegraph.storage.records import (
    AuditRecord,
    EffectRecord,
    EffectStatus,
    RunRecord,
    RunStatus,
)

if TYPE_CHECKING:
    from oncegraph.runs.service import RunService

_THREADS_PER_READ = 100

StatusesOpt = Annotated[
    list[str] | None,
    typer.Option("--status", help="only these statuses (repeat, or comma-separated)"),
]

_HIDDEN = "(not shown: pass --app to show payloads with the tool's mask fields masked)"


def _statuses(values: list[str] | None, kind: type[Any], flag: str) -> list[Any] | None:
    if not values:
        return None
    allowed = [s.value for s in kind]
    out = []
    for v in values:
        for part in v.split(","):
            if part.strip() not in allowed:
                raise CliError(
                    f"{flag} {part.strip()!r} is not a status; use one of {', '.join(allowed)}",
                    code=2,
                )
            out.append(kind(part.strip()))
    return out


def shown_effect(record: EffectRecord, masked: bool) -> dict[str, Any]:
    """An effect as JSON; without the app's masks its payloads are left out."""
    data: dict[str, Any] = o.plain(record)
    data["source_version"] = record.source_version  # where the recorded result came from
    if not masked:
        data["request"] = data["result"] = None
        data["payload_hidden"] = True
    return data


async def masked_for(service: RunService, thread_ids: Iterable[str]) -> Masker:
    """The masker of what the CLI prints about these threads (see the module docstring)."""
    threads = sorted(set(thread_ids))
    masker: Masker = await service.masker(thread_ids=threads)
    if service.spec is None:  # no app: the tools' masks are unknown
        await service.setup()
        for at in range(0, len(threads), _THREADS_PER_READ):
            for payload in await service.store.list_effect_payloads(
                thread_ids=threads[at : at + _THREADS_PER_READ], results=False
            ):
                masker.learn_arguments(payload)
    return masker


def register(app: typer.Typer) -> None:
    @where_command(app)
    def runs(
        status: StatusesOpt = None,
        thread: Annotated[str | None, typer.Option(help="only this thread")] = None,
        limit: Annotated[int, typer.Option(min=1, help="at most this many")] = 50,
        before: Annotated[
            str | None,
            typer.Option(metavar="RUN", help="the runs listed after this run (the next page)"),
        ] = None,
        where: Where = ANYWHERE,
        as_json: JsonOpt = False,
    ) -> None:
        """List runs, newest first (needs_review ones are the operator's to act on);
        --before RUN goes on after a page's last run."""
        statuses = _statuses(status, RunStatus, "--status")

        async def listed(service: RunService) -> tuple[list[RunRecord], set[str]]:
            got = await service.runs(
                thread_id=thread, statuses=statuses, limit=limit, before=before
            )
            masker = await masked_for(service, (r.thread_id for r in got))
            held = await holders(service.store, got)
            crashed = {run_id for run_id, h in held.items() if h.crashed}
            return [masker.run(r) for r in got], crashed

        found, crashed = run(where, listed)
        if as_json:
            o.emit_json(found)
            return
        o.table(
            ("run_id", "thread_id", "status", "reason", "created", "error"),
            (
                (
                    r.run_id,
                    r.thread_id,
                    "running, stopped by a crash" if r.run_id in crashed else r.status,
                    r.launch_reason,
                    o.when(r.created_at),
                    (r.error or "")[:80],
                )
                for r in found
            ),
            ids=("run_id", "thread_id"),
        )

    @where_command(app)
    def show(
        run_id: Annotated[str, typer.Argument(metavar="RUN", help="the run id")],
        where: Where = ANYWHERE,
        as_json: JsonOpt = False,
    ) -> None:
        """One run: its record, its parent (a replay or branch), effects and audit entries."""

        async def go(
            service: RunService,
        ) -> tuple[RunRecord, Holder | None, list[EffectRecord], list[AuditRecord]]:
            record = await service.run_view(run_id)
            held = await holder(service.store, record)
            effects = await service.effects(run_id=run_id)
            audit = await service.audit(run_id=run_id, limit=1000)
            masker = await masked_for(service, (record.thread_id,))
            return (
                masker.run(record),
                held,
                [masker.effect(e) for e in effects],
                [masker.audit(a) for a in audit],
            )

        record, held, effects, audit = run(where, go)
        masked = where.app is not None
        if as_json:
            o.emit_json(
                {
                    "run": record,
                    **(
                        {"holder": held.as_dict(), "crashed": held.crashed}
                        if held is not None
                        else {}
                    ),
                    "effects": [shown_effect(e, masked) for e in effects],
                    "audit": audit,
                }
            )
            return
        o.fields(
            [
                ("run", record.run_id),
                ("thread", record.thread_id),
                ("status", record.status),
                ("launched by", record.launch_reason),
                ("mode", record.mode or ""),
                ("graph", f"{record.workflow_name} v{record.workflow_version}"),
                ("created", o.when(record.created_at)),
                ("updated", o.when(record.updated_at)),
            ]
        )
        if record.parent_run_id:
            o.fields(
                [
                    ("parent run", record.parent_run_id),
                    ("from checkpoint", record.parent_checkpoint_id),
                ]
            )
        if held is not None and held.crashed:
            o.fields(
                [
                    (
                        "held by",
                        f"nobody: its process ({held.owner or 'unknown'}) stopped without "
                        "finishing it (a crash or a kill); nothing recorded is lost. Go on "
                        f"with it: oncegraph continue {record.run_id} --app MODULE:APP",
                    )
                ]
            )
        elif held is not None:
            until = held.lease_expires_at
            lease = f", lease until {o.when(until)}" if until else ""
            o.fields(
                [
                    (
                        "held by",
                        f"{held.owner or 'a live process'} (last write "
                        f"{o.when(held.last_write)}{lease})",
                    )
                ]
            )
        if record.error:
            o.fields([("error", record.error)])
        if effects:
            _effects_table(effects)
        if audit:
            _audit_table(audit)

    @where_command(app)
    def history(
        thread_id: ThreadArg,
        run_id: Annotated[str | None, typer.Option("--run", help="only this run's")] = None,
        limit: Annotated[int | None, typer.Option(min=1, help="at most this many")] = None,
        where: Where = ANYWHERE,
        as_json: JsonOpt = False,
    ) -> None:
        """A thread's checkpoints, newest first (from the database alone; with --app the
        states too, read by the graph and masked)."""
        from oncegraph.runs import reading
        from oncegraph.runs.stored import raw_history

        if where.app is None:
            records = run(
                where, lambda s: raw_history(s.context, thread_id, run_id=run_id, limit=limit)
            )
            if as_json:
                o.emit_json(
                    [
                        {
                            "checkpoint_id": c.checkpoint_id,
                            "run_id": c.run_id,
                            "step": c.step,
                            "source": c.metadata.get("source", ""),
                            "next": list(c.next),
                            "created_at": c.created_at,
                        }
                        for c in records
                    ]
                )
                return
            o.table(
                ("step", "checkpoint_id", "run_id", "source", "next", "created"),
                (
                    (
                        c.step,
                        c.checkpoint_id,
                        c.run_id,
                        c.metadata.get("source", ""),
                        ",".join(c.next),
                        o.when(c.created_at),
                    )
                    for c in records
                ),
                ids=("checkpoint_id", "run_id"),
            )
            return
        snaps = run(
            where,  # the masked history, as get_state_history shows it
            lambda s: _collected(reading.history(s.context, thread_id, run_id=run_id, limit=limit)),
        )
        if as_json:
            o.emit_json(snaps)
            return
        o.table(
            ("step", "checkpoint_id", "run_id", "source", "next", "created", "interrupts"),
            (
                (
                    s.metadata.get("step", ""),
                    s.config.get("checkpoint_id", ""),
                    s.run_id or "",
                    s.metadata.get("source", ""),
                    ",".join(s.next),
                    o.when(timestamp(s.created_at)),
                    len(s.interrupts),
                )
                for s in snaps
            ),
            ids=("checkpoint_id", "run_id"),
        )

    @where_command(app)
    def effects(
        run_id: Annotated[str | None, typer.Option("--run", help="the run's effects")] = None,
        thread: Annotated[str | None, typer.Option(help="the thread's effects")] = None,
        status: StatusesOpt = None,
        tool: Annotated[
            str | None, typer.Option(help="across runs: only this tool's (or model:NAME)")
        ] = None,
        recipient: Annotated[
            str | None, typer.Option(help="across runs: recipients containing this")
        ] = None,
        since_hours: Annotated[
            float | None, typer.Option(min=0, help="across runs: only the last N hours'")
        ] = None,
        limit: Annotated[int, typer.Option(min=1, help="across runs: at most this many")] = 100,
        where: Where = ANYWHERE,
        as_json: JsonOpt = False,
    ) -> None:
        """The effect log of a run or a thread, oldest first; with neither, across runs,
        newest first, with how many need review and how many are pending."""
        if run_id is None and thread is None:
            _effect_log(where, status, tool, recipient, since_hours, limit, as_json)
            return
        statuses = _statuses(status, EffectStatus, "--status")

        async def listed(service: RunService) -> list[EffectRecord]:
            got = await service.effects(run_id=run_id, thread_id=thread, statuses=statuses)
            masker = await masked_for(service, {e.thread_id for e in got})
            return [masker.effect(e) for e in got]

        found = run(where, listed)
        if as_json:
            o.emit_json([shown_effect(e, where.app is not None) for e in found])
            return
        _effects_table(found)

    @where_command(app)
    def effect(effect_id: EffectArg, where: Where = ANYWHERE, as_json: JsonOpt = False) -> None:
        """One effect: status, attempts, request hash, provider reference, masked payload."""
        record, undone_by = run(where, lambda s: _effect_and_links(s, effect_id))
        masked = where.app is not None
        compensates = compensating.compensates(record)
        if as_json:
            shown = shown_effect(record, masked)
            shown.update(compensates=compensates, compensated_by=undone_by)
            o.emit_json(shown)
            return
        o.fields(
            [
                ("effect", record.effect_id),
                ("type", f"{record.effect_type} ({record.effect_class})"),
                ("status", record.status),
                ("run", record.run_id),
                ("thread", record.thread_id),
                ("node", record.node),
                ("command", record.command_id),
                ("recipient", record.recipient or ""),
                ("request hash", record.request_hash),
                ("provider reference", record.provider_reference or ""),
                ("source version", record.source_version or ""),
                ("request", o.payload(record.request) if masked else _HIDDEN),
                ("result", o.payload(record.result) if masked else _HIDDEN),
            ]
        )
        if compensates:
            o.fields([("compensates", compensates)])
        if undone_by:
            o.fields([("compensated by", ", ".join(undone_by))])
        if record.error:
            o.fields([("error", record.error)])
        o.table(
            ("attempt", "started", "ended", "outcome", "error"),
            (
                (a.number, o.when(a.started_at), o.when(a.ended_at), a.outcome or "", a.error or "")
                for a in record.attempts
            ),
        )

    @where_command(app)
    def audit(
        run_id: Annotated[str | None, typer.Option("--run", help="only this run's")] = None,
        thread: Annotated[str | None, typer.Option(help="only this thread's")] = None,
        target: Annotated[
            str | None, typer.Option(help="only actions on this run or effect id")
        ] = None,
        limit: Annotated[int, typer.Option(min=1, help="at most this many")] = 100,
        where: Where = ANYWHERE,
        as_json: JsonOpt = False,
    ) -> None:
        """The audit log (operator actions and interrupt answers), newest first."""

        async def listed(service: RunService) -> list[AuditRecord]:
            got = await service.audit(
                run_id=run_id, thread_id=thread, target_id=target, limit=limit
            )
            masker = await masked_for(service, {a.thread_id for a in got if a.thread_id})
            return [masker.audit(a) for a in got]

        found = run(where, listed)
        if as_json:
            o.emit_json(found)
            return
        _audit_table(found)


async def _effect_and_links(service: RunService, effect_id: str) -> tuple[EffectRecord, list[str]]:
    """The effect (as :func:`_one_effect`) and the ids of its compensations."""
    record = await _one_effect(service, effect_id)
    return record, [r.effect_id for r in await service.compensations(effect_id)]


async def _one_effect(service: RunService, effect_id: str) -> EffectRecord:
    """The effect through the run service: refused when it is another app's (the
    service's scope check), masked as every view is."""
    try:
        record = await service.effect(effect_id)
    except ForeignRunError:
        raise
    except RunNotFoundError:
        raise CliError(
            f"no effect {effect_id!r}; list them with: oncegraph effects --run RUN_ID"
        ) from None
    return (await masked_for(service, (record.thread_id,))).effect(record)


def _effect_log(
    where: Where,
    status: list[str] | None,
    tool: str | None,
    recipient: str | None,
    since_hours: float | None,
    limit: int,
    as_json: bool,
) -> None:
    """``effects`` across runs (:meth:`~oncegraph.runs.service.RunService.effect_log`)."""
    import time

    from oncegraph.errors import ConfigError
    from oncegraph.runs.effectlog import EffectQuery

    wanted = tuple(p.strip() for v in status or () for p in v.split(",") if p.strip())
    try:
        query = EffectQuery(
            statuses=wanted or None,
            tool=tool,
            recipient=recipient,
            since=None if since_hours is None else time.time() - since_hours * 3600,
            limit=limit,
        )
    except ConfigError as exc:
        raise CliError(f"--status: {exc}", code=2) from None

    async def listed(service: RunService) -> Any:
        log = await service.effect_log(query)
        masker = await masked_for(service, {e.effect.thread_id for e in log.effects})
        return log, [masker.effect(e.effect) for e in log.effects]

    log, shown = run(where, listed)
    masked = where.app is not None
    if as_json:
        o.emit_json(
            {
                "needs_review": log.needs_review,
                "pending": log.pending,
                "matched": log.matched,
                "effects": [
                    {
                        **shown_effect(e, masked),
                        "needs_review": item.needs_review,
                        "run_status": item.run_status,
                    }
                    for e, item in zip(shown, log.effects, strict=True)
                ],
            }
        )
        return
    o.console.print(f"{log.needs_review} need review, {log.pending} pending")
    o.table(
        ("when", "effect_id", "type", "status", "attempts", "recipient", "run_id"),
        (
            (
                o.when(e.created_at),
                e.effect_id,
                e.effect_type,
                "needs review" if item.needs_review else e.status,
                _attempts(e),
                e.recipient or "",
                e.run_id,
            )
            for e, item in zip(shown, log.effects, strict=True)
        ),
        ids=("effect_id", "run_id"),
    )
    if log.matched > len(shown):
        o.console.print(f"the newest {len(shown)} of {log.matched}; narrow with --since-hours")


def _attempts(e: EffectRecord) -> str:
    """An effect's attempts; a pending one with none may still have reached its recipient
    (the run stopped during the call), so it never reads as "never tried"."""
    if e.attempts:
        return str(len(e.attempts))
    return "none recorded" if e.status == EffectStatus.PENDING else "0"


def _effects_table(found: list[EffectRecord]) -> None:
    o.table(
        ("effect_id", "type", "class", "status", "attempts", "recipient"),
        (
            (e.effect_id, e.effect_type, e.effect_class, e.status, _attempts(e), e.recipient or "")
            for e in found
        ),
        ids=("effect_id",),
    )


def _audit_table(found: list[Any]) -> None:
    o.table(
        ("at", "actor", "action", "target", "reason"),
        ((o.when(a.at), a.actor, a.action, a.target_id, a.reason or "") for a in found),
        ids=("target",),
    )


__all__ = ["masked_for", "register", "shown_effect"]


async def _collected(items: AsyncIterator[Any]) -> list[Any]:
    """An async iterator's items, as a list (the history pages through the store)."""
    return [item async for item in items]
