"""The UI's **Redeliver effect** pages (admin): the preview, then the confirmed send.

The preview asks the recipient first where the tool can (its probe or reconcile hook;
the answer is recorded on the effect), shows the dedup method in words (how long the
recipient keeps the key, how long ago it was sent) and warns when that window has passed
or is unknown: then the send needs the box "Send it although the recipient may have
forgotten the key" ticked, or it is refused and nothing is sent. An effect the
recipient said it has is shown as such, with no send button.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from oncegraph.server import operations
from oncegraph.server.auth import Principal
from oncegraph.server.problems import bad_request
from oncegraph.server.ui_frame import _given, _to_run, command, guarded, render


async def redeliver_page(request: Request, me: Principal) -> Response:
    run_id, effect_id = request.path_params["run_id"], request.path_params["effect_id"]
    new_key = request.query_params.get("new_key") == "1"
    preview = await operations.redeliver(
        request, run_id, effect_id, {"reason": "preview (nothing sent)", "new_key": new_key}
    )
    return await render(
        request, me, "redeliver.html", run_id=run_id, preview=preview["preview"], new_key=new_key
    )


async def do_redeliver(request: Request, me: Principal, form: dict[str, str]) -> Response:
    run_id, effect_id = request.path_params["run_id"], request.path_params["effect_id"]
    if form.get("confirmed") != "yes":
        raise bad_request("tick the confirmation box to redeliver; nothing was sent")
    if not form.get("token"):
        raise bad_request(
            "the confirmation from the preview is missing, so nothing was sent: open "
            "Redeliver effect again and confirm from its page"
        )
    body = {
        "reason": form.get("reason"),
        "new_key": form.get("new_key") == "1",
        "confirm": form.get("token"),
        "past_dedup_window": form.get("past_dedup_window") == "yes",
    }
    result = await operations.redeliver(request, run_id, effect_id, _given(body))
    effect = result["effect"]
    done = f"Effect {effect['effect_id']} redelivered: {effect['status']}."
    return await _to_run(request, run_id, done)


PATH = "/ui/runs/{run_id}/effects/{effect_id}/redeliver"
routes = [
    Route(PATH, guarded(redeliver_page), methods=["GET"]),
    Route(PATH, command(do_redeliver), methods=["POST"]),
]

__all__ = ["routes"]
