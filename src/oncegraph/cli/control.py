"""The run commands the UI and the API have and the CLI lacked: ``start THREAD`` (a new
run, with its actor in the audit log), ``abandon RUN`` (give up on an unfinished run,
from the database alone) and ``check EFFECT`` (ask the recipient about an uncertain
effect, through its tool's hook: needs the app). Each goes through the run service,
which refuses what does not apply and writes the audit record (actor and reason)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Annotated, Any

import typer

from oncegraph.cli import output as o
from oncegraph.cli.output import CliError
from oncegraph.cli.session import (
    ANYWHERE,
    ActorOpt,
    AppOpt,
    JsonOpt,
    MaybeReasonOpt,
    ReasonOpt,
    Where,
    actor,
    json_arg,
    run,
    where_options,
)
from oncegraph.cli.views import shown_effect

if TYPE_CHECKING:
    from oncegraph.runs.commands import EffectCheck
    from oncegraph.runs.context import RunResult
    from oncegraph.runs.service import RunService
    from oncegraph.storage.records import RunRecord


def register(app: typer.Typer) -> None:
    @app.command()
    def start(
        thread_id: Annotated[str, typer.Argument(metavar="THREAD", help="the thread to run on")],
        input_: Annotated[
            str,
            typer.Option("--input", help="the run's input, JSON (e.g. '{\"messages\": [...]}')"),
        ],
        reason: MaybeReasonOpt = None,
        who: ActorOpt = None,
        app_: AppOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Start a NEW run on a thread with an input (what invoke does), recorded with who
        started it; a thread whose run is unfinished is refused (continue or abandon it)."""
        from oncegraph.runs.launch import Launch
        from oncegraph.runs.lifecycle import FINAL_STATUSES
        from oncegraph.runtime.config import RunConfig

        value = json_arg("--input", input_)
        if value is None:
            raise CliError(
                "--input null would continue the thread's run, not start one: use "
                "oncegraph continue RUN for that",
                code=2,
            )
        by = actor(who)

        async def go(service: RunService) -> RunResult:
            cfg = RunConfig.parse({"thread_id": thread_id})
            latest = await service.runs(thread_id=thread_id, limit=1)
            if latest and latest[0].status not in FINAL_STATUSES:
                busy = latest[0]
                raise CliError(
                    f"thread {thread_id!r} has an unfinished run {busy.run_id} "
                    f"({busy.status}); nothing was started. Go on with it: oncegraph "
                    f"continue {busy.run_id} --app ..., or give up on it: oncegraph "
                    f"abandon {busy.run_id} --reason ..."
                )
            result = await service.run(value, cfg, launch=Launch(by, reason=reason))
            # the record as the run left it (the result carries it as it started)
            return replace(result, run=await service.run_view(result.run.run_id))

        result = run(Where(app=app_), go, needs_app="start")
        o.report_run(result, as_json, "started run")

    @app.command()
    @where_options()
    def abandon(
        run_id: Annotated[str, typer.Argument(metavar="RUN", help="the run to give up on")],
        reason: ReasonOpt,
        who: ActorOpt = None,
        where: Where = ANYWHERE,
        as_json: JsonOpt = False,
    ) -> None:
        """Give up on an unfinished run: nothing is deleted, new input may follow on its
        thread; a process still working on it is fenced out."""
        by = actor(who)

        async def go(service: RunService) -> RunRecord:
            found = await service.get_run(run_id)
            return await service.abandon(found.thread_id, reason=reason, actor=by, run_id=run_id)

        record = run(where, go)
        if as_json:
            o.emit_json({"run": _masked_run(record)})
            return
        o.fields(
            [
                ("abandoned run", record.run_id),
                ("thread", record.thread_id),
                ("status", record.status),
            ]
        )

    @app.command()
    def check(
        effect_id: Annotated[str, typer.Argument(metavar="EFFECT", help="the effect id")],
        reason: Annotated[
            str, typer.Option(help="why (kept in the audit log)")
        ] = "asked the recipient from the command line",
        who: ActorOpt = None,
        app_: AppOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Ask the recipient what it knows about an uncertain effect (its tool's reconcile
        or probe hook); changes the effect only when the recipient knows."""
        by = actor(who)
        found: EffectCheck = run(
            Where(app=app_),
            lambda s: s.check_effect(effect_id, actor=by, reason=reason),
            needs_app="check",
        )
        if as_json:
            o.emit_json({"verdict": found.verdict, "effect": shown_effect(found.effect, True)})
            return
        o.fields(
            [
                ("effect", found.effect.effect_id),
                ("the recipient says", found.verdict),
                ("status now", found.effect.status),
            ]
        )
        if found.effect.status in ("pending", "accepted"):
            o.console.print(
                "still uncertain: check at the recipient by hand, then oncegraph resolve "
                f"{found.effect.effect_id} --outcome done|not_done --reason ..."
            )


def _masked_run(record: Any) -> Any:
    """A run as ``--json`` shows it: its input and error are not shown without the app's
    masks (they may hold masked values)."""
    return {**o.plain(record), "input": None, "config": None}


__all__ = ["register"]
