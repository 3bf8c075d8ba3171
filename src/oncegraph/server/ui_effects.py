"""The effect log in the operator UI, and a run page's live updates.

* ``/ui/effects``: every effect of the app's runs (a tenant key: its tenant's), newest
  first, filtered by status (``needs_review`` too), tool, recipient, tenant and time,
  with the counts of effects that need review and that are pending on top. It reads
  through the run service (:meth:`~oncegraph.runs.service.RunService.effect_log`), so
  scope, tenant and masking apply as on every other page.
* ``/ui/runs/{run}/effects/{effect}``: one effect's own page: its attempts, masked payload
  and result, what the recipient answered when asked, its audit records, and only the
  commands that apply to it (the run page's effect cards decide the same way).
* ``/ui/runs/{run}/events``: the run's events (:mod:`oncegraph.server.sse`) for the run
  page's own script, with the login cookie: an unfinished run's page follows them and
  refreshes its live parts, no reload, no build step.
"""

from __future__ import annotations

import datetime
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from oncegraph.errors import ConfigError
from oncegraph.runs.commands import tools_of
from oncegraph.runs.effectlog import NEEDS_REVIEW, STATUSES, EffectQuery
from oncegraph.server import compensation, operations, sse
from oncegraph.server.auth import Principal, Role
from oncegraph.server.context import graph, served, shown, visible_run
from oncegraph.server.problems import ApiError, bad_request
from oncegraph.server.ui import UNCERTAIN, _effect_commands
from oncegraph.server.ui_frame import _ui, _who, guarded, render
from oncegraph.storage.records import AttemptOutcome

LOG_PAGE = 200  # effects on one page of the effect log
WITHIN = {"1h": 3600.0, "24h": 86400.0, "7d": 7 * 86400.0}
ANSWERS = {
    str(AttemptOutcome.RECONCILED),
    str(AttemptOutcome.CHECKED_DONE),
    str(AttemptOutcome.CHECKED_ACCEPTED),
    str(AttemptOutcome.CHECKED_NOT_DONE),
    str(AttemptOutcome.CHECKED_UNKNOWN),
}


def _moment(text: str, name: str) -> float:
    """A time from a filter field: ``YYYY-MM-DD`` or ``YYYY-MM-DDTHH:MM[:SS]``, in UTC."""
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise bad_request(
            f"{name} {text!r} is not a date or time; write it as 2026-12-01 or "
            "2026-12-01T09:30 (UTC)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()


def _query(request: Request, me: Principal) -> tuple[EffectQuery, dict[str, str]]:
    """The effect log's filters from the page's query string (and the form's values)."""
    q = request.query_params
    form = {
        k: (q.get(k) or "").strip()
        for k in ("status", "tool", "recipient", "tenant", "since", "until", "within")
    }
    if form["status"] and form["status"] not in STATUSES:
        raise bad_request(f"unknown status {form['status']!r}; use one of {', '.join(STATUSES)}")
    if form["within"] and form["within"] not in WITHIN:
        raise bad_request(f"unknown time range {form['within']!r}; use 1h, 24h or 7d")
    since = _moment(form["since"], "since") if form["since"] else None
    until = _moment(form["until"], "until") if form["until"] else None
    if form["within"]:
        since = max(
            since or 0.0, datetime.datetime.now(datetime.UTC).timestamp() - WITHIN[form["within"]]
        )
    tenant = form["tenant"] or None
    if me.tenant is not None:  # a tenant's key lists its own tenant's only
        tenant = None
    try:
        query = EffectQuery(
            statuses=(form["status"],) if form["status"] else None,
            tool=form["tool"] or None,
            recipient=form["recipient"] or None,
            since=since,
            until=until,
            tenant=tenant,
            limit=LOG_PAGE,
        )
    except ConfigError as exc:
        raise bad_request(str(exc)) from None
    return query, form


async def effects_page(request: Request, me: Principal) -> Response:
    query, form = _query(request, me)
    log = await graph(request).service.effect_log(query)
    view = await shown(request, me, *{e.effect.thread_id for e in log.effects})
    rows = []
    for item in log.effects:
        row = view.effect(item.effect)
        row["run_status"] = item.run_status
        row["needs_review"] = item.needs_review
        rows.append(row)
    kept = {k: v for k, v in form.items() if v and k != "status"}
    return await render(
        request,
        me,
        "effects.html",
        effects=rows,
        log=log,
        form=form,
        statuses=STATUSES,
        within=tuple(WITHIN),
        app_id=_app_id(request),
        tools=sorted(tools_of(getattr(graph(request).service, "spec", None))),
        tenant_bound=me.tenant is not None,
        needs_review_link=urlencode({**kept, "status": NEEDS_REVIEW}),
        pending_link=urlencode({**kept, "status": "pending"}),
        limit=LOG_PAGE,
    )


def _app_id(request: Request) -> str | None:
    scope = graph(request).service.scope
    return scope.app_id if scope is not None else None


async def effect_page(request: Request, me: Principal) -> Response:
    run_id, effect_id = request.path_params["run_id"], request.path_params["effect_id"]
    record = await operations.effect_of(request, me, run_id, effect_id)
    run = await visible_run(request, me, run_id)
    app = graph(request)
    view = await shown(request, me)
    effect = view.effect(record)
    tool = tools_of(getattr(app.service, "spec", None)).get(record.effect_type)
    effect["commands"] = _effect_commands(effect, tool)
    audit = [view.audit(a) for a in await app.aaudit(target_id=record.effect_id, limit=100)]
    answers = [a for a in effect["attempts"] if (a or {}).get("outcome") in ANSWERS]
    asked = [a for a in audit if a["action"] in ("check_effect", "check", "reconcile")]
    return await render(
        request,
        me,
        "effect.html",
        run=view.run(run),
        effect=effect,
        audit=audit,
        answers=answers,
        asked=asked,
        needs_review=str(run.status) == NEEDS_REVIEW and record.status in UNCERTAIN,
        uncertain=UNCERTAIN,
        can_operate=me.can(Role.OPERATOR),
        can_admin=me.can(Role.ADMIN),
        hooks={
            "reconcile": getattr(tool, "reconcile", None) is not None,
            "probe": getattr(tool, "probe", None) is not None,
        },
        known_tool=tool is not None,
        links=await compensation.links_of(request, me, record),
    )


async def run_events(request: Request) -> Response:
    """The run's events for its page's script (login cookie; no redirect: a stream)."""
    _ui(request)
    me = _who(request)
    if me is None:
        return Response("log in first", status_code=401, media_type="text/plain")
    try:
        run = await visible_run(request, me, request.path_params["run_id"])
    except ApiError as exc:
        return Response(exc.message, status_code=exc.status, media_type="text/plain")
    last = request.headers.get("last-event-id")
    view = await shown(request, me)
    hub = served(request).hub
    stream = hub.get(run.run_id)
    if stream is None and not served(request).has_code:
        return Response(status_code=204)  # checkpoints need the graph: no stream (204 ends it)
    return sse.run_events(stream, lambda: graph(request), run, last, view, keepalive=hub.keepalive)


routes = [
    Route("/ui/effects", guarded(effects_page), methods=["GET"]),
    Route("/ui/runs/{run_id}/events", run_events, methods=["GET"]),
    Route("/ui/runs/{run_id}/effects/{effect_id}", guarded(effect_page), methods=["GET"]),
]

__all__ = ["routes"]
