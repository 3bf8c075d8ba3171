"""Operator commands, kept apart (never one "retry"): ``continue RUN``, ``resolve
EFFECT``, ``replay RUN``, ``branch RUN``, ``redeliver EFFECT``; and the run commands the
UI and the API have: ``start THREAD`` (a new run, with its actor in the audit log),
``abandon RUN`` (give up on an unfinished run, from the database alone) and ``check
EFFECT`` (ask the recipient about an uncertain effect, through its tool's hook: needs the
app). Each calls the run service, which refuses what does not apply and writes the audit
record (actor and reason)."""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer
from rich.text import Text

from oncegraph.cli import output as o
from oncegraph.cli.output import CliError
from oncegraph.cli.session import (
    ANYWHERE,
    ActorOpt,
    AppOpt,
    EffectArg,
    JsonOpt,
    MaybeReasonOpt,
    ReasonOpt,
    Where,
    actor,
    confirmed,
    json_arg,
    run,
    where_command,
)
from oncegraph.cli.views import shown_effect

if TYPE_CHECKING:
    from oncegraph.runs.commands import EffectCheck, Redelivered
    from oncegraph.runs.context import RunResult
    from oncegraph.runs.service import RunService
    from oncegraph.storage.records import RunRecord


def register(app: typer.Typer) -> None:
    @app.command("continue")
    def continue_(
        run_id: Annotated[str, typer.Argument(metavar="RUN", help="the run to continue")],
        answer: Annotated[
            str | None,
            typer.Option(help="JSON answer for a run waiting on interrupt()"),
        ] = None,
        reason: MaybeReasonOpt = None,
        who: ActorOpt = None,
        app_: AppOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Continue an unfinished run (paused, failed, interrupted, parked) under its own id."""
        from oncegraph.runs.commands import NO_ANSWER

        given = NO_ANSWER if answer is None else json_arg("--answer", answer)
        by = actor(who)
        result = run(
            Where(app=app_),
            lambda s: s.resume(run_id, answer=given, actor=by, reason=reason),
            needs_app="continue",
        )
        o.report_run(result, as_json, "continued run")

    @where_command(app)
    def resolve(
        effect_id: EffectArg,
        outcome: Annotated[
            Literal["done", "not_done"],
            typer.Option(help="what you found at the recipient: done (it happened) or not_done"),
        ],
        reason: ReasonOpt,
        result: Annotated[
            str | None, typer.Option(help="JSON result to record (with --outcome done)")
        ] = None,
        provider_reference: Annotated[
            str | None, typer.Option(help="the recipient's id for it (with done)")
        ] = None,
        who: ActorOpt = None,
        where: Where = ANYWHERE,
        as_json: JsonOpt = False,
    ) -> None:
        """Record what you checked at the recipient for an uncertain (pending) effect."""
        value = None if result is None else json_arg("--result", result)
        record = run(
            where,
            lambda s: s.resolve_effect(
                effect_id,
                outcome,
                actor=actor(who),
                reason=reason,
                result=value,
                provider_reference=provider_reference,
            ),
        )
        if as_json:
            o.emit_json(shown_effect(record, where.app is not None))
            return
        o.fields([("resolved effect", record.effect_id), ("status", record.status)])
        o.console.print(f"continue its run with: oncegraph continue {record.run_id} --app ...")

    @app.command()
    def replay(
        run_id: Annotated[str, typer.Argument(metavar="RUN", help="the run to replay")],
        reason: ReasonOpt,
        mode: Annotated[
            Literal["evidence", "simulation", "live"],
            typer.Option(
                help="evidence: recorded results only; simulation: tools' simulate; live: "
                "real calls",
            ),
        ] = "evidence",
        checkpoint: Annotated[
            str | None, typer.Option(help="start from this checkpoint (default: the run's start)")
        ] = None,
        allow_irreversible: Annotated[
            list[str] | None,
            typer.Option(help="live mode: irreversible tools allowed to send (repeatable)"),
        ] = None,
        who: ActorOpt = None,
        app_: AppOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """A NEW run from a run's history, in a mode; the original is never touched."""
        result = run(
            Where(app=app_),
            lambda s: s.replay(
                run_id,
                checkpoint_id=checkpoint,
                mode=mode,
                reason=reason,
                actor=actor(who),
                allow_irreversible=tuple(allow_irreversible or ()),
            ),
            needs_app="replay",
        )
        o.report_run(result, as_json, "replay run")

    @app.command()
    def branch(
        run_id: Annotated[str, typer.Argument(metavar="RUN", help="the run to branch from")],
        patch: Annotated[str, typer.Option(help="JSON object of state fields to change")],
        reason: ReasonOpt,
        checkpoint: Annotated[
            str | None, typer.Option(help="branch from this checkpoint (default: the latest)")
        ] = None,
        as_node: Annotated[
            str | None, typer.Option(help="apply the patch as if this node wrote it")
        ] = None,
        who: ActorOpt = None,
        app_: AppOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """A NEW paused run from a run's (patched) state; shows the diff, runs nothing."""
        changes = json_arg("--patch", patch, object_of="state fields")
        made = run(
            Where(app=app_),
            lambda s: s.branch(
                run_id,
                checkpoint,
                patch=changes,
                reason=reason,
                actor=actor(who),
                as_node=as_node,
            ),
            needs_app="branch",
        )
        if as_json:
            o.emit_json({"run": made.run, "checkpoint_id": made.checkpoint_id, "diff": made.diff})
            return
        o.fields(
            [
                ("branch run", made.run.run_id),
                ("thread", made.run.thread_id),
                ("status", made.run.status),
            ]
        )
        o.table(
            ("channel", "before", "after"),
            ((c.channel, o.payload(c.before), o.payload(c.after)) for c in made.diff),
        )
        o.console.print(f"run it with: oncegraph continue {made.run.run_id} --app ...")

    @app.command()
    def redeliver(
        effect_id: EffectArg,
        reason: ReasonOpt,
        new_key: Annotated[
            bool, typer.Option(help="send with a new idempotency key (default: the same key)")
        ] = False,
        yes: Annotated[bool, typer.Option("--yes", "-y", help="send without asking")] = False,
        preview_only: Annotated[
            bool, typer.Option("--preview", help="show what would be sent; send nothing")
        ] = False,
        past_dedup_window: Annotated[
            bool,
            typer.Option(
                "--past-dedup-window",
                help="send with the same key even though the recipient's dedup window has "
                "passed or is unknown (it may perform the effect a second time)",
            ),
        ] = False,
        who: ActorOpt = None,
        app_: AppOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Send an effect once more: shows what would be sent, then asks to confirm."""
        from oncegraph.runs.commands import RedeliveryPreview
        from oncegraph.runs.redelivery import PastDedupWindowError

        if preview_only and yes:
            raise CliError("--preview sends nothing; drop --yes, or drop --preview to send", 2)
        by = actor(who)

        async def go(service: RunService) -> RedeliveryPreview | Redelivered:
            preview = await service.redeliver(effect_id, actor=by, reason=reason, new_key=new_key)
            assert isinstance(preview, RedeliveryPreview)  # no confirm: a preview, sent nothing
            if preview_only:
                return preview
            if not as_json:
                _preview(preview)
            if preview.recipient_has_it:
                raise CliError(
                    f"the recipient says it already has effect {effect_id}; it is recorded as "
                    "completed, and sending it again would do it twice. Nothing was sent"
                )
            if preview.past_dedup_window and not past_dedup_window:
                raise CliError(
                    f"{preview.warning} Nothing was sent. To send it anyway, run the command "
                    "again with --past-dedup-window (or with --new-key for a new request)"
                )
            if not yes:
                if as_json and not sys.stdin.isatty():
                    raise CliError(
                        "--json without --yes: see what would be sent with --preview, then "
                        "send with --yes",
                        code=2,
                    )
                if not await confirmed("Send it now?"):
                    raise CliError("not confirmed; nothing was sent")
            try:
                return await service.redeliver(
                    effect_id,
                    actor=by,
                    reason=reason,
                    new_key=new_key,
                    confirm=preview.token,
                    past_dedup_window=past_dedup_window,
                )
            except PastDedupWindowError as exc:  # the window passed while asking
                raise CliError(str(exc.naming("run it again with --past-dedup-window"))) from None

        done = run(Where(app=app_), go, needs_app="redeliver")
        if isinstance(done, RedeliveryPreview):  # --preview
            if as_json:
                o.emit_json(done)
            else:
                _preview(done)
                o.console.print("nothing was sent (--preview)")
            return
        if as_json:
            o.emit_json({"effect": shown_effect(done.effect, True), "preview": done.preview})
            return
        o.fields([("redelivered effect", done.effect.effect_id), ("status", done.effect.status)])


def register_runs(app: typer.Typer) -> None:
    """The run commands: ``start``, ``abandon``, ``check``."""

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

    @where_command(app)
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
        effect_id: EffectArg,
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


def _preview(preview: Any) -> None:
    last = preview.last_attempt
    o.fields(
        [
            ("effect", preview.effect_id),
            ("type", preview.effect_type),
            ("recipient", preview.recipient or ""),
            ("payload", o.payload(preview.payload)),
            ("status", preview.status),
            ("last attempt", f"#{last.number} {last.outcome or 'no outcome'}" if last else "none"),
            ("recipient says", preview.recipient_answer or "not asked"),
            ("dedup", preview.dedup),
            ("dedup method", preview.dedup_method),
            ("run", preview.run_id),
        ]
    )
    if preview.recipient_has_it:
        o.console.print(
            "[bold red]The recipient already has this effect: it will not be sent again.[/]"
        )
    elif preview.warning:
        o.console.print(Text("WARNING: ", style="bold red") + Text(preview.warning))


__all__ = ["register", "register_runs"]
