"""OpenAI-style error responses: ``{"error": {"message", "type", "param", "code"}}``.

Handlers raise :class:`~tercet.errors.RequestError` (or :class:`APIError` when
OpenAI defines a machine-readable ``code``); the app turns it into one of these.
"""

from __future__ import annotations

import json

from starlette.requests import Request
from starlette.responses import JSONResponse

from tercet.errors import RequestError
from tercet.ipc.messages import FinishKind, FinishReason

ERROR_TYPES_BY_STATUS = {
    400: "invalid_request_error",
    # OpenAI reports a bad key and an unknown model as invalid requests and
    # tells them apart by ``code``; clients key off the status anyway.
    401: "invalid_request_error",
    404: "invalid_request_error",
    429: "rate_limit_error",
    500: "internal_error",
    503: "service_unavailable",
}
DEFAULT_CODES_BY_STATUS = {401: "invalid_api_key"}


class APIError(RequestError):
    """A :class:`RequestError` that also carries OpenAI's ``code`` field."""

    def __init__(self, message: str, param: str | None = None, status_code: int = 400, code: str | None = None):
        super().__init__(message, param, status_code)
        self.code = code


def error_payload(message: str, status_code: int = 400, param: str | None = None, code: str | None = None) -> dict:
    """The error body; its strings are made encodable, so rendering it cannot fail."""
    error_type = ERROR_TYPES_BY_STATUS.get(status_code)
    if error_type is None:
        error_type = "internal_error" if status_code >= 500 else "invalid_request_error"
    return {
        "error": {
            "message": _encodable(message),
            "type": error_type,
            "param": _encodable(param),
            "code": _encodable(code if code is not None else DEFAULT_CODES_BY_STATUS.get(status_code)),
        }
    }


def _encodable(text) -> str | None:
    # A message or param may quote the request (a parameter's name, a model
    # name), and a JSON "\ud800" in it is a lone surrogate that UTF-8 cannot
    # encode: the response would fail to render. Such a character becomes its
    # escape, "\ud800" in text.
    if text is None:
        return None
    return str(text).encode("utf-8", "backslashreplace").decode("utf-8")


def error_response(
    message: str,
    status_code: int = 400,
    param: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    return JSONResponse(error_payload(message, status_code, param, code), status_code=status_code, headers=headers)


def payload_for(exc: RequestError) -> dict:
    return error_payload(exc.message, exc.status_code, exc.param, getattr(exc, "code", None))


# Seconds a client refused for overload should wait before retrying.
OVERLOAD_RETRY_AFTER = "1"


def request_error_response(exc: RequestError, error_body=error_payload) -> JSONResponse:
    """``exc`` as its status, in the shape ``error_body(message, status, param, code)`` builds (OpenAI's)."""
    # A refused request's 503 means the server is full for now (the
    # TokenizerManager's "already holds N requests"): say when to come back.
    headers = {"Retry-After": OVERLOAD_RETRY_AFTER} if exc.status_code == 503 else None
    body = error_body(exc.message, exc.status_code, exc.param, getattr(exc, "code", None))
    return JSONResponse(body, status_code=exc.status_code, headers=headers)


INTERNAL_ERROR_MESSAGE = "internal server error; the server log has the details"


def internal_error_response() -> JSONResponse:
    return error_response(INTERNAL_ERROR_MESSAGE, 500)


def raise_if_refused(finish_reason: FinishReason | None) -> None:
    """An abort that carries a status code is the server refusing the request
    (it can never fit, the queue is full…): the client gets that status, not a
    normal completion with ``finish_reason: "abort"``."""
    if finish_reason is not None and finish_reason.kind is FinishKind.ABORT and finish_reason.status_code is not None:
        raise RequestError(finish_reason.message or "the request was refused", finish_reason.param,
                           finish_reason.status_code)


async def read_json_object(request: Request) -> dict:
    body = await request.body()
    if not body.strip():
        raise RequestError("the request body is empty; send a JSON object")
    try:
        data = json.loads(body, parse_constant=_reject_non_finite)
    except (UnicodeDecodeError, ValueError) as exc:
        raise RequestError(f"the request body is not valid JSON: {exc}") from None
    except RecursionError:
        # The decoder recurses once per level of nesting.
        raise RequestError("the request body is nested too deeply to be read") from None
    if not isinstance(data, dict):
        raise RequestError(f"the request body must be a JSON object, got {type(data).__name__}")
    return data


def _reject_non_finite(name: str):
    # Python's json accepts NaN and Infinity; a NaN temperature would pass
    # every range check and poison sampling, so refuse them at the door.
    raise ValueError(f"{name} is not a valid JSON number")
