"""One JSON error shape for every failed request, mapped from the typed pyweft errors.

Every error response body is ``{"error": {"code", "message", "details"}}``: ``code`` is
the pyweft error's stable code (``WorkflowNotFoundError``...), ``details`` its public
attributes (``workflow_id``, ``status``...). The HTTP client turns that back into the
same exception class. Anything that is not a ``PyweftError`` is logged here and
answered with a bare ``ServerError``: internal error text never leaves the process.
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from pyweft import errors

log = logging.getLogger("pyweft.server")

# The HTTP status of each error, checked in order (subclasses before their parents).
_STATUS: tuple[tuple[type[errors.PyweftError], int], ...] = (
    (errors.AuthenticationError, 401),
    (errors.PermissionDeniedError, 403),
    (errors.RequestTooLargeError, 413),
    (errors.RateLimitedError, 429),
    (errors.InvalidArgumentError, 400),
    (errors.InvalidDurationError, 400),
    (errors.PayloadError, 400),
    (errors.WorkflowNotFoundError, 404),
    (errors.WorkflowNotRegisteredError, 404),
    (errors.UpdateNotFoundError, 404),
    (errors.ReviewNotFoundError, 404),
    (errors.QueryNotFoundError, 404),
    (errors.ScheduleNotFoundError, 404),
    (errors.QueueNotFoundError, 404),
    (errors.ActivityTokenNotFoundError, 404),
    (errors.WorkflowAlreadyExistsError, 409),
    (errors.IdempotencyKeySpentError, 409),
    (errors.BulkOperationConfirmationError, 409),
    (errors.BulkDeleteRequiresTerminalWorkflowsError, 422),
    (errors.WorkflowTerminalError, 409),
    (errors.ReviewAlreadyDecidedError, 409),
    (errors.ScheduleAlreadyExistsError, 409),
    (errors.QueryUnavailableError, 409),
    (errors.ResultTimeoutError, 408),
    (errors.UpdateTimeoutError, 408),
    (errors.WorkflowFailedError, 422),
    (errors.WorkflowCancelledError, 422),
    (errors.WorkflowTimeoutError, 422),
    (errors.UpdateRejectedError, 422),
    (errors.UpdateFailedError, 422),
    (errors.QueryFailedError, 422),
    (errors.WorkflowUsageError, 422),
    (errors.EngineClosedError, 503),
    (errors.StorageError, 503),
)

# Errors whose message may carry internal detail (paths, driver text): replaced.
_MASKED: dict[type[errors.PyweftError], str] = {
    errors.StorageError: "the store could not complete the operation; retry later",
}

# Attribute names never copied into details, whatever the error.
_PRIVATE = frozenset({"args", "code", "with_traceback", "add_note"})


def status_of(exc: errors.PyweftError) -> int:
    for cls, status in _STATUS:
        if isinstance(exc, cls):
            return status
    return 500


def details_of(exc: errors.PyweftError) -> dict[str, Any]:
    """The error's own public attributes (set in its ``__init__``), JSON-safe."""
    out: dict[str, Any] = {}
    for name, value in vars(exc).items():
        if name.startswith("_") or name in _PRIVATE:
            continue
        if value is None or isinstance(value, str | int | float | bool):
            out[name] = value
        elif isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
            out[name] = list(value)
    return out


def body(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details or {}}}


def error_response(exc: errors.PyweftError, headers: dict[str, str] | None = None) -> Response:
    status = status_of(exc)
    message = str(exc)
    details = details_of(exc)
    for cls, masked in _MASKED.items():
        if isinstance(exc, cls):
            log.warning("request failed with %s: %s", exc.code, exc)
            message, details = masked, {}
    if status == 500:
        log.error("unmapped pyweft error %s: %s", exc.code, exc)
    return JSONResponse(body(exc.code, message, details), status_code=status, headers=headers)


def fault(http_status: int, code: str, message: str, **details: Any) -> Response:
    return JSONResponse(body(code, message, details), status_code=http_status)


async def on_pyweft_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, errors.PyweftError)
    headers = None
    if isinstance(exc, errors.RateLimitedError):
        headers = {"Retry-After": str(max(1, round(exc.retry_after_s)))}
    return error_response(exc, headers)


async def on_unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return fault(500, "ServerError", "internal server error", status=500)


async def on_http_exception(request: Request, exc: Exception) -> Response:
    from starlette.exceptions import HTTPException

    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        return fault(404, "RouteNotFound", f"no route {request.url.path}", path=request.url.path)
    if exc.status_code == 405:
        return fault(
            405, "MethodNotAllowed", f"{request.method} is not allowed on {request.url.path}"
        )
    return fault(exc.status_code, "HTTPError", str(exc.detail))
