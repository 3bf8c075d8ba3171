"""The web UI's Compensate: a confirmation form on the effect, then the compensation.

``GET /ui/effects/{effect_id}/compensate`` shows the effect (masked), the tool that will
undo it and the compensations it already has, with a reason and a confirmation box (and
"Compensate again" once it was compensated); ``POST`` runs it through the one operation
the API uses (:func:`oncegraph.server.compensation.compensate`) and goes to the run's
page, which says what happened. The button appears on the effect's page and its card on
the run's page only where it applies (:func:`~oncegraph.server.compensation.compensable`)
and for the role the server asks (admin unless configured).
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from oncegraph.runs.compensating import AGAIN, CHECK, RESOLVE, compensating_tool
from oncegraph.server import compensation
from oncegraph.server.auth import Principal
from oncegraph.server.context import graph, need, shown, visible_run
from oncegraph.server.problems import bad_request
from oncegraph.server.ui_frame import _given, _to_run, command, guarded, render


def _in_ui_words(text: str) -> str:
    """A refusal naming the app's calls, with this page's buttons instead."""
    return (
        text.replace(f"pass {AGAIN}", 'tick "Compensate again" and press "Compensate"')
        .replace(CHECK, 'the "Check at recipient" button')
        .replace(RESOLVE, 'the "Resolve effect" button')
    )


async def compensate_page(request: Request, me: Principal) -> Response:
    effect_id = request.path_params["effect_id"]
    need(request, compensation.role(request), cookie=True)
    app = graph(request)
    record = await app.service.effect(effect_id)
    run = await visible_run(request, me, record.run_id)
    view = await shown(request, me)
    tool = compensating_tool(getattr(app.service, "spec", None), record)
    return await render(
        request,
        me,
        "compensate.html",
        run=view.run(run),
        effect=view.effect(record),
        tool={"name": tool.name, "effect": str(tool.effect)},
        links=await compensation.links_of(request, me, record),
    )


async def do_compensate(request: Request, me: Principal, form: dict[str, str]) -> Response:
    effect_id = request.path_params["effect_id"]
    if form.get("confirmed") != "yes":
        raise bad_request("tick the confirmation box to compensate; nothing was done")
    body: dict[str, Any] = {
        "reason": form.get("reason"),
        "allow_again": form.get("allow_again") == "yes",
    }
    result = await compensation.compensate(request, effect_id, _given(body), words=_in_ui_words)
    done = result["effect"]
    how = "taken up again and finished" if result["resumed"] else "ran"
    message = (
        f"Effect {result['compensates']} compensated: {done['effect_type']} {how}, "
        f"effect {done['effect_id']} is {done['status']}."
    )
    return await _to_run(request, done["run_id"], message)


routes = [
    Route("/ui/effects/{effect_id}/compensate", guarded(compensate_page), methods=["GET"]),
    Route("/ui/effects/{effect_id}/compensate", command(do_compensate), methods=["POST"]),
]

__all__ = ["routes"]
