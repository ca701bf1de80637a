"""The starlette application: built-in routes, plugin routes, API key, error handling."""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Iterable, Sequence

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from tercet.errors import RequestError
from tercet.http import chat_page, control_api, embeddings_api, health, metrics_api, native_api, openai_api, openapi
from tercet.http.browser_guard import BrowserGuard, HostNames
from tercet.http.errors import error_response, internal_error_response, request_error_response
from tercet.http.health import DEFAULT_HEALTH_GENERATE_TIMEOUT, HealthGenerateProbe
from tercet.model_abilities import ENCODER_CANNOT_GENERATE

Endpoint = Callable[[Request, object], Awaitable[Response]]
RouteSpec = tuple[str, Endpoint, Sequence[str] | None]
# Load balancers and supervisors probe /health and /health_generate without
# credentials (concurrent /health_generate probes share one generation).
# The chat page (and its icon) holds no secret, and asks for the key itself.
UNAUTHENTICATED_PATHS = health.PATHS | chat_page.PATHS
# Not a real HTTP status: nginx's "client closed request", for logs only.
CLIENT_CLOSED_REQUEST = 499
DEFAULT_MAX_REQUEST_BODY_BYTES = 16 * 1024 * 1024
# How long a browser may reuse an allowed origin's preflight answer.
CORS_MAX_AGE_SECONDS = 600


BUILTIN_ROUTES: list[RouteSpec] = [
    *health.ROUTES,
    *openai_api.ROUTES,
    *embeddings_api.ROUTES,
    *native_api.ROUTES,
    *control_api.ROUTES,
    *openapi.ROUTES,
    *chat_page.ROUTES,
    *metrics_api.ROUTES,
]
# Built-in routes that need the child processes: once one died (and the server
# stays up, server.on_child_failure = "unhealthy") they answer 503 at once.
# /metrics is not one: it reads only what the API process holds.
NEEDS_CHILDREN = frozenset(
    path
    for path, _, _ in [*openai_api.ROUTES, *embeddings_api.ROUTES, *native_api.ROUTES, *control_api.ROUTES]
    if path not in openai_api.MODEL_PATHS
)
# Routes that generate text: on an encoder-only model they answer 400 before reading the body.
GENERATION_PATHS = frozenset(path for path, _, _ in [*openai_api.ROUTES, *native_api.ROUTES]) - openai_api.MODEL_PATHS


def create_app(
    tokenizer_manager,
    api_key: str | None = None,
    extra_routes: Iterable[RouteSpec] = (),
    health_generate_timeout: float = DEFAULT_HEALTH_GENERATE_TIMEOUT,
    max_request_body_bytes: int = DEFAULT_MAX_REQUEST_BODY_BYTES,
    bound_host: str = "127.0.0.1",
    allowed_origins: Sequence[str] = (),
    allowed_hosts: Sequence[str] = (),
) -> Starlette:
    """Build the API server's app.

    ``extra_routes`` are ``(path, endpoint, methods)`` from plugins'
    ``register_http_routes``; ``endpoint(request, tokenizer_manager)`` returns a
    starlette response. Built-in routes win over a plugin route with the same path.
    ``health_generate_timeout`` bounds ``GET /health_generate``'s generation, in seconds;
    a request body over ``max_request_body_bytes`` is refused with 413. Requests from
    other sites' pages, or addressed to a name that is not the server's (``bound_host``'s),
    are refused with 403 unless ``allowed_origins`` / ``allowed_hosts`` allow them
    (:mod:`tercet.http.browser_guard`), and so is a body that is not JSON (415).
    """
    routes = [
        Route(path, _bind(endpoint, tokenizer_manager, path in NEEDS_CHILDREN, path in GENERATION_PATHS),
              methods=methods, name=endpoint.__name__)
        for path, endpoint, methods in BUILTIN_ROUTES
    ] + [
        Route(path, _bind(endpoint, tokenizer_manager), methods=methods, name=endpoint.__name__)
        for path, endpoint, methods in extra_routes
    ]
    middleware = [
        *_browser_middleware(bound_host, allowed_origins, allowed_hosts),
        *([Middleware(BearerTokenAuth, api_key=api_key)] if api_key else []),
        Middleware(RequestBodyLimit, max_bytes=max_request_body_bytes),
    ]
    exception_handlers = {HTTPException: _http_exception, Exception: _unhandled_exception}
    app = Starlette(routes=routes, middleware=middleware, exception_handlers=exception_handlers)
    app.state.health_generate_probe = HealthGenerateProbe(tokenizer_manager, health_generate_timeout)
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


def _bind(endpoint: Endpoint, tokenizer_manager, needs_children: bool = False,
          generates: bool = False) -> Callable[[Request], Awaitable[Response]]:
    async def handle(request: Request) -> Response:
        if needs_children:
            reason = health.unhealthy_reason(tokenizer_manager)
            if reason is not None:
                # No Retry-After: the server will not recover by itself.
                return error_response(f"the server is unhealthy: {reason}", 503)
        abilities = getattr(tokenizer_manager, "abilities", None)
        if generates and abilities is not None and not abilities.can_generate:
            return error_response(ENCODER_CANNOT_GENERATE, 400, "model")
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
            tokenizer_manager.failures.record("http_handler", f"{request.method} {request.url.path} failed")
            return internal_error_response()

    return handle


async def _http_exception(request: Request, exc: HTTPException) -> Response:
    # Routing errors (404 unknown path, 405 wrong method) in the same shape as the rest.
    return error_response(exc.detail, exc.status_code, headers=exc.headers)


async def _unhandled_exception(request: Request, exc: Exception) -> Response:
    # What escapes a handler's own net (a middleware's failure, say) reaches
    # starlette's last-resort handler: JSON there too, never text/plain.
    # starlette re-raises it afterwards, so the server logs the traceback.
    return internal_error_response()


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
