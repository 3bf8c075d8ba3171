"""``POST /api/effects/{effect_id}/compensate``: undo a completed effect with its tool's
compensating tool, as a new effect of its own (:mod:`oncegraph.runs.compensating`).

The body is :class:`~oncegraph.server.schemas.CompensateBody`. Who may: an admin, like a
redelivery (a compensation sends a new command to a recipient), unless the server was
made with ``create_app(..., compensate_role="operator")``. Refusals are problem+json
documents (409 for an effect that is not completed or was compensated already, 400 for
a tool that declares no compensation, 404 for an effect the key cannot see).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from oncegraph.errors import ConfigError, RunStateError
from oncegraph.runs.compensating import AGAIN, CHECK, RESOLVE
from oncegraph.server import bodies, idempotency, schemas
from oncegraph.server.auth import Principal, Role
from oncegraph.server.context import code_needed, graph, need, shown, visible_run
from oncegraph.server.problems import ApiError

ROLE = Role.ADMIN
"""Who may compensate unless the server says otherwise (``compensate_role``)."""


def role(request: Request) -> Role:
    """The role this server asks of who compensates."""
    found = getattr(request.app.state, "compensate_role", ROLE)
    return found if isinstance(found, Role) else ROLE


def compensation_role(text: str) -> Role:
    """``create_app(compensate_role=...)``: admin or operator (a viewer never acts)."""
    found = Role.parse(text) if isinstance(text, str) else None
    if found not in (Role.ADMIN, Role.OPERATOR):
        raise ConfigError(f"compensate_role must be 'admin' or 'operator'; got {text!r}")
    return found


def compensable(effect: Mapping[str, Any], tool: Any) -> bool:
    """Does Compensate apply to ``effect`` (as a page shows it)? A completed effect of a
    tool of this graph that declares its compensation."""
    return effect.get("status") == "completed" and getattr(tool, "compensate", None) is not None


def api_words(text: str) -> str:
    """A refusal naming the app's calls, with the API's requests instead."""
    return (
        text.replace(f"pass {AGAIN}", 'send it again with "allow_again": true')
        .replace(CHECK, "POST /api/runs/{run_id}/effects/{effect_id}/check")
        .replace(RESOLVE, "POST /api/runs/{run_id}/effects/{effect_id}/resolve")
    )


async def compensate(
    request: Request,
    effect_id: str,
    body: Mapping[str, Any],
    *,
    words: Callable[[str], str] = api_words,
) -> dict[str, Any]:
    """Compensate ``effect_id`` for the caller (the API's and the UI's one operation);
    a refusal is said in ``words`` (the API's requests, the UI's buttons)."""
    principal = need(request, role(request), cookie=bool(request.scope.get("oncegraph_ui")))
    code_needed(request, "compensate an effect (the compensating tool's code runs)")
    asked = bodies.model(schemas.CompensateBody, body)
    app = graph(request)
    record = await app.service.effect(effect_id)  # in the key's scope, or refused
    await visible_run(request, principal, record.run_id)
    try:
        done = await app.acompensate(
            record.effect_id,
            actor=principal.actor,
            reason=asked.reason,
            allow_again=asked.allow_again,
            args=asked.args,
        )
    except (RunStateError, ConfigError) as exc:
        status, code = (409, "conflict") if isinstance(exc, RunStateError) else (400, "bad_request")
        raise ApiError(status, code, words(str(exc))) from None
    view = await shown(request, principal)
    return {
        "effect": view.effect(done.effect),
        "compensates": done.original.effect_id,
        "resumed": done.resumed,
    }


async def links_of(request: Request, principal: Principal, record: Any) -> dict[str, Any]:
    """What an effect's page shows of its compensation links: the effect it compensates
    and the compensations it has (each with its status)."""
    from oncegraph.runs.compensating import compensates

    found = await graph(request).service.compensations(record.effect_id)
    return {
        "compensates": compensates(record),
        "compensated_by": [{"effect_id": r.effect_id, "status": str(r.status)} for r in found],
    }


def compensation_paths(effect_id: dict[str, Any]) -> dict[str, Any]:
    """The OpenAPI path of the command (its body's schema is the model's)."""
    from oncegraph.server.openapi import COMMAND_ERRORS, IDEMPOTENCY_KEY

    ok = {
        "type": "object",
        "required": ["effect", "compensates", "resumed"],
        "properties": {
            "effect": {"$ref": "#/components/schemas/Effect"},
            "compensates": {"type": "string"},
            "resumed": {"type": "boolean"},
        },
    }
    return {
        "/api/effects/{effect_id}/compensate": {
            "post": {
                "summary": "Compensate a completed effect (admin, or operator as the server "
                "is configured): its tool's compensating tool runs once as a new effect, "
                "linked to this one and audited; once unless allow_again",
                "parameters": [effect_id, IDEMPOTENCY_KEY],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {"schema": schemas.ref(schemas.CompensateBody)}
                    },
                },
                "responses": {
                    "200": {
                        "description": "The compensation, as recorded",
                        "content": {"application/json": {"schema": ok}},
                    },
                    **COMMAND_ERRORS,
                },
            }
        }
    }


async def _api(request: Request) -> Response:
    body = await bodies.json_object(request, empty_ok=True)
    need(request, role(request))  # refused before its fields are read
    return JSONResponse(await compensate(request, request.path_params["effect_id"], body))


_api.__name__ = "compensate"
routes = [
    Route(
        "/api/effects/{effect_id}/compensate",
        idempotency.api_route(_api),
        methods=["POST"],
    )
]


__all__ = [
    "ROLE",
    "compensable",
    "compensate",
    "compensation_paths",
    "compensation_role",
    "links_of",
    "role",
    "routes",
]
