"""The REST API: reads (``GET``) for every viewer, commands (``POST``) by role.

Every handler goes through the run service (the compiled app's methods) and
:mod:`oncegraph.server.context` for who may see what; the commands themselves live in
:mod:`oncegraph.server.operations`, shared with the web UI. See
:mod:`oncegraph.server.openapi` for the document that describes these routes.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from oncegraph import __version__ as _version
from oncegraph.server import agui, bodies, compensation, idempotency, operations, sse, tenancy
from oncegraph.server.auth import Principal, Role
from oncegraph.server.context import (
    SCAN,
    caller,
    children_of,
    code_needed,
    graph,
    history,
    holders,
    need,
    served,
    shown,
    visible_run,
    visible_runs,
    visible_thread,
)
from oncegraph.server.offloop import json_page
from oncegraph.server.problems import ApiError, bad_request, not_found
from oncegraph.storage.records import EffectStatus, RunRecord, RunStatus

# Where a status sorts in a listing: what needs a person first.
STATUS_ORDER = {
    RunStatus.NEEDS_REVIEW: 0,
    RunStatus.FAILED: 1,
    RunStatus.INTERRUPTED: 2,
    RunStatus.PAUSED: 3,
    RunStatus.RUNNING: 4,
    RunStatus.QUEUED: 5,
    RunStatus.COMPLETED: 6,
    RunStatus.ABANDONED: 7,
}
RUN_STATUSES = tuple(str(s) for s in STATUS_ORDER)
# How many runs, newest first, the threads list reads at most to find its threads.
THREAD_SCAN = 10 * SCAN
EFFECT_STATUSES = tuple(str(s) for s in EffectStatus)


def statuses(request: Request, allowed: tuple[str, ...]) -> list[str] | None:
    raw = request.query_params.getlist("status")
    wanted = [s for item in raw for s in item.split(",") if s]
    bad = [s for s in wanted if s not in allowed]
    if bad:
        raise bad_request(f"unknown status {bad[0]!r}; use one of {', '.join(allowed)}")
    return wanted or None


def page(request: Request) -> tuple[int, int]:
    """``limit`` (default 500) and ``offset`` of a paged listing (effects)."""
    raw = request.query_params.get("offset", "0")
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 9:
        raise bad_request(f"offset must be a non-negative integer; got {raw!r}")
    return bodies.limit(request, default=500, maximum=5000), int(raw)


# -- reads ----------------------------------------------------------------------------------


async def health(request: Request) -> Response:
    return JSONResponse({"status": "ok", "version": _version, "graph": graph(request).name})


async def me(request: Request) -> Response:
    p = caller(request)
    return JSONResponse({"name": p.name, "role": p.role.label, "tenant": p.tenant})


async def list_runs(request: Request) -> Response:
    """A page of runs, newest first (``before``: the runs after that run, the ``next``
    of the page before), shown needs_review first within the page."""
    p = caller(request)
    thread = request.query_params.get("thread_id")
    thread_id = visible_thread(p, thread) if thread else None
    after = bodies.query_text(request, "before")
    limit = bodies.limit(request)
    runs = await visible_runs(
        request,
        p,
        thread_id=thread_id,
        status=statuses(request, RUN_STATUSES),
        limit=limit,
        before=await visible_run(request, p, after) if after else None,
    )
    following = runs[-1].run_id if len(runs) == limit else None
    runs.sort(key=lambda r: (STATUS_ORDER.get(r.status, 9), -r.created_at))
    view, held = await shown(request, p), await holders(request, runs)
    return await json_page(len(runs), lambda: {"runs": view.runs(runs, held), "next": following})


async def get_run(request: Request) -> Response:
    p = caller(request)
    run = await visible_run(request, p, request.path_params["run_id"])
    view = await shown(request, p)
    parent = None
    if run.parent_run_id:
        try:
            parent = view.run(await visible_run(request, p, run.parent_run_id))
        except ApiError:
            parent = None  # pruned, or another tenant's: shown as its id only
    children = await children_of(request, p, run.run_id)
    return JSONResponse(
        {
            "run": view.run(run, (await holders(request, [run])).get(run.run_id)),
            "lineage": {
                "parent_run_id": run.parent_run_id,
                "parent": parent,
                "children": view.runs(children),
            },
        }
    )


async def run_history(request: Request) -> Response:
    p = caller(request)
    run = await visible_run(request, p, request.path_params["run_id"])
    snaps = await history(
        request, {"thread_id": run.thread_id, "run_id": run.run_id}, limit=bodies.limit(request)
    )
    view = await shown(request, p)
    return await json_page(len(snaps), lambda: {"history": [view.snapshot(s) for s in snaps]})


async def run_effects(request: Request) -> Response:
    p = caller(request)
    run = await visible_run(request, p, request.path_params["run_id"])
    return await _effects_page(request, p, run_id=run.run_id)


async def _effects_page(
    request: Request, p: Principal, *, run_id: str | None = None, thread_id: str | None = None
) -> Response:
    """A page of a run's or a thread's effect records, as ``p`` may see them."""
    limit, offset = page(request)
    view = await (shown(request, p) if thread_id is None else shown(request, p, thread_id))
    found = await graph(request).aeffects(
        run_id=run_id,
        thread_id=thread_id,
        status=statuses(request, EFFECT_STATUSES),
        limit=limit,
        offset=offset,
        masked=not view.unmasked,
    )
    return await json_page(len(found), lambda: {"effects": [view.effect(e) for e in found]})


async def run_effect(request: Request) -> Response:
    p = caller(request)
    record = await operations.effect_of(
        request, p, request.path_params["run_id"], request.path_params["effect_id"]
    )
    effect = (await shown(request, p)).effect(record)
    # the other side of the link each compensation keeps: what compensated this effect
    done_by = await graph(request).acompensations(record.effect_id)
    return JSONResponse({"effect": {**effect, "compensated_by": [e.effect_id for e in done_by]}})


async def run_audit(request: Request) -> Response:
    p = caller(request)
    run = await visible_run(request, p, request.path_params["run_id"])
    found = await graph(request).aaudit(run_id=run.run_id, limit=bodies.limit(request))
    view = await shown(request, p)
    return await json_page(len(found), lambda: {"audit": [view.audit(a) for a in found]})


async def list_threads(request: Request) -> Response:
    """A page of threads by their latest run, newest first, and ``next``: the page's
    last thread's latest run, the next page's ``before`` (null on the last page).

    Runs are read a page at a time, each from where the last ended, until ``limit``
    threads are found (a busy thread's many runs do not hide the others) or
    :data:`THREAD_SCAN` runs were read (then ``next`` is where the read stopped: a page
    may hold fewer threads and not be the last). After ``before``, a thread seen is the
    page's only if it has no run newer than ``before`` (else an earlier page listed it):
    one read of its newest run, from the thread's index."""
    p = caller(request)
    limit = bodies.limit(request)
    after = bodies.query_text(request, "before")
    start = await visible_run(request, p, after) if after else None
    threads: dict[str, Any] = {}
    seen: set[str] = set()
    before = start
    exhausted = False
    for _ in range(THREAD_SCAN // SCAN):
        runs = await visible_runs(request, p, limit=SCAN, before=before)
        exhausted = len(runs) < SCAN
        for r in runs:  # newest first: the first run seen is the thread's latest since
            if r.thread_id in seen:
                continue
            seen.add(r.thread_id)
            if start is not None and not await _latest(request, p, r):
                continue  # the thread has a newer run: an earlier page listed it
            threads[r.thread_id] = {
                "thread_id": r.thread_id,
                "latest_run_id": r.run_id,
                "status": str(r.status),
                "updated_at": r.updated_at,
            }
            if len(threads) == limit:
                break
        if len(threads) >= limit or exhausted:
            break
        before = runs[-1]
    page = list(threads.values())
    following = None
    if len(page) == limit:
        following = page[-1]["latest_run_id"]
    elif not exhausted and before is not None:  # the read's bound: go on where it stopped
        following = before.run_id
    return JSONResponse({"threads": page, "next": following})


async def _latest(request: Request, p: Principal, run: RunRecord) -> bool:
    """Is ``run`` its thread's newest run?"""
    newest = await visible_runs(request, p, thread_id=run.thread_id, limit=1)
    return bool(newest) and newest[0].run_id == run.run_id


async def get_thread(request: Request) -> Response:
    p = caller(request)
    thread_id = visible_thread(p, request.path_params["thread_id"])
    runs = await visible_runs(request, p, thread_id=thread_id, limit=bodies.limit(request))
    if not runs:
        raise not_found(f"no thread {thread_id!r} (it has no runs)")
    return JSONResponse({"thread_id": thread_id, "runs": (await shown(request, p)).runs(runs)})


async def thread_state(request: Request) -> Response:
    p = caller(request)
    thread_id = visible_thread(p, request.path_params["thread_id"])
    checkpoint_id = bodies.query_text(request, "checkpoint_id")
    config = {"thread_id": thread_id}
    if checkpoint_id:
        config["checkpoint_id"] = checkpoint_id
    view = await shown(request, p, thread_id)
    snap = await graph(request).aget_state(config, masked=not view.unmasked)
    return JSONResponse({"state": view.snapshot(snap)})


async def thread_history(request: Request) -> Response:
    p = caller(request)
    thread_id = visible_thread(p, request.path_params["thread_id"])
    snaps = await history(request, {"thread_id": thread_id}, limit=bodies.limit(request))
    view = await shown(request, p, thread_id)
    return await json_page(len(snaps), lambda: {"history": [view.snapshot(s) for s in snaps]})


async def thread_effects(request: Request) -> Response:
    p = caller(request)
    thread_id = visible_thread(p, request.path_params["thread_id"])
    return await _effects_page(request, p, thread_id=thread_id)


async def audit(request: Request) -> Response:
    """A page of the audit log, newest first, and ``next``: the next page's ``before``
    (``<at>,<audit_id>`` of the page's last record: records of the same instant are not
    skipped), null on the last page. ``before`` also takes a time alone (seconds)."""
    p = caller(request)
    thread = bodies.query_text(request, "thread_id")
    run_id = bodies.query_text(request, "run_id")
    before = _audit_position(request.query_params.get("before"))
    limit = bodies.limit(request)
    if run_id:
        await visible_run(request, p, run_id)
    found = await graph(request).aaudit(
        run_id=run_id,
        thread_id=visible_thread(p, thread) if thread else None,
        target_id=bodies.query_text(request, "target_id"),
        before=before,
        limit=limit,
    )
    following = f"{found[-1].at!r},{found[-1].audit_id}" if len(found) == limit else None
    kept = [
        a for a in found if p.tenant is None or (a.thread_id and tenancy.allows(p, a.thread_id))
    ]
    view = await shown(request, p, *{a.thread_id for a in kept if a.thread_id})
    return await json_page(
        len(kept), lambda: {"audit": [view.audit(a) for a in kept], "next": following}
    )


def _audit_position(raw: str | None) -> float | tuple[float, str] | None:
    """``before`` of the audit log: ``<at>`` or ``<at>,<audit_id>`` (a page's ``next``)."""
    if not raw:
        return None
    at, _, audit_id = raw.partition(",")
    try:
        when = float(at)
    except ValueError:
        raise bad_request(
            f"before must be a time in seconds, or a page's next ('<at>,<audit_id>'); got {raw!r}"
        ) from None
    return (when, audit_id) if audit_id else when


# -- commands -------------------------------------------------------------------------------


async def _body(request: Request, role: Role, *, empty_ok: bool = False) -> dict[str, Any]:
    """The command's JSON body, once the caller is known to hold ``role`` (a caller
    without it is refused, whatever the fields say); the command checks its fields
    against its model (:mod:`oncegraph.server.schemas`)."""
    body = await bodies.json_object(request, empty_ok=empty_ok)
    need(request, role)
    return body


async def start_run(request: Request) -> Response:
    body = await _body(request, Role.OPERATOR)
    result = await operations.start(request, request.path_params["thread_id"], body)
    return JSONResponse(result, status_code=200 if "error" in result or body.get("wait") else 202)


async def start_and_stream(request: Request) -> Response:
    body = await _body(request, Role.OPERATOR)
    principal, stream, _ = await operations.launch(request, request.path_params["thread_id"], body)
    hub = served(request).hub
    view = await shown(request, principal, stream.thread_id)
    if stream.run_id is not None and hub.get(stream.run_id) is not stream:
        # a run started by an earlier send of this request, not going on here
        run = await graph(request).aget_run(stream.run_id)
        events = sse.from_checkpoints(
            graph(request), run.run_id, run.thread_id, -1, view, keepalive=hub.keepalive
        )
    else:
        events = sse.from_buffer(stream, 0, view, keepalive=hub.keepalive)
    return StreamingResponse(events, media_type=sse.MEDIA_TYPE, headers=sse.HEADERS)


async def run_events(request: Request) -> Response:
    p = caller(request)
    run = await visible_run(request, p, request.path_params["run_id"])
    last = request.headers.get("last-event-id") or request.query_params.get("last_event_id")
    view = await shown(request, p)
    hub = served(request).hub
    stream = hub.get(run.run_id)
    if stream is None:
        # read from its checkpoints, which only the graph decodes: refused before it starts
        code_needed(request, "stream a run's events (they are read from its checkpoints)")
    return sse.run_events(stream, lambda: graph(request), run, last, view, keepalive=hub.keepalive)


def _command(
    op: Any,
    *names: str,
    role: Role = Role.OPERATOR,
    status: int = 200,
    binds_run: bool = False,
) -> Any:
    async def handler(request: Request) -> Response:
        body = await _body(request, role, empty_ok=True)
        result = await op(request, *(request.path_params[n] for n in names), body)
        return JSONResponse(result, status_code=status)

    handler.__name__ = op.__name__
    return idempotency.api_route(handler, binds_run=binds_run)


# What a GET reads, by path; what a POST commands (each path has one method).
_READS: tuple[tuple[str, Any], ...] = (
    ("/api/health", health),
    ("/api/me", me),
    ("/api/runs", list_runs),
    ("/api/runs/{run_id}", get_run),
    ("/api/runs/{run_id}/history", run_history),
    ("/api/runs/{run_id}/effects", run_effects),
    ("/api/runs/{run_id}/effects/{effect_id}", run_effect),
    ("/api/runs/{run_id}/audit", run_audit),
    ("/api/runs/{run_id}/events", run_events),
    ("/api/threads", list_threads),
    ("/api/threads/{thread_id}", get_thread),
    ("/api/threads/{thread_id}/state", thread_state),
    ("/api/threads/{thread_id}/history", thread_history),
    ("/api/threads/{thread_id}/effects", thread_effects),
    ("/api/audit", audit),
)
_COMMANDS: tuple[tuple[str, Any], ...] = (
    ("/api/runs/{run_id}/continue", _command(operations.continue_run, "run_id")),
    (
        "/api/runs/{run_id}/replay",
        _command(operations.replay, "run_id", status=201, binds_run=True),
    ),
    (
        "/api/runs/{run_id}/branch",
        _command(operations.branch, "run_id", status=201, binds_run=True),
    ),
    ("/api/runs/{run_id}/abandon", _command(operations.abandon, "run_id")),
    (
        "/api/runs/{run_id}/effects/{effect_id}/resolve",
        _command(operations.resolve, "run_id", "effect_id"),
    ),
    (
        "/api/runs/{run_id}/effects/{effect_id}/check",
        _command(operations.check, "run_id", "effect_id"),
    ),
    (
        "/api/runs/{run_id}/effects/{effect_id}/redeliver",
        _command(operations.redeliver, "run_id", "effect_id", role=Role.ADMIN),
    ),
    (
        "/api/threads/{thread_id}/runs",
        idempotency.api_route(start_run, binds_run=True),
    ),
    (
        "/api/threads/{thread_id}/runs/stream",
        idempotency.api_route(start_and_stream, binds_run=True, streams=True),
    ),
    ("/api/agui", idempotency.api_route(agui.run, binds_run=True, streams=True)),
)

routes = [
    *(Route(path, read, methods=["GET"]) for path, read in _READS),
    *(Route(path, command, methods=["POST"]) for path, command in _COMMANDS),
]

routes += compensation.routes  # POST /api/effects/{effect_id}/compensate

__all__ = ["RUN_STATUSES", "STATUS_ORDER", "routes"]
