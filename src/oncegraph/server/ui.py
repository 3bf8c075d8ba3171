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

Here: the login, the runs list and a run's page, and the routes. The templates, the
page and command wrappers: :mod:`oncegraph.server.ui_frame`; the run commands:
:mod:`oncegraph.server.ui_commands`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

import markupsafe
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from oncegraph.graph.constants import END, START
from oncegraph.runs.commands import tools_of
from oncegraph.runs.lifecycle import FINAL_STATUSES
from oncegraph.server import bodies, flash, forms, graphsvg, operations
from oncegraph.server.api import RUN_STATUSES, STATUS_ORDER
from oncegraph.server.auth import COOKIE, Principal, Role
from oncegraph.server.compensation import compensable
from oncegraph.server.context import (
    children_of,
    graph,
    history,
    holders,
    key_of,
    served,
    shown,
    visible_run,
    visible_runs,
)
from oncegraph.server.database_app import UNAVAILABLE
from oncegraph.server.diff import state_diff
from oncegraph.server.problems import ApiError, bad_request
from oncegraph.server.ui_commands import (
    do_abandon,
    do_branch,
    do_check,
    do_continue,
    do_replay,
    do_resolve,
)
from oncegraph.server.ui_frame import (
    FOREIGN,
    STALE_FORM,
    _error_page,
    _own_origin,
    _ui_key,
    _who,
    command,
    guarded,
    page,
    render,
)
from oncegraph.storage.records import EffectClass, RunStatus, now

CONTINUABLE = {RunStatus.PAUSED, RunStatus.FAILED, RunStatus.NEEDS_REVIEW, RunStatus.INTERRUPTED}
UNCERTAIN = {"pending", "accepted"}
# Effects a redelivery can make sense for: commands sent to a recipient. A read or a
# model call is done again by a replay or a Continue, never "redelivered".
SENT = {str(EffectClass.WRITE), str(EffectClass.IRREVERSIBLE)}
RUNS_PAGE = 200  # runs on one page of the runs list; "Older runs" goes on after its last

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


# -- routes -------------------------------------------------------------------------------


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
