"""The starlette application: built-in routes, plugin routes, API key, error handling."""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from tercet.errors import RequestError
from tercet.http import control_api, native_api, openai_api
from tercet.http.errors import error_response, internal_error_response, request_error_response

logger = logging.getLogger(__name__)

Endpoint = Callable[[Request, object], Awaitable[Response]]
RouteSpec = tuple[str, Endpoint, Sequence[str] | None]
# Load balancers and supervisors probe /health without credentials.
UNAUTHENTICATED_PATHS = frozenset({"/health"})
# Not a real HTTP status: nginx's "client closed request", for logs only.
CLIENT_CLOSED_REQUEST = 499


async def health(request: Request, tokenizer_manager) -> Response:
    if tokenizer_manager.is_healthy():
        return JSONResponse({"status": "ok"})
    body = {"status": "unhealthy"}
    reason = getattr(tokenizer_manager, "unhealthy_reason", None)
    if reason:
        body["reason"] = reason
    return JSONResponse(body, status_code=503)


BUILTIN_ROUTES: list[RouteSpec] = [
    ("/health", health, ["GET"]),
    *openai_api.ROUTES,
    *native_api.ROUTES,
    *control_api.ROUTES,
]


def create_app(tokenizer_manager, api_key: str | None = None, extra_routes: Iterable[RouteSpec] = ()) -> Starlette:
    """Build the API server's app.

    ``extra_routes`` are ``(path, endpoint, methods)`` from plugins'
    ``register_http_routes``; ``endpoint(request, tokenizer_manager)`` returns a
    starlette response. Built-in routes win over a plugin route with the same path.
    """
    routes = [
        Route(path, _bind(endpoint, tokenizer_manager), methods=methods, name=endpoint.__name__)
        for path, endpoint, methods in [*BUILTIN_ROUTES, *extra_routes]
    ]
    middleware = [Middleware(BearerTokenAuth, api_key=api_key)] if api_key else []
    return Starlette(routes=routes, middleware=middleware, exception_handlers={HTTPException: _http_exception})


def _bind(endpoint: Endpoint, tokenizer_manager) -> Callable[[Request], Awaitable[Response]]:
    async def handle(request: Request) -> Response:
        try:
            return await endpoint(request, tokenizer_manager)
        except RequestError as exc:
            return request_error_response(exc)
        except HTTPException:
            raise  # a plugin's deliberate status; the app's handler formats it
        except ClientDisconnect:
            return Response(status_code=CLIENT_CLOSED_REQUEST)
        except Exception:
            # One broken request must not take the server down with it.
            logger.exception("unhandled error in %s %s", request.method, request.url.path)
            return internal_error_response()

    return handle


async def _http_exception(request: Request, exc: HTTPException) -> Response:
    # Routing errors (404 unknown path, 405 wrong method) in the same shape as the rest.
    return error_response(exc.detail, exc.status_code, headers=exc.headers)


class BearerTokenAuth:
    """Require ``Authorization: Bearer <api_key>`` on every path but the unauthenticated ones."""

    def __init__(self, app: ASGIApp, api_key: str):
        self.app = app
        self.expected = api_key.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in UNAUTHENTICATED_PATHS:
            return await self.app(scope, receive, send)
        problem = self._problem_with(dict(scope["headers"]).get(b"authorization"))
        if problem is None:
            return await self.app(scope, receive, send)
        response = error_response(problem, 401, headers={"WWW-Authenticate": "Bearer"})
        await response(scope, receive, send)

    def _problem_with(self, authorization: bytes | None) -> str | None:
        if authorization is None:
            return "missing API key: send the header 'Authorization: Bearer <key>'"
        scheme, _, token = authorization.partition(b" ")
        # compare_digest so the time taken does not reveal how much of the key matched.
        if scheme.lower() != b"bearer" or not hmac.compare_digest(token.strip(), self.expected):
            return "invalid API key"
        return None
