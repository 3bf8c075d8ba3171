"""The operator web UI: server-rendered pages over the same run service as the API.

The key is entered once on ``/ui/login`` and kept in an HTTP-only, same-site cookie.
Only the UI's own pages can drive it (:mod:`oncegraph.server.forms`): every form carries
a token bound to the login, and every state-changing request must bring it back from one
of the server's own origins, or it is refused before anything is read or done. No link
or message on a page comes from the request: the message after a command travels in a
signed cookie (:mod:`oncegraph.server.flash`), and the error page links back into the UI.
Commands are kept apart, never one "Retry" button, and each is shown only to a role that
may use it (the API refuses it anyway): **Continue** (a paused, failed, parked or
interrupted run), **Resolve effect** (done / not done, with a reason), **Check at
recipient** (the tool's probe or reconcile hook), **Create replay**
(mode chooser, evidence by default), **Create branch with changes** (a preview of the
patch, then the service's diff; a reason is required) and **Redeliver effect** (admin; a
preview page shows recipient, payload, effect id, last attempt status and dedup method,
and asks for confirmation and a reason). Every form posts to ``/ui/...`` routes that call
:mod:`oncegraph.server.operations`, as the API does.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import jinja2
import markupsafe
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from oncegraph.errors import OnceGraphError
from oncegraph.graph.constants import END, START
from oncegraph.runs.commands import tools_of
from oncegraph.runs.lifecycle import FINAL_STATUSES
from oncegraph.runs.masking import MASK
from oncegraph.runs.signing import UI_FORMS
from oncegraph.server import bodies, compensation, flash, forms, graphsvg, operations
from oncegraph.server.api import RUN_STATUSES, STATUS_ORDER
from oncegraph.server.auth import COOKIE, Principal, Role
from oncegraph.server.compensation import compensable
from oncegraph.server.context import (
    caller,
    children_of,
    graph,
    history,
    holders,
    key_of,
    masked_message,
    served,
    shown,
    visible_run,
    visible_runs,
)
from oncegraph.server.database_app import UNAVAILABLE
from oncegraph.server.diff import state_diff
from oncegraph.server.idempotency import once, with_body
from oncegraph.server.problems import ApiError, bad_request, from_exception
from oncegraph.server.wording import for_operator
from oncegraph.storage.records import EffectClass, RunStatus, now

TEMPLATES = Path(__file__).parent / "templates"
CONTINUABLE = {RunStatus.PAUSED, RunStatus.FAILED, RunStatus.NEEDS_REVIEW, RunStatus.INTERRUPTED}
UNCERTAIN = {"pending", "accepted"}
# Effects a redelivery can make sense for: commands sent to a recipient. A read or a
# model call is done again by a replay or a Continue, never "redelivered".
SENT = {str(EffectClass.WRITE), str(EffectClass.IRREVERSIBLE)}
RUNS_PAGE = 200  # runs on one page of the runs list; "Older runs" goes on after its last

_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(TEMPLATES),
    autoescape=jinja2.select_autoescape(("html",)),
    undefined=jinja2.StrictUndefined,
)


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=repr)


def _when(ts: Any) -> str:
    import datetime

    if not isinstance(ts, (int, float)):
        return ""
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")


_env.filters["pretty"] = _pretty
_env.filters["words"] = lambda text: for_operator(text) if isinstance(text, str) else text
# Each form's own idempotency key, made per page: a form posted twice (a double click, a
# resend after a lost answer) acts once (oncegraph.server.idempotency).
_env.globals["request_key"] = lambda: secrets.token_urlsafe(18)
_env.filters["when"] = _when
_env.filters["q"] = lambda s: quote(str(s), safe="")


def page(name: str, http_status: int = 200, /, **values: Any) -> HTMLResponse:
    values.setdefault("csrf", "")
    return HTMLResponse(_env.get_template(name).render(**values), status_code=http_status)


async def _ui_key(request: Request) -> bytes:
    """The key of the UI's form tokens and flash messages (the same in every replica)."""
    return await served(request).graph.service.signing_key(UI_FORMS)


async def render(
    request: Request, me: Principal, name: str, http_status: int = 200, /, **values: Any
) -> HTMLResponse:
    """A page for a logged-in ``me``: its forms carry the login's token."""
    token = forms.token(await _ui_key(request), key_of(request, cookie=True) or "")
    values.setdefault("database_only", not served(request).has_code)
    values.setdefault("can_compensate", me.can(compensation.role(request)))
    return page(name, http_status, me=me, csrf=token, **values)


def _ui(request: Request) -> None:
    request.scope["oncegraph_ui"] = True


def _who(request: Request) -> Principal | None:
    try:
        return caller(request, cookie=True)
    except ApiError:
        return None


