"""``oncegraph compensate EFFECT --reason ...``: undo a completed effect with its tool's
compensating tool, as a new effect of its own (:mod:`oncegraph.runs.compensating`).

It shows the effect and the tool that will undo it, then asks (``--yes``: does not ask);
``--again`` compensates an effect already compensated; ``--args JSON`` gives the
compensating tool its own arguments. The run service refuses what does not apply and
writes the audit record (actor and reason)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from oncegraph.cli import output as o
from oncegraph.cli import session as kit
from oncegraph.cli.output import CliError
from oncegraph.cli.views import shown_effect
from oncegraph.errors import ConfigError, RunStateError

if TYPE_CHECKING:
    from oncegraph.runs.compensating import Compensated
    from oncegraph.runs.service import RunService


def register(app: typer.Typer) -> None:
    @kit.where_command(app)
    def compensate(
        effect_id: Annotated[str, typer.Argument(metavar="EFFECT", help="the effect to undo")],
        reason: kit.ReasonOpt,
        yes: Annotated[bool, typer.Option("--yes", "-y", help="compensate without asking")] = False,
        again: Annotated[
            bool, typer.Option("--again", help="compensate an effect already compensated")
        ] = False,
        args: Annotated[
            str | None,
            typer.Option("--args", help="JSON object: the compensating tool's own arguments"),
        ] = None,
        who: kit.ActorOpt = None,
        where: kit.Where = kit.ANYWHERE,
        as_json: kit.JsonOpt = False,
    ) -> None:
        """Undo a completed effect with its tool's compensating tool (a new effect, audited,
        linked to the one it undoes); at most once unless --again."""
        own: dict[str, Any] = (
            {}
            if args is None
            else kit.json_arg(
                "--args",
                args,
                example='{"note": "customer cancelled"}',
                object_of="the compensating tool's arguments",
            )
        )
        if as_json and not yes and not sys.stdin.isatty():
            raise CliError("--json without --yes: add --yes to compensate", code=2)
        by = kit.actor(who)

        async def go(service: RunService) -> Compensated:
            from oncegraph.runs.compensating import compensating_tool

            record = await service.effect(effect_id)
            tool = compensating_tool(service.context.graph, record)
            if not yes:
                o.fields(
                    [
                        ("effect", record.effect_id),
                        ("type", record.effect_type),
                        ("status", record.status),
                        ("recipient", record.recipient or ""),
                        ("request", o.payload(record.request)),
                        ("compensated by tool", f"{tool.name} ({tool.effect})"),
                        ("run", record.run_id),
                    ]
                )
                if not await kit.confirmed("Compensate it now?"):
                    raise CliError("not confirmed; nothing was compensated")
            try:
                return await service.compensate(
                    effect_id, actor=by, reason=reason, allow_again=again, args=own
                )
            except (RunStateError, ConfigError) as exc:
                raise CliError(_in_cli_words(str(exc))) from None

        done = kit.run(where, go, needs_app="compensate")
        if as_json:
            o.emit_json(
                {
                    "effect": shown_effect(done.effect, True),
                    "compensates": done.original.effect_id,
                    "resumed": done.resumed,
                }
            )
            return
        o.fields(
            [
                ("compensation", done.effect.effect_id),
                ("type", done.effect.effect_type),
                ("status", done.effect.status),
                ("compensates", done.original.effect_id),
            ]
        )
        if done.resumed:
            o.console.print("an unfinished compensation of this effect was taken up again")


def _in_cli_words(text: str) -> str:
    """A refusal naming the app's calls, with the CLI's commands and flags instead."""
    from oncegraph.runs.compensating import AGAIN, CHECK, RESOLVE

    return (
        text.replace(f"pass {AGAIN}", "run it with --again")
        .replace(CHECK, "oncegraph check EFFECT")
        .replace(RESOLVE, "oncegraph resolve EFFECT --outcome done")
    )


__all__ = ["register"]
