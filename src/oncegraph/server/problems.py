"""HTTP errors as JSON: ``{"error": {"status", "code", "message"}}``.

:func:`status_of` maps oncegraph's error tree to a status at the boundary: bad input is a
400 (413 when a value is too large), an unknown id a 404, a run in the wrong state for
the command a 409, a store that failed a 503 (``storage_full`` when its disk is full), a
stored row that cannot be read back a 500 (``corrupt_record``). Whatever was refused
changed nothing: every command validates before it writes, and the run service writes in
one transaction.
"""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse

from oncegraph import errors


class ApiError(Exception):
    """An error response: raise it from a route, the app renders it."""

    def __init__(self, status: int, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.extra = extra


def bad_request(message: str) -> ApiError:
    return ApiError(400, "bad_request", message)


def not_found(message: str) -> ApiError:
    return ApiError(404, "not_found", message)


def forbidden(message: str) -> ApiError:
    return ApiError(403, "forbidden", message)


_STATUS: tuple[tuple[type[BaseException], int, str], ...] = (
    (errors.PayloadTooLargeError, 413, "payload_too_large"),
    (errors.ConfigError, 400, "bad_request"),
    (errors.RunNotFoundError, 404, "not_found"),
    (errors.RunBusyError, 409, "run_busy"),
    (errors.NeedsReviewError, 409, "needs_review"),
    (errors.RunStateError, 409, "conflict"),
    (errors.IncompatibleVersionError, 409, "incompatible_version"),
    (errors.StaleStateError, 409, "stale_state"),
    (errors.LeaseLostError, 409, "run_taken_over"),
    # a full disk: the write was rolled back; the message says what ran and what to do
    (errors.StorageFullError, 503, "storage_full"),
    # a damaged stored row: no retry mends it (the message names the row and the fix)
    (errors.CorruptRecordError, 500, "corrupt_record"),
    (errors.StorageError, 503, "storage_unavailable"),
    (errors.EffectError, 409, "effect_error"),
    (errors.NodeError, 409, "run_failed"),
    (errors.ToolTimeoutError, 409, "run_failed"),
    (errors.AgentError, 409, "run_failed"),
    (errors.OnceGraphError, 409, "conflict"),
)


def from_exception(exc: BaseException) -> ApiError | None:
    """The response for an oncegraph error, ``None`` for anything else (a bug: 500)."""
    if isinstance(exc, ApiError):
        return exc
    for kind, status, code in _STATUS:
        if isinstance(exc, kind):
            return ApiError(status, code, str(exc) or type(exc).__name__)
    return None


def response(error: ApiError, headers: dict[str, str] | None = None) -> JSONResponse:
    body = {"error": {"status": error.status, "code": error.code, "message": error.message}}
    body["error"].update(error.extra)
    return JSONResponse(body, status_code=error.status, headers=headers)


__all__ = ["ApiError", "bad_request", "forbidden", "from_exception", "not_found", "response"]