def _back(request: Request) -> str:
    """Where an error page links back to: the run's page, else the runs list; never a
    link the request brought (a ``Referer`` can be any site)."""
    run_id = request.path_params.get("run_id")
    return f"/ui/runs/{quote(str(run_id), safe='')}" if run_id else "/ui/runs"


def _own_origin(request: Request) -> bool:
    """Did the request come from one of this server's pages' origins?"""
    allowed: tuple[str, ...] = request.app.state.origins
    return forms.same_origin(request.headers, str(request.base_url), allowed)


FOREIGN = (
    "This request did not come from a page of this server, so nothing was done. If you "
    "sent it, open the page from this server, reload it and submit the form again."
)
STALE_FORM = (
    "This form is not one this server gave to your login (the page may be older than "
    "your login), so nothing was done. Reload the page and submit the form again."
)


async def _error_page(request: Request, me: Principal | None, exc: Exception) -> Response:
    api = from_exception(exc)
    assert api is not None
    values = {
        "status": api.status,
        "code": api.code,
        "message": for_operator(await masked_message(request, api.message)),
        "back": _back(request),
    }
    if me is None:
        return page("error.html", api.status, me=None, **values)
    return await render(request, me, "error.html", api.status, **values)


def guarded(handler: Callable[[Request, Principal], Awaitable[Response]]) -> Any:
    """A UI page (GET): logged in or sent to the login page; errors as an error page."""

    async def wrapped(request: Request) -> Response:
        _ui(request)
        principal = _who(request)
        if principal is None:
            return RedirectResponse("/ui/login?" + urlencode({"next": request.url.path}), 303)
        try:
            return await handler(request, principal)
        except (ApiError, OnceGraphError) as exc:
            return await _error_page(request, principal, exc)

    wrapped.__name__ = handler.__name__
    return wrapped


def command(
    handler: Callable[[Request, Principal, dict[str, str]], Awaitable[Response]],
    *,
    binds_run: bool = False,
) -> Any:
    """A UI command (POST): logged in, from one of the server's origins (checked before
    the body is read), with the login's form token (checked before the command is);
    else refused with a page that says to reload and submit again, nothing done. A
    form's own idempotency key (its hidden field, one per form per page) makes it act
    once however often it is posted (:func:`oncegraph.server.idempotency.once`);
    ``binds_run``: the command starts a run, bound to that key before it starts."""

    async def checked(request: Request, principal: Principal) -> Response:
        if not _own_origin(request):
            raise ApiError(403, "foreign_origin", FOREIGN)
        raw = await bodies.read(request)
        form = bodies.parse_form(raw)
        sent = form.pop(forms.FIELD, None)
        if not forms.token_ok(await _ui_key(request), key_of(request, cookie=True), sent):
            raise ApiError(403, "form_token", STALE_FORM)

        async def act(again: Request) -> Response:
            return await handler(again, principal, form)

        return await once(with_body(request, raw), principal, act, binds_run=binds_run, form=True)

    checked.__name__ = handler.__name__
    return guarded(checked)  # logged in, errors as an error page, as a page is


# -- login ----------------------------------------------------------------------------------


async def login_page(request: Request) -> Response:
    return page("login.html", me=None, error=None, next=request.query_params.get("next", ""))


async def login(request: Request) -> Response:
    if not _own_origin(request):  # a login forced by another page: nothing read or set
        return page(
            "login.html",
            403,
            me=None,
            error="This login did not come from this server's own login page. Reload the "
            "page and log in again.",
            next="/ui/runs",
        )
    form = await bodies.form(request)
    key = form.get("key", "").strip()
    target = form.get("next") or "/ui/runs"
    if not target.startswith("/ui/"):
        target = "/ui/runs"
    if served(request).keys.find(key) is None:
        return page("login.html", 401, me=None, error="That key is not valid.", next=target)
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(
        COOKIE,
        key,
        httponly=True,
        samesite="strict",
        path="/",
        secure=request.url.scheme == "https",
    )
    return response


async def logout(request: Request) -> Response:
    me = _who(request)
    if me is not None:  # logging a person out is a command too
        refused = None
        if not _own_origin(request):
            refused = ApiError(403, "foreign_origin", FOREIGN)
        else:
            form = await bodies.form(request)
            sent = form.get(forms.FIELD)
            if not forms.token_ok(await _ui_key(request), key_of(request, cookie=True), sent):
                refused = ApiError(403, "form_token", STALE_FORM)
        if refused is not None:
            return await _error_page(request, me, refused)
    response = RedirectResponse("/ui/login", status_code=303)
    response.delete_cookie(COOKIE, path="/")
    response.delete_cookie(flash.COOKIE, path="/ui/")
    return response


# -- pages ----------------------------------------------------------------------------------


