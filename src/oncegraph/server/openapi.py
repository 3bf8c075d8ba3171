"""The OpenAPI 3.1 document of the REST API (``GET /openapi.json``).

The routes are listed here, next to :mod:`oncegraph.server.api`; the shapes of their
bodies and of the main answers are the pydantic models of
:mod:`oncegraph.server.schemas`, the same ones the API checks requests with. The
schema-driven fuzz test (schemathesis) checks the document and the API agree and that
no input gets a 5xx.
"""

from __future__ import annotations

from typing import Any

from oncegraph import __version__
from oncegraph.server import schemas
from oncegraph.server.openapi_errors import (
    COMMAND_ERRORS,
    COMMON_ERRORS,
    IDEMPOTENCY_KEY,
)
from oncegraph.server.schemas import components

_OBJ: dict[str, Any] = {"type": "object"}


def _ok(schema: dict[str, Any], description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _object(properties: dict[str, Any], *, optional: tuple[str, ...] = ()) -> dict[str, Any]:
    """An object's schema: its ``properties``, each required but the ``optional`` ones."""
    required = [name for name in properties if name not in optional]
    return {"type": "object", "required": required, "properties": properties}


def _keyed(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return _object({name: schema})


def _page(name: str, item: dict[str, Any]) -> dict[str, Any]:
    """A page of a listing: its ``name``d items and ``next``, the next page's ``before``."""
    following = {
        "type": ["string", "null"],
        "description": "the next page's before=, or null on the last page",
    }
    return _object({name: _array(item), "next": following})


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _array(item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": item}


def _path(name: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}


def _query(name: str, schema: dict[str, Any], description: str = "") -> dict[str, Any]:
    out = {"name": name, "in": "query", "required": False, "schema": schema}
    if description:
        out["description"] = description
    return out


LIMIT = _query("limit", {"type": "integer", "minimum": 1, "maximum": 1000}, "at most this many")
EFFECT_LIMIT = _query(
    "limit", {"type": "integer", "minimum": 1, "maximum": 5000}, "at most this many (500)"
)
OFFSET = _query("offset", {"type": "integer", "minimum": 0, "maximum": 999999999}, "skip these")


def _status(values: list[str]) -> dict[str, Any]:
    return {
        "name": "status",
        "in": "query",
        "required": False,
        "schema": {"type": "array", "items": {"type": "string", "enum": values}},
        "style": "form",
        "explode": True,
    }


def _get(summary: str, ok: dict[str, Any], params: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "get": {
            "summary": summary,
            "parameters": params,
            "responses": {"200": _ok(ok), **COMMON_ERRORS},
        }
    }


def _post(
    summary: str,
    body: dict[str, Any],
    ok: dict[str, Any],
    params: list[dict[str, Any]],
    *,
    status: str = "200",
    required: bool = True,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    responses = {status: _ok(ok), **COMMAND_ERRORS, **(extra or {})}
    return {
        "post": {
            "summary": summary,
            "parameters": [*params, IDEMPOTENCY_KEY],
            "requestBody": {
                "required": required,
                "content": {"application/json": {"schema": body}},
            },
            "responses": responses,
        }
    }


def _events(description: str) -> dict[str, Any]:
    """An answer that is a stream of Server-Sent Events."""
    return {
        "description": description,
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
    }


def _streamed(
    summary: str, body: dict[str, Any], params: list[dict[str, Any]], events: str
) -> dict[str, Any]:
    """A command whose answer is its run's events, as Server-Sent Events."""
    return {
        "post": {
            "summary": summary,
            "parameters": [*params, IDEMPOTENCY_KEY],
            "requestBody": {"required": True, "content": {"application/json": {"schema": body}}},
            "responses": {"200": _events(events), **COMMAND_ERRORS},
        }
    }


TEXT = {"type": "string", "maxLength": schemas.MAX_TEXT}


def _history_and_effects(whose: str, id_param: dict[str, Any]) -> dict[str, Any]:
    """The two listings a run and a thread both have, at ``/api/{whose}s/{id}/...``:
    its checkpoints and its effect records."""
    from oncegraph.server.api import EFFECT_STATUSES

    at = f"/api/{whose}s/{{{id_param['name']}}}"
    return {
        f"{at}/history": _get(
            f"The {whose}'s checkpoints, newest first",
            _keyed("history", _array(_ref("Snapshot"))),
            [id_param, LIMIT],
        ),
        f"{at}/effects": _get(
            f"The {whose}'s effect records (masked)",
            _keyed("effects", _array(_ref("Effect"))),
            [id_param, _status(list(EFFECT_STATUSES)), EFFECT_LIMIT, OFFSET],
        ),
    }


def document() -> dict[str, Any]:
    from oncegraph.server.api import RUN_STATUSES
    from oncegraph.server.compensation import compensation_paths

    run_id, thread_id, effect_id = _path("run_id"), _path("thread_id"), _path("effect_id")
    run_out = _keyed("run", _ref("Run"))
    outcome = _object(
        {"run": _ref("Run"), "output": {}, "error": _ref("Outcome")}, optional=("output", "error")
    )
    paths: dict[str, Any] = {
        "/api/health": {
            "get": {
                "summary": "Liveness (no key needed)",
                "security": [],
                "responses": {"200": _ok(_OBJ), "429": COMMON_ERRORS["429"]},
            }
        },
        "/api/me": _get("The caller's role and tenant", _OBJ, []),
        "/api/runs": _get(
            "Runs, newest first, a page at a time (needs_review first within the page)",
            _page("runs", _ref("Run")),
            [
                _status(list(RUN_STATUSES)),
                _query("thread_id", TEXT),
                LIMIT,
                _query("before", TEXT, "the runs listed after this run (a page's next)"),
            ],
        ),
        "/api/runs/{run_id}": _get(
            "One run and its lineage (parent and child runs)",
            _object({"run": _ref("Run"), "lineage": _OBJ}),
            [run_id],
        ),
        **_history_and_effects("run", run_id),
        "/api/runs/{run_id}/effects/{effect_id}": _get(
            "One effect record", _keyed("effect", _ref("Effect")), [run_id, effect_id]
        ),
        "/api/runs/{run_id}/audit": _get(
            "The run's audit records, newest first",
            _keyed("audit", _array(_ref("Audit"))),
            [run_id, LIMIT],
        ),
        "/api/runs/{run_id}/events": {
            "get": {
                "summary": "The run's events as Server-Sent Events (resume with Last-Event-ID)",
                "parameters": [
                    run_id,
                    {
                        "name": "Last-Event-ID",
                        "in": "header",
                        "required": False,
                        "schema": {"type": "string", "pattern": "^(cp\\.)?[0-9]{1,15}$"},
                    },
                ],
                "responses": {"200": _events("An event stream"), **COMMON_ERRORS},
            }
        },
        "/api/runs/{run_id}/continue": _post(
            "Continue a paused, interrupted, failed or parked run (operator)",
            schemas.ref(schemas.ContinueBody),
            outcome,
            [run_id],
            required=False,
        ),
        "/api/runs/{run_id}/replay": _post(
            "Create a replay: a new run in a mode, evidence by default (operator)",
            schemas.ref(schemas.ReplayBody),
            outcome,
            [run_id],
            status="201",
        ),
        "/api/runs/{run_id}/branch": _post(
            "Create a branch with a state patch; returns the diff (operator)",
            schemas.ref(schemas.BranchBody),
            _object(
                {
                    "run": _ref("Run"),
                    "diff": _array(_OBJ),
                    "checkpoint_id": {"type": "string"},
                }
            ),
            [run_id],
            status="201",
        ),
        "/api/runs/{run_id}/abandon": _post(
            "Abandon the thread's unfinished run (operator)",
            schemas.ref(schemas.AbandonBody),
            run_out,
            [run_id],
        ),
        "/api/runs/{run_id}/effects/{effect_id}/resolve": _post(
            "Resolve an uncertain effect: done or not done, with a reason (operator)",
            schemas.ref(schemas.ResolveBody),
            _keyed("effect", _ref("Effect")),
            [run_id, effect_id],
        ),
        "/api/runs/{run_id}/effects/{effect_id}/check": _post(
            "Ask the recipient again about an uncertain effect, through its tool's probe "
            "or reconcile hook (operator)",
            schemas.ref(schemas.CheckBody),
            _object(
                {
                    "verdict": {
                        "type": "string",
                        "enum": ["done", "accepted", "not_done", "unknown"],
                    },
                    "effect": _ref("Effect"),
                }
            ),
            [run_id, effect_id],
            required=False,
        ),
        "/api/runs/{run_id}/effects/{effect_id}/redeliver": _post(
            "Redeliver an effect (admin): without confirm a preview; with the preview's "
            "token, send exactly once",
            schemas.ref(schemas.RedeliverBody),
            _object(
                {
                    "sent": {"type": "boolean"},
                    "preview": _OBJ,
                    "effect": _ref("Effect"),
                },
                optional=("effect",),
            ),
            [run_id, effect_id],
        ),
        "/api/threads": _get(
            "Threads by their latest run, newest first, a page at a time",
            _page("threads", _OBJ),
            [
                LIMIT,
                _query(
                    "before",
                    TEXT,
                    "the threads whose latest run is older than this run (a page's next)",
                ),
            ],
        ),
        "/api/threads/{thread_id}": _get(
            "A thread's runs",
            _object({"thread_id": {"type": "string"}, "runs": _array(_ref("Run"))}),
            [thread_id, LIMIT],
        ),
        "/api/threads/{thread_id}/state": _get(
            "The thread's state now, or at checkpoint_id",
            _keyed("state", _ref("Snapshot")),
            [thread_id, _query("checkpoint_id", TEXT)],
        ),
        **_history_and_effects("thread", thread_id),
        "/api/threads/{thread_id}/runs": _post(
            "Start a run (or continue the thread's with input null) in the background "
            "(operator); wait=true returns when it stopped. Sent again with its "
            "Idempotency-Key, it answers with the same run",
            schemas.ref(schemas.StartBody),
            _object(
                {
                    "run_id": {"type": "string"},
                    "thread_id": {"type": "string"},
                    "events_url": {"type": "string"},
                    "run": _ref("Run"),
                    "error": _ref("Outcome"),
                },
                optional=("error",),
            ),
            [thread_id],
            status="202",
            extra={"200": _ok(_OBJ, "The run stopped (wait=true), or stopped on an error")},
        ),
        "/api/threads/{thread_id}/runs/stream": _streamed(
            "Start a run and stream its events (operator); sent again with its "
            "Idempotency-Key, it streams the same run",
            schemas.ref(schemas.StartBody),
            [thread_id],
            "An event stream",
        ),
        "/api/agui": _streamed(
            "Run the app for an AG-UI client: RunAgentInput in, AG-UI events out as "
            "Server-Sent Events (operator)",
            schemas.ref(schemas.AguiInput),
            [],
            "AG-UI events",
        ),
        "/api/audit": _get(
            "The audit log, newest first, a page at a time",
            _page("audit", _ref("Audit")),
            [
                _query("run_id", TEXT),
                _query("thread_id", TEXT),
                _query("target_id", TEXT),
                _query(
                    "before",
                    TEXT,
                    "a page's next ('<at>,<audit_id>'), or a time in seconds: the records older",
                ),
                LIMIT,
            ],
        ),
    }
    paths.update(compensation_paths(effect_id))
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "oncegraph",
            "version": __version__,
            "description": "Runs, state, effects, the audit log and the operator commands "
            "of one oncegraph app. Every command is kept in the audit log with the key's "
            "name as actor.",
        },
        "security": [{"apiKey": []}, {"bearer": []}],
        "paths": paths,
        "components": {
            "securitySchemes": {
                "apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"},
                "bearer": {"type": "http", "scheme": "bearer"},
            },
            "schemas": components(),
        },
    }


__all__ = ["document"]
