"""The operator commands, once, for the API and the UI: each checks the caller's role and
tenant, checks its input, calls the run service, and returns what happened as JSON.

Refusals (wrong state, bad input, unknown id) raise before anything is written. A command
that RAN a run (Continue, Replay) and whose run then stopped on an error (parked again,
a node failed, evidence missing) is not a refusal: it returns the run with its status
and the error, because the run and its records are what the operator looks at next.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from typing import Any

from starlette.requests import Request

from oncegraph import errors
from oncegraph.graph.io import output_values
from oncegraph.ids import new_run_id
from oncegraph.runs.commands import NO_ANSWER, Redelivered
from oncegraph.runs.launch import Launch
from oncegraph.runs.lifecycle import FINAL_STATUSES
from oncegraph.runs.redelivery import PastDedupWindowError
from oncegraph.server import bodies, idempotency, schemas
from oncegraph.server.auth import Principal, Role
from oncegraph.server.context import (
    children_of,
    code_needed,
    graph,
    need,
    served,
    shown,
    visible_run,
    visible_thread,
)
from oncegraph.server.encode import Shown, jsonable
from oncegraph.server.hub import RUN_OUTCOMES, RunStream, finished, stopped
from oncegraph.server.problems import ApiError, from_exception, not_found
from oncegraph.storage.records import EffectRecord, RunRecord, RunStatus

REPLAY_MODES = ("evidence", "simulation", "live")
CONFIG_KEYS = ("node_timeout", "tool_timeout", "tool_grace", "recursion_limit", "configurable")

# A run that ran and stopped on one of these is an outcome to show, not a refused command.
_RUN_OUTCOMES = RUN_OUTCOMES
# Why a run bound to a request goes on under a retry of it.
RETRIED = "its request was sent again: the process serving it had stopped"


def _outcome(exc: BaseException, view: Shown) -> dict[str, Any]:
    """How a run a command ran stopped, as the caller may read it (masked)."""
    api = from_exception(exc)
    if api is None:  # the node's own exception, raised as the node raised it
        return view.error({"code": "node_failed", "message": f"{type(exc).__name__}: {exc}"})
    return view.error({"code": api.code, "message": api.message})


async def _node_failed(request: Request, run_id: str, exc: BaseException) -> bool:
    """Is ``exc`` a node's own exception that stopped the run ``run_id`` (now failed)? It
    is the outcome of the command that ran the run, not a refusal or a server error."""
    if isinstance(exc, errors.OnceGraphError) or not isinstance(exc, Exception):
        return False
    run = await graph(request).aget_run(run_id)
    return run.status is RunStatus.FAILED


def run_config(start: schemas.StartBody) -> dict[str, Any]:
    """The run settings a start names (only those it names: the others are the app's)."""
    if start.config is None:
        return {}
    return start.config.model_dump(exclude_unset=True)


async def launch(
    request: Request, thread_id: str, body: Mapping[str, Any]
) -> tuple[Principal, RunStream, bool]:
    """Start (or, with ``input: null``, continue through the audited Continue) a run on
    a thread in the background, for the caller; returns once its run id is known.

    A request whose idempotency key is bound to a run that exists already (it was sent
    before) gets that run: followed here if this server runs it, taken over if the
    process that ran it is gone (:meth:`RunHub.resume`), as it is if it stopped."""
    principal = need(request, Role.OPERATOR, cookie=_ui(request))
    code_needed(request, "start a run")
    start = bodies.model(schemas.StartBody, body)
    thread_id = visible_thread(principal, thread_id, acting=True)
    config = run_config(start)
    wait = start.wait
    input = start.input
    hub = served(request).hub
    app = graph(request)
    if input is None:
        if idempotency.retried(request):  # did the first request's Continue end already?
            done = await _continued_since(request, thread_id)
            if done is not None:
                return principal, stopped(done), wait
        reason = "continued by a start with input null"
        configured = "config" in start.model_fields_set
        launch = Launch(principal.actor, reason=reason, configured=configured)
        return principal, await hub.start(thread_id, None, config, app, launch=launch), wait
    bound = idempotency.bound_run(request)
    if bound is not None:
        existing = await stored_run(request, bound)
        if existing is not None:  # sent before: that run, not another
            return principal, await join(request, principal, existing), wait
    key = idempotency.keyed(request)
    launch = Launch(
        principal.actor,
        run_id=bound or new_run_id(),
        request_key=key.record.key if key is not None else None,
    )
    return principal, await hub.start(thread_id, input, config, app, launch=launch), wait


async def join(request: Request, principal: Principal, run: RunRecord) -> RunStream:
    """The stream of ``run``, bound to a request sent again: this server's if it runs it;
    taken over (the audited Continue) if it was left ``running`` by a process that is
    gone; else the run as it stopped. A run a live process holds is ``409``."""
    hub = served(request).hub
    going = hub.going(run.run_id)
    if going is not None:
        return going
    if run.status is not RunStatus.RUNNING:
        return stopped(run)
    try:
        return await hub.resume(run, graph(request), launch=Launch(principal.actor, reason=RETRIED))
    except errors.RunBusyError:
        raise ApiError(
            409,
            idempotency.IN_FLIGHT,
            f"run {run.run_id}, which this request started, is being executed by another "
            "process right now; send the request again in a moment with the same key",
        ) from None
    except errors.NoRunToResumeError:  # it stopped meanwhile
        return stopped(await graph(request).aget_run(run.run_id))


async def stored_run(request: Request, run_id: str) -> RunRecord | None:
    """Run ``run_id`` as the caller may see it, or None if there is none (yet)."""
    try:
        return await graph(request).aget_run(run_id)
    except errors.RunNotFoundError:
        return None


async def _continued_since(request: Request, thread_id: str) -> RunRecord | None:
    """The thread's latest run if it stopped after this (retried) request first came."""
    key = idempotency.keyed(request)
    latest = await graph(request).aruns(thread_id=thread_id, limit=1)
    if key is None or not latest or not finished(latest[0]):
        return None
    run = latest[0]
    return run if run.updated_at >= key.record.created_at else None


async def start(request: Request, thread_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """``POST /api/threads/{thread_id}/runs``: the run, and where its events are."""
    principal, stream, wait = await launch(request, thread_id, body)
    result: dict[str, Any] = {
        "run_id": stream.run_id,
        "thread_id": stream.thread_id,
        "events_url": f"/api/runs/{stream.run_id}/events",
    }
    if wait and stream.task is not None:
        await asyncio.shield(stream.task)
    view = await shown(request, principal, stream.thread_id)
    if wait and stream.task is not None and stream.error is not None:
        result["error"] = _outcome(stream.error, view)
    run = await graph(request).aget_run(str(stream.run_id))
    if wait and stream.task is None and (stopped_on := _stopped_on(run)) is not None:
        result["error"] = view.error(stopped_on)
    result["run"] = view.run(run)
    return result


def _stopped_on(run: RunRecord) -> dict[str, Any] | None:
    """What a run that stopped on an error says (for a run not run by this request)."""
    if run.status is RunStatus.NEEDS_REVIEW:
        return {"code": "needs_review", "message": run.error or "the run needs review"}
    if run.status is RunStatus.FAILED:
        return {"code": "run_failed", "message": run.error or "the run failed"}
    return None


async def continue_run(request: Request, run_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
    principal = need(request, Role.OPERATOR, cookie=_ui(request))
    code_needed(request, "continue a run")
    asked = bodies.model(schemas.ContinueBody, body)
    reason = asked.reason
    run = await visible_run(request, principal, run_id)
    answer = asked.answer if "answer" in asked.model_fields_set else NO_ANSWER
    service = graph(request).service
    out: dict[str, Any] = {}
    if idempotency.retried(request) and _went_on_since(request, run):
        # the first request's Continue ran to its end before its process stopped
        snap = await graph(request).aget_state({"thread_id": run.thread_id})
        out["output"] = output_values(service.graph, dict(snap.values))
    else:
        try:
            result = await service.resume(
                run.run_id, answer=answer, actor=principal.actor, reason=reason
            )
            out["output"] = output_values(service.graph, result.output())
        except _RUN_OUTCOMES as exc:
            out["error"] = exc
        except Exception as exc:
            if not await _node_failed(request, run.run_id, exc):
                raise
            out["error"] = exc
    after = await graph(request).aget_run(run.run_id)
    view = await shown(request, principal)
    if "output" in out:
        return {"run": view.run(after), "output": view.value(out["output"])}
    return {"run": view.run(after), "error": _outcome(out["error"], view)}


def _went_on_since(request: Request, run: RunRecord) -> bool:
    """Did ``run`` stop after this (retried) request first came (so that request's
    command ran)? A run that stopped since and cannot be continued again."""
    key = idempotency.keyed(request)
    return (
        key is not None
        and run.status in FINAL_STATUSES
        and run.updated_at >= key.record.created_at
    )


async def replay(request: Request, run_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
    principal = need(request, Role.OPERATOR, cookie=_ui(request))
    code_needed(request, "replay a run")
    asked = bodies.model(schemas.ReplayBody, body)
    mode, reason, checkpoint_id = asked.mode, asked.reason, asked.checkpoint_id
    allow = asked.allow_irreversible
    parent = await visible_run(request, principal, run_id)
    service = graph(request).service
    started = time.time()
    bound = idempotency.bound_run(request)
    made_before = await stored_run(request, bound) if bound is not None else None
    if made_before is not None:  # sent before: that replay, gone on with if left running
        return await _settled(request, principal, made_before)
    try:
        result = await service.replay(
            parent.run_id,
            checkpoint_id=checkpoint_id or None,
            mode=mode,
            reason=reason,
            actor=principal.actor,
            allow_irreversible=allow,
            new_run_id=bound,
        )
    except Exception as exc:
        made = (
            await stored_run(request, bound)
            if bound is not None
            else await _newest_child(request, principal, parent.run_id, started)
        )
        if made is None or not (
            isinstance(exc, _RUN_OUTCOMES) or await _node_failed(request, made.run_id, exc)
        ):
            raise
        view = await shown(request, principal, made.thread_id)
        return {"run": view.run(made), "error": _outcome(exc, view)}
    run = await graph(request).aget_run(result.run.run_id)
    view = await shown(request, principal, run.thread_id)
    return {
        "run": view.run(run),
        "output": view.value(output_values(service.graph, result.output())),
    }


async def _settled(request: Request, principal: Principal, run: RunRecord) -> dict[str, Any]:
    """A run made by an earlier send of this request, as a replay answers: its state once
    it stopped (going on with it first if its process left it ``running``)."""
    service = graph(request).service
    going = served(request).hub.going(run.run_id)
    if going is not None and going.task is not None:
        await asyncio.shield(going.task)
    elif run.status is RunStatus.RUNNING:
        try:
            await service.resume(run.run_id, actor=principal.actor, reason=RETRIED)
        except _RUN_OUTCOMES:
            pass  # the run's status and error say how it stopped
        except errors.RunBusyError:
            raise ApiError(
                409,
                idempotency.IN_FLIGHT,
                f"run {run.run_id}, which this request made, is being executed by another "
                "process right now; send the request again in a moment with the same key",
            ) from None
        except Exception as exc:
            if not await _node_failed(request, run.run_id, exc):
                raise
    after = await graph(request).aget_run(run.run_id)
    view = await shown(request, principal, after.thread_id)
    stopped_on = _stopped_on(after)
    if stopped_on is not None:
        return {"run": view.run(after), "error": view.error(stopped_on)}
    snap = await graph(request).aget_state({"thread_id": after.thread_id})
    return {
        "run": view.run(after),
        "output": view.value(output_values(service.graph, dict(snap.values))),
    }


async def _newest_child(
    request: Request, principal: Principal, run_id: str, since: float
) -> RunRecord | None:
    made = [r for r in await children_of(request, principal, run_id) if r.created_at >= since - 1]
    return max(made, key=lambda r: r.created_at) if made else None


async def branch(request: Request, run_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
    principal = need(request, Role.OPERATOR, cookie=_ui(request))
    code_needed(request, "branch a run")
    asked = bodies.model(schemas.BranchBody, body)
    patch, reason, checkpoint_id, as_node = (
        asked.patch,
        asked.reason,
        asked.checkpoint_id,
        asked.as_node,
    )
    parent = await visible_run(request, principal, run_id)
    bound = idempotency.bound_run(request)
    made_before = await stored_run(request, bound) if bound is not None else None
    if made_before is not None:  # sent before: that branch, not another
        return await _branched(request, principal, made_before)
    made = await graph(request).service.branch(
        parent.run_id,
        checkpoint_id or None,
        patch=patch,
        reason=reason,
        actor=principal.actor,
        as_node=as_node or None,
        new_run_id=bound,
    )
    view = await shown(request, principal, made.run.thread_id)
    return {
        "run": view.run(made.run),
        "checkpoint_id": made.checkpoint_id,
        "diff": [
            {"channel": c.channel, "before": view.value(c.before), "after": view.value(c.after)}
            for c in made.diff
        ],
    }


async def _branched(request: Request, principal: Principal, run: RunRecord) -> dict[str, Any]:
    """A branch made by an earlier send of this request: the run, its checkpoint, and
    what differs from the state it was made from."""
    view = await shown(request, principal, run.thread_id)
    app = graph(request)
    snap = await app.aget_state({"thread_id": run.thread_id})
    before: dict[str, Any] = {}
    if run.parent_run_id is not None and run.parent_checkpoint_id is not None:
        parent = await app.aget_run(run.parent_run_id)
        config = {"thread_id": parent.thread_id, "checkpoint_id": run.parent_checkpoint_id}
        with contextlib.suppress(errors.RunNotFoundError):
            before = dict((await app.aget_state(config)).values)
    after = dict(snap.values)
    return {
        "run": view.run(run),
        "checkpoint_id": snap.config.get("checkpoint_id"),
        "diff": [
            {"channel": c, "before": view.value(before.get(c)), "after": view.value(after.get(c))}
            for c in sorted(set(before) | set(after))
            if jsonable(before.get(c)) != jsonable(after.get(c))
        ],
    }


async def abandon(request: Request, run_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
    principal = need(request, Role.OPERATOR, cookie=_ui(request))
    reason = bodies.model(schemas.AbandonBody, body).reason
    run = await visible_run(request, principal, run_id)
    if idempotency.retried(request) and _went_on_since(request, run):
        return {"run": (await shown(request, principal)).run(run)}  # the first one's abandon
    app = graph(request)
    latest = await app.aruns(thread_id=run.thread_id, limit=1)
    if not latest or latest[0].run_id != run.run_id:
        raise ApiError(
            409,
            "conflict",
            f"run {run_id} is not its thread's latest run; only that one can be abandoned",
        )
    done = await app.aabandon({"thread_id": run.thread_id}, reason=reason, actor=principal.actor)
    return {"run": (await shown(request, principal)).run(done)}


async def effect_of(
    request: Request, principal: Principal, run_id: str, effect_id: str
) -> EffectRecord:
    """Effect ``effect_id`` of a run the principal may see, or 404."""
    run = await visible_run(request, principal, run_id)
    for record in await graph(request).aeffects(run_id=run.run_id, limit=None):
        if record.effect_id == effect_id:
            return record
    raise not_found(
        f"run {run_id} has no effect {effect_id!r}; list them with GET /api/runs/{run_id}/effects"
    )


async def resolve(
    request: Request, run_id: str, effect_id: str, body: Mapping[str, Any]
) -> dict[str, Any]:
    principal = need(request, Role.OPERATOR, cookie=_ui(request))
    asked = bodies.model(schemas.ResolveBody, body)
    outcome, reason, reference = asked.outcome, asked.reason, asked.provider_reference
    record = await effect_of(request, principal, run_id, effect_id)
    done = await graph(request).aresolve_effect(
        record.effect_id,
        outcome,
        actor=principal.actor,
        reason=reason,
        result=asked.result,
        provider_reference=reference or None,
    )
    return {"effect": (await shown(request, principal)).effect(done)}


async def check(
    request: Request, run_id: str, effect_id: str, body: Mapping[str, Any]
) -> dict[str, Any]:
    """Ask the recipient again about an uncertain effect (its tool's probe or reconcile)."""
    principal = need(request, Role.OPERATOR, cookie=_ui(request))
    code_needed(request, "ask the recipient through the tool's hook")
    reason = bodies.model(schemas.CheckBody, body).reason or "asked the recipient"
    record = await effect_of(request, principal, run_id, effect_id)
    found = await graph(request).acheck_effect(
        record.effect_id, actor=principal.actor, reason=reason
    )
    view = await shown(request, principal)
    return {"verdict": found.verdict, "effect": view.effect(found.effect)}


async def redeliver(
    request: Request, run_id: str, effect_id: str, body: Mapping[str, Any]
) -> dict[str, Any]:
    principal = need(request, Role.ADMIN, cookie=_ui(request))
    code_needed(request, "redeliver an effect (the tool's code sends it)")
    asked = bodies.model(schemas.RedeliverBody, body)
    reason, new_key, confirm = asked.reason, asked.new_key, asked.confirm
    record = await effect_of(request, principal, run_id, effect_id)
    try:
        outcome = await graph(request).aredeliver(
            record.effect_id,
            actor=principal.actor,
            reason=reason,
            new_key=new_key,
            confirm=confirm or None,
            past_dedup_window=asked.past_dedup_window,
        )
    except PastDedupWindowError as exc:  # named in the caller's own surface
        raise exc.naming(
            "tick \"Send it although the recipient may have forgotten the key\" and press "
            "Redeliver effect again"
            if _ui(request)
            else 'send the request again with "past_dedup_window": true in its body'
        ) from None
    view = await shown(request, principal)
    if isinstance(outcome, Redelivered):
        return {
            "sent": True,
            "effect": view.effect(outcome.effect),
            "preview": view.preview(outcome.preview),
        }
    return {"sent": False, "preview": view.preview(outcome)}


def _ui(request: Request) -> bool:
    return bool(request.scope.get("oncegraph_ui"))


__all__ = [
    "REPLAY_MODES",
    "abandon",
    "branch",
    "check",
    "continue_run",
    "effect_of",
    "join",
    "launch",
    "redeliver",
    "replay",
    "resolve",
    "start",
    "stored_run",
]
