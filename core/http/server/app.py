"""The starlette application: tercet's core routes, plugins' routes, API key, error handling."""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Sequence

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from tercet.errors import RequestError
from tercet.http.errors import error_response, internal_error_response, request_error_response
from tercet.http.openapi import openapi_document
from tercet.http.server import chat_page, health, metrics_api
from tercet.http.server.browser_guard import BrowserGuard, HostNames
from tercet.http.server.health import DEFAULT_HEALTH_GENERATE_TIMEOUT, HealthGenerateProbe
from tercet.http.server.plugin_routes import ServedRoute, bind, installed_route_registrations, served_routes
from tercet.plugin_host.http_route import HttpRoute
from tercet.plugin_host.manager import Registration

# Load balancers and supervisors probe /health and /health_generate without
# credentials (concurrent /health_generate probes share one generation).
# The chat page (and its icon) holds no secret, and asks for the key itself.
UNAUTHENTICATED_PATHS = health.PATHS | chat_page.PATHS
DEFAULT_MAX_REQUEST_BODY_BYTES = 16 * 1024 * 1024
# How long a browser may reuse an allowed origin's preflight answer.
CORS_MAX_AGE_SECONDS = 600


# What the server is, whatever APIs it speaks: the APIs themselves (OpenAI's,
# the native /generate, the control plane, ...) are plugins' HTTP routes.
CORE_ROUTES = tuple(
    ServedRoute(HttpRoute(path, endpoint, tuple(methods), needs_children=False), plugin_name=None)
    for path, endpoint, methods in [*health.ROUTES, *openapi_document.ROUTES, *chat_page.ROUTES, *metrics_api.ROUTES]
)
CORE_PATHS = frozenset(route.route.path for route in CORE_ROUTES)


def create_app(
    tokenizer_manager,
    api_key: str | None = None,
    routes: Iterable[Registration] | None = None,
    health_generate_timeout: float = DEFAULT_HEALTH_GENERATE_TIMEOUT,
    max_request_body_bytes: int = DEFAULT_MAX_REQUEST_BODY_BYTES,
    bound_host: str = "127.0.0.1",
    allowed_origins: Sequence[str] = (),
    allowed_hosts: Sequence[str] = (),
) -> Starlette:
    """Build the API server's app.

    ``routes`` are the HTTP routes plugins registered (``registries.http_routes``'s
    registrations; those of every installed plugin when not given), served beside
    tercet's own :data:`CORE_ROUTES`; a plugin route on a core path is a
    ``ConfigError``. ``health_generate_timeout`` bounds ``GET /health_generate``'s
    generation, in seconds; a request body over ``max_request_body_bytes`` is
    refused with 413. Requests from other sites' pages, or addressed to a name that
    is not the server's (``bound_host``'s), are refused with 403 unless
    ``allowed_origins`` / ``allowed_hosts`` allow them
    (:mod:`tercet.http.server.browser_guard`), and so is a body that is not JSON (415).
    """
    served = served_routes(installed_route_registrations() if routes is None else routes, CORE_PATHS)
    starlette_routes = [
        Route(route.route.path, bind(route, tokenizer_manager), methods=list(route.route.methods),
              name=getattr(route.route.endpoint, "__name__", route.route.path))
        for route in (*CORE_ROUTES, *served)
    ]
    middleware = [
        *_browser_middleware(bound_host, allowed_origins, allowed_hosts),
        *([Middleware(BearerTokenAuth, api_key=api_key)] if api_key else []),
        Middleware(RequestBodyLimit, max_bytes=max_request_body_bytes),
    ]
    exception_handlers = {HTTPException: _http_exception, Exception: _unhandled_exception}
    app = Starlette(routes=starlette_routes, middleware=middleware, exception_handlers=exception_handlers)
    app.state.health_generate_probe = HealthGenerateProbe(tokenizer_manager, health_generate_timeout)
    app.state.served_routes = served
    return app


def _browser_middleware(bound_host: str, allowed_origins: Sequence[str], allowed_hosts: Sequence[str]) -> list:
    """The browser guard, then (for the origins allowed) CORS headers, outside the API key
    check: a browser's preflight carries no key."""
    guard = Middleware(BrowserGuard, host_names=HostNames.of_server(bound_host, allowed_hosts),
                       allowed_origins=allowed_origins, host_check_exempt=health.PATHS)
    if not allowed_origins:
        return [guard]
    cors = Middleware(CORSMiddleware, allow_origins=list(allowed_origins), allow_methods=["GET", "POST"],
                      allow_headers=["*"], max_age=CORS_MAX_AGE_SECONDS)
    return [guard, cors]


async def _http_exception(request: Request, exc: HTTPException) -> Response:
    # Routing errors (404 unknown path, 405 wrong method) in the same shape as the rest.
    return error_response(exc.detail, exc.status_code, headers=exc.headers)


async def _unhandled_exception(request: Request, exc: Exception) -> Response:
    # What escapes a handler's own net (a middleware's failure, say) reaches
    # starlette's last-resort handler: JSON there too, never text/plain.
    # starlette re-raises it afterwards, so the server logs the traceback.
    return internal_error_response()


class BearerTokenAuth:
    """Require ``Authorization: Bearer <api_key>`` on every path but the unauthenticated ones.

    ``X-Api-Key: <api_key>`` is taken too, sent without an ``Authorization`` header:
    that is how Anthropic's SDKs send a key, so their clients work unchanged.
    """

    def __init__(self, app: ASGIApp, api_key: str):
        self.app = app
        self.expected = api_key.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in UNAUTHENTICATED_PATHS:
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        authorization = headers.get(b"authorization")
        if authorization is None and b"x-api-key" in headers:
            authorization = b"Bearer " + headers[b"x-api-key"]
        problem = self._problem_with(authorization)
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


class RequestBodyTooLarge(RequestError):
    def __init__(self, max_bytes: int):
        super().__init__(
            f"the request body is larger than {max_bytes} bytes (server.max_request_body_bytes)", status_code=413
        )


class RequestBodyLimit:
    """Refuse request bodies over ``max_bytes`` with 413, before they are buffered.

    A declared ``Content-Length`` over the limit is answered at once; a chunked
    body is counted as it arrives, and reading past the limit raises
    :class:`RequestBodyTooLarge` in the handler (a :class:`RequestError`, so it
    becomes the same 413).
    """

    def __init__(self, app: ASGIApp, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await request_error_response(RequestBodyTooLarge(self.max_bytes))(scope, receive, send)
            return
        received = 0

        async def counting_receive() -> dict:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise RequestBodyTooLarge(self.max_bytes)
            return message

        await self.app(scope, counting_receive, send)