async def runs_page(request: Request, me: Principal) -> Response:
    status = request.query_params.get("status") or None
    if status is not None and status not in RUN_STATUSES:
        raise bad_request(f"unknown status {status!r}; use one of {', '.join(RUN_STATUSES)}")
    after = request.query_params.get("before") or None
    runs = await visible_runs(
        request,
        me,
        status=[status] if status else None,
        limit=RUNS_PAGE,
        before=await visible_run(request, me, after) if after else None,
    )
    older = None
    if len(runs) == RUNS_PAGE:  # a full page: the next one goes on after its last run
        older = urlencode({**({"status": status} if status else {}), "before": runs[-1].run_id})
    runs.sort(key=lambda r: (STATUS_ORDER.get(r.status, 9), -r.created_at))
    return await render(
        request,
        me,
        "runs.html",
        runs=(await shown(request, me)).runs(runs, await holders(request, runs)),
        statuses=RUN_STATUSES,
        status=status,
        older=older,
    )


async def run_page(request: Request, me: Principal) -> Response:
    run = await visible_run(request, me, request.path_params["run_id"])
    app = graph(request)
    view = await shown(request, me)
    code = served(request).has_code  # else the state is not readable: no graph decodes it
    found = (
        await history(request, {"thread_id": run.thread_id, "run_id": run.run_id}) if code else []
    )
    snaps = [view.snapshot(s) for s in reversed(found)]  # oldest first
    effects = [view.effect(e) for e in await app.aeffects(run_id=run.run_id)]
    tools = tools_of(app.service.spec)
    for e in effects:
        e["commands"] = _effect_commands(e, tools.get(e["effect_type"]))
    audit = [view.audit(a) for a in await app.aaudit(run_id=run.run_id, limit=50)]
    children = view.runs(await children_of(request, me, run.run_id))
    made_by = _made_by(audit, run.parent_run_id)
    timeline: list[dict[str, Any]] = []
    previous: dict[str, Any] = {}
    for n, snap in enumerate(snaps):
        changes = state_diff(previous, snap["values"]) if n else []
        timeline.append(
            {
                "kind": "checkpoint",
                "at": snap["created_at"] or 0,
                "n": n,
                "snap": snap,
                "diff": changes,
            }
        )
        previous = snap["values"]
    for e in effects:
        timeline.append({"kind": "effect", "at": e["created_at"], "effect": e})
    timeline.sort(key=lambda item: (item["at"], 0 if item["kind"] == "checkpoint" else 1))
    latest = snaps[-1]["values"] if snaps else {}
    held = (await holders(request, [run])).get(run.run_id)
    shown_run = view.run(run, held)
    crashed = held is not None and held.crashed
    questions = (
        [_question(i) for i in snaps[-1]["interrupts"]]
        if snaps and run.status is RunStatus.INTERRUPTED
        else []
    )
    sealed = request.cookies.get(flash.COOKIE)
    # the graph is the app's code: a database served alone has no picture of it
    picture = ""
    if code:
        picture = graphsvg.svg(app.get_graph(), _current(run, snaps, questions, crashed))
    message = flash.unseal(
        await _ui_key(request), key_of(request, cookie=True), run.run_id, sealed, at=now()
    )
    shown_page = await render(
        request,
        me,
        "run.html",
        run=shown_run,
        crashed=crashed,
        questions=questions,
        approval=questions[0]["approval"] if len(questions) == 1 else None,
        approval_hash=questions[0]["request_hash"] if len(questions) == 1 else None,
        timeline=timeline,
        effects=effects,
        audit=audit,
        children=children,
        made_by=made_by,
        checkpoints=[
            s
            for s in snaps
            if s["checkpoint_id"] and not str(s["checkpoint_id"]).endswith(".input")
        ],
        latest=latest,
        can_operate=me.can(Role.OPERATOR),
        has_code=code,
        unavailable=UNAVAILABLE,
        can_admin=me.can(Role.ADMIN),
        continuable=run.status in CONTINUABLE or crashed,
        interrupted=run.status is RunStatus.INTERRUPTED,
        unfinished=run.status not in FINAL_STATUSES,
        uncertain=UNCERTAIN,
        modes=operations.REPLAY_MODES,
        message=message,
        picture=markupsafe.Markup(picture),  # every name in it is escaped
        live=run.status in (RunStatus.RUNNING, RunStatus.QUEUED) and not crashed,
    )
    if sealed is not None:  # shown once (or not at all: not ours, another run's, too old)
        shown_page.delete_cookie(flash.COOKIE, path="/ui/")
    return shown_page


