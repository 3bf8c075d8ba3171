"""The error answers and the ``Idempotency-Key`` header that every command's entry in the
OpenAPI document shares: :mod:`oncegraph.server.openapi` and the routes that describe
their own paths (:mod:`oncegraph.server.compensation`) import them from here, so no route
module imports the document that lists it."""

from __future__ import annotations

from typing import Any

from oncegraph.server import schemas

ERROR = schemas.ref(schemas.Error)


def _err(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": ERROR}}}


COMMON_ERRORS = {
    "400": _err("Bad input (malformed JSON, a bad value, an unknown field)"),
    "401": _err("No valid API key"),
    "403": _err("The key's role or tenant does not allow this"),
    "404": _err("Unknown id (or another tenant's)"),
    "413": _err("Request body over the size limit"),
    "429": _err("Too many requests; see Retry-After"),
}
COMMAND_ERRORS = {
    **COMMON_ERRORS,
    "409": _err(
        "The run or effect is not in a state for this; or (code request_in_flight) the "
        "first request with this Idempotency-Key is still being served: see Retry-After; "
        "or (code needs_app) the server was started with the database only and this runs "
        "the app's code: start it with the app"
    ),
    "422": _err("This Idempotency-Key was used for another request (code idempotency_key_reused)"),
}
# Every command takes one (the IETF Idempotency-Key draft): sent again with the same key
# and body, it answers with the first request's status and body (header
# Idempotent-Replayed: true); a start names the same run.
IDEMPOTENCY_KEY = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "description": "A key of your own for this request (a random UUID): the request sent "
    "again with it is answered as the first was, and acts once. Kept for the server's "
    "window (24 h by default), per API key.",
    "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[ -~]+$"},
}


__all__ = ["COMMAND_ERRORS", "COMMON_ERRORS", "ERROR", "IDEMPOTENCY_KEY"]
