"""Operator commands, kept apart (never one "retry"): ``continue RUN``, ``resolve
EFFECT``, ``replay RUN``, ``branch RUN``, ``redeliver EFFECT``. Each calls the run service,
which refuses what does not apply and writes the audit record (actor and reason)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer
from rich.text import Text

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
    confirmed,
    json_arg,
    run,
    where_options,
)
from oncegraph.cli.views import shown_effect

if TYPE_CHECKING:
    from oncegraph.runs.commands import Redelivered
    from oncegraph.runs.service import RunService


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

    @app.command()
    @where_options()
    def resolve(
        effect_id: Annotated[str, typer.Argument(metavar="EFFECT", help="the effect id")],
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
                run_id, checkpoint, patch=changes, reason=reason, actor=actor(who),
                as_node=as_node,
            ),
            needs_app="branch",
        )
        if as_json:
            o.emit_json({"run": made.run, "checkpoint_id": made.checkpoint_id, "diff": made.diff})
            return
        o.fields(
            [("branch run", made.run.run_id), ("thread", made.run.thread_id),
             ("status", made.run.status)]
        )
        o.table(
            ("channel", "before", "after"),
            ((c.channel, o.payload(c.before), o.payload(c.after)) for c in made.diff),
        )
        o.console.print(f"run it with: oncegraph continue {made.run.run_id} --app ...")

    @app.command()
    def redeliver(
        effect_id: Annotated[str, typer.Argument(metavar="EFFECT", help="the effect id")],
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


__all__ = ["register"]
