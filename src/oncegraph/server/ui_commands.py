"""The operator UI's run commands: Continue (with an answer, or an approval's
decisions), Resolve effect, Create replay, Create branch with changes, Check at
recipient and Abandon. Each reads its form and calls :mod:`oncegraph.server.operations`,
as the API does, then goes back to the run's page with what happened
(:func:`oncegraph.server.ui_frame._to_run`). Their routes: :mod:`oncegraph.server.ui`.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from oncegraph.runs.masking import MASK
from oncegraph.server import operations
from oncegraph.server.auth import Principal
from oncegraph.server.context import graph, visible_run
from oncegraph.server.problems import bad_request
from oncegraph.server.ui_frame import _given, _to_run, render
from oncegraph.server.wording import for_operator


def _outcome_text(result: dict[str, Any], done: str) -> str:
    error = result.get("error")
    status = result["run"]["status"]
    if error:
        return f"{done}; the run is {status}: {for_operator(error['message'])}"
    return f"{done}; the run is {status}."


async def do_continue(request: Request, me: Principal, form: dict[str, str]) -> Response:
    run_id = request.path_params["run_id"]
    body: dict[str, Any] = {"reason": form.get("reason") or None}
    kind = form.get("answer_kind", "json")
    if kind == "approval":
        body["answer"] = await _decisions(request, me, run_id, form)
    elif kind == "text":
        body["answer"] = form.get("answer", "")
    elif "answer" in form:
        if not form["answer"].strip():
            raise bad_request(
                "write the answer to the question (JSON: a string in double quotes, a number, "
                "true/false, a list or an object), or choose 'text' to send plain text; "
                "nothing was done"
            )
        body["answer"] = _json_field(form["answer"], "answer")
    result = await operations.continue_run(request, run_id, body)
    return await _to_run(request, run_id, _outcome_text(result, "Continued"))


async def do_resolve(request: Request, me: Principal, form: dict[str, str]) -> Response:
    run_id, effect_id = request.path_params["run_id"], request.path_params["effect_id"]
    body: dict[str, Any] = {"outcome": form.get("outcome"), "reason": form.get("reason")}
    if form.get("provider_reference"):
        body["provider_reference"] = form["provider_reference"]
    if form.get("result"):
        body["result"] = _json_field(form["result"], "result")
    result = await operations.resolve(request, run_id, effect_id, _given(body))
    effect = result["effect"]
    done = f"Effect {effect['effect_id']} resolved: {effect['status']}."
    return await _to_run(request, run_id, done)


async def do_replay(request: Request, me: Principal, form: dict[str, str]) -> Response:
    run_id = request.path_params["run_id"]
    body = {"mode": form.get("mode", "evidence"), "reason": form.get("reason")}
    result = await operations.replay(request, run_id, _given(body))
    return await _to_run(
        request, result["run"]["run_id"], _outcome_text(result, f"Replay ({body['mode']}) created")
    )


async def do_branch(request: Request, me: Principal, form: dict[str, str]) -> Response:
    run_id = request.path_params["run_id"]
    body: dict[str, Any] = {
        "patch": _json_field(form.get("patch", ""), "patch"),
        "reason": form.get("reason"),
    }
    if form.get("checkpoint_id"):
        body["checkpoint_id"] = form["checkpoint_id"]
    result = await operations.branch(request, run_id, _given(body))
    return await render(request, me, "branch.html", 201, parent_run_id=run_id, result=result)


async def do_check(request: Request, me: Principal, form: dict[str, str]) -> Response:
    run_id, effect_id = request.path_params["run_id"], request.path_params["effect_id"]
    result = await operations.check(request, run_id, effect_id, {"reason": form.get("reason")})
    effect = result["effect"]
    return await _to_run(
        request,
        run_id,
        f"Asked the recipient about effect {effect['effect_id']}: {result['verdict']}; "
        f"the effect is {effect['status']}.",
    )


async def do_abandon(request: Request, me: Principal, form: dict[str, str]) -> Response:
    run_id = request.path_params["run_id"]
    result = await operations.abandon(request, run_id, _given({"reason": form.get("reason")}))
    return await _to_run(request, run_id, f"Abandoned; the run is {result['run']['status']}.")


async def _decisions(
    request: Request, me: Principal, run_id: str, form: dict[str, str]
) -> dict[str, Any]:
    """The approval form as the agent's answer: one decision per call asked about, in
    order, with the operator as the approver. An edit's masked arguments (shown as
    ``***``) keep the values the model proposed: a page never sends a mask as a value."""
    run = await visible_run(request, me, run_id)
    snap = await graph(request).aget_state({"thread_id": run.thread_id})
    asked = [i for i in snap.interrupts if isinstance(getattr(i, "value", None), dict)]
    requests = asked[0].value.get("action_requests") if len(asked) == 1 else None
    if not isinstance(requests, list):
        raise bad_request(
            "this run is no longer asking for an approval (it may have been answered "
            "meanwhile); reload the page to see what it asks now. Nothing was done."
        )
    decisions: list[dict[str, Any]] = []
    for n, asked_call in enumerate(requests):
        choice = form.get(f"decision_{n}")
        if choice == "approve":
            decisions.append({"type": "approve"})
        elif choice == "reject":
            message = (form.get(f"message_{n}") or "").strip()
            decisions.append({"type": "reject", "message": message or "rejected by an operator"})
        elif choice == "edit":
            edited = _json_field(form.get(f"args_{n}", ""), f"the arguments of call {n + 1}")
            if not isinstance(edited, dict):
                raise bad_request(f"the arguments of call {n + 1} must be a JSON object")
            proposed = asked_call.get("args") or {}
            args = {
                k: (proposed[k] if v == MASK and k in proposed else v) for k, v in edited.items()
            }
            name = asked_call.get("name")
            decisions.append({"type": "edit", "edited_action": {"name": name, "args": args}})
        else:
            raise bad_request(
                f"choose Approve, Edit or Reject for call {n + 1} ({asked_call.get('name')}); "
                "nothing was done"
            )
    answer: dict[str, Any] = {"decisions": decisions, "approver": me.actor}
    if form.get("request_hash"):  # the request the page showed: a changed one is refused
        answer["request_hash"] = form["request_hash"]
    return answer


def _json_field(text: str, name: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise bad_request(f"{name} is not valid JSON: {exc}") from None


__all__ = ["do_abandon", "do_branch", "do_check", "do_continue", "do_replay", "do_resolve"]