def _current(
    run: Any, snaps: list[dict[str, Any]], questions: list[dict[str, Any]], crashed: bool
) -> list[str]:
    """Where the run is in its graph: the node(s) it waits in or runs next; END once it
    completed."""
    if run.status is RunStatus.COMPLETED:
        return [END]
    asked = [q["node"] for q in questions if q.get("node")]
    if asked:
        return asked
    return list(snaps[-1]["next"]) if snaps else [START]


def _effect_commands(effect: dict[str, Any], tool: Any) -> dict[str, bool]:
    """Which commands apply to ``effect``: Resolve for an uncertain one; Check where its
    tool can ask the recipient (``reconcile`` for pending, ``probe`` for accepted);
    Redeliver for a command sent to a recipient by a tool of this graph."""
    status = effect["status"]
    hook = "probe" if status == "accepted" else "reconcile"
    return {
        "resolve": status in UNCERTAIN,
        "check": status in UNCERTAIN and getattr(tool, hook, None) is not None,
        "redeliver": tool is not None and effect["effect_class"] in SENT,
        "compensate": compensable(effect, tool),
    }


def _question(shown: Any) -> dict[str, Any]:
    """An open interrupt as the page asks it: its node, its value, and, for an agent's
    approval request, the calls to decide on."""
    item = shown if isinstance(shown, dict) else {"value": shown}
    value = item.get("value")
    approval = None
    if isinstance(value, dict) and isinstance(value.get("action_requests"), list):
        configs = value.get("review_configs") or []
        allowed = {c.get("action_name"): c.get("allowed_decisions") for c in configs}
        approval = [
            {
                "n": n,
                "name": r.get("name"),
                "description": r.get("description"),
                "args": r.get("masked_args") or r.get("args") or {},
                "effect_id": r.get("effect_id"),
                "recipient": r.get("recipient"),
                "request_hash": r.get("request_hash"),
                "allowed": allowed.get(r.get("name")) or ["approve", "edit", "reject"],
            }
            for n, r in enumerate(value["action_requests"])
        ]
    text = value.get("question") if isinstance(value, dict) else None
    return {
        "id": item.get("id"),
        "node": item.get("node"),
        "value": value,
        "text": text if isinstance(text, str) else (value if isinstance(value, str) else None),
        "error": value.get("error") if isinstance(value, dict) else None,
        "approval": approval,
        "request_hash": value.get("request_hash") if isinstance(value, dict) else None,
    }


# -- commands -------------------------------------------------------------------------------


async def _to_run(request: Request, run_id: str, message: str) -> Response:
    """To the run's page, which shows ``message`` once (a signed cookie, not the URL)."""
    response = RedirectResponse(f"/ui/runs/{quote(run_id, safe='')}", status_code=303)
    sealed = flash.seal(
        await _ui_key(request), key_of(request, cookie=True) or "", run_id, message, at=now()
    )
    response.set_cookie(
        flash.COOKIE,
        sealed,
        max_age=int(flash.TTL),
        path="/ui/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


def _given(body: dict[str, Any]) -> dict[str, Any]:
    """A command's body from a form: a field the form did not send is left out (a
    required one is then named as missing, not as the wrong type)."""
    return {name: value for name, value in body.items() if value is not None}


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


async def _ui_home(request: Request) -> Response:
    return RedirectResponse("/ui/runs", status_code=303)


routes = [
    Route("/ui", _ui_home, methods=["GET"]),
    Route("/ui/login", login_page, methods=["GET"]),
    Route("/ui/login", login, methods=["POST"]),
    Route("/ui/logout", logout, methods=["POST"]),
    Route("/ui/runs", guarded(runs_page), methods=["GET"]),
    Route("/ui/runs/{run_id}", guarded(run_page), methods=["GET"]),
    Route("/ui/runs/{run_id}/continue", command(do_continue), methods=["POST"]),
    Route("/ui/runs/{run_id}/replay", command(do_replay, binds_run=True), methods=["POST"]),
    Route("/ui/runs/{run_id}/branch", command(do_branch, binds_run=True), methods=["POST"]),
    Route("/ui/runs/{run_id}/abandon", command(do_abandon), methods=["POST"]),
    Route("/ui/runs/{run_id}/effects/{effect_id}/resolve", command(do_resolve), methods=["POST"]),
    Route("/ui/runs/{run_id}/effects/{effect_id}/check", command(do_check), methods=["POST"]),
]  # Redeliver effect's pages: oncegraph.server.ui_redeliver


def _made_by(audit: list[dict[str, Any]], parent_run_id: str | None) -> str | None:
    """Who made this run from its parent (a replay, branch or time travel), from the
    run's own audit record of it."""
    if parent_run_id is None:
        return None
    for record in reversed(audit):  # newest first: its first record is the oldest
        details = record.get("details")
        if isinstance(details, Mapping) and details.get("parent_run_id") == parent_run_id:
            return str(record["actor"])
    return None

__all__ = ["routes"]
