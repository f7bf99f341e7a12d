"""Error answers: every failure a request meets becomes one JSON shape, ``ApiError``
(``{"error": CODE, "detail": SENTENCE}``, with ``run_id`` and ``status`` when a run is
concerned), with the status code that says whose fault it is."""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from actors import MagistrateError
from eventstore import (
    ConcurrencyError,
    CorruptLogError,
    LeaseLostError,
    RunOwnedError,
    StoreError,
)

from .. import (
    MemoryValueError,
    RunChangedError,
    RunDrainingError,
    RunNotFoundError,
    RunStateError,
    SpecError,
)
from ._params import HttpError
from ._schemas import ApiError

__all__ = ["error_response", "json_response", "on_crash", "on_error", "on_http"]

_ENCODER = msgspec.json.Encoder()


def json_response(value: Any, status: int = 200) -> Response:
    return Response(_ENCODER.encode(value), status_code=status, media_type="application/json")


def error_response(code: int, error: str, detail: str, **fields: Any) -> Response:
    return json_response(ApiError(error=error, detail=detail, **fields), code)


async def on_error(request: Request, exc: Exception) -> Response:
    """Known failures as 4xx with the reason (503 only for a store or runtime that cannot
    answer now, which a retry may cure); anything else is :func:`on_crash`'s."""
    match exc:
        case HttpError():
            return error_response(exc.status, exc.error, exc.detail)
        case RunNotFoundError():
            return error_response(404, "run_not_found", str(exc), run_id=exc.run_id)
        case RunDrainingError():
            return error_response(
                409, "run_draining", str(exc), run_id=exc.run_id, status=exc.status
            )
        case RunChangedError():
            return error_response(
                409, "run_changed", str(exc), run_id=exc.run_id, status=exc.status
            )
        case RunStateError():
            return error_response(409, "run_state", str(exc), run_id=exc.run_id, status=exc.status)
        case RunOwnedError():
            return error_response(409, "run_owned", str(exc), run_id=exc.run_id)
        case ConcurrencyError() | LeaseLostError():
            return error_response(409, "conflict", str(exc))
        case MemoryValueError():
            return error_response(422, "invalid_input", str(exc))
        case SpecError():
            return error_response(422, "invalid_spec", str(exc))
        case CorruptLogError():
            return error_response(409, "corrupt_log", str(exc))
        case StoreError() | MagistrateError():
            return error_response(503, "unavailable", str(exc))
    raise exc  # pragma: no cover - only registered for the classes above


async def on_crash(request: Request, exc: Exception) -> Response:
    """A failure no handler expected: the API's error shape still (the server logs it)."""
    return error_response(
        500, "internal", "the server failed to answer this request; its log says why"
    )


async def on_http(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    response = error_response(exc.status_code, "http", str(exc.detail))
    headers = dict(exc.headers or {})
    allow = headers.get("Allow")
    if allow is not None:  # a 405's: the methods in one order (routing keeps them in a set)
        headers["Allow"] = ", ".join(sorted(method.strip() for method in allow.split(",")))
    response.headers.update(headers)
    return response
