"""The routes plugins register (tercet's own APIs among them), checked and bound to the app.

Each is served as the built-in routes always were: the API key, the body
limit and the browser guard apply to it (they are the app's middleware); a
route that needs the child processes answers 503 at once once one died; one
that generates answers 400 on a model that cannot; a ``RequestError`` becomes
its status in the route's error shape, and any other exception a 500 counted
against the route's plugin (``contained_failures`` in ``/get_server_info``).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from tercet.errors import ConfigError, RequestError
from tercet.http.errors import INTERNAL_ERROR_MESSAGE, error_payload, request_error_response
from tercet.http.server import health
from tercet.model_abilities import ENCODER_CANNOT_GENERATE
from tercet.plugin_host.http_route import HttpRoute
from tercet.plugin_host.manager import PluginRegistries, Registration, create_plugin_manager

# Not a real HTTP status: nginx's "client closed request", for logs only.
CLIENT_CLOSED_REQUEST = 499


@dataclass(frozen=True)
class ServedRoute:
    route: HttpRoute  # its references resolved
    plugin_name: str | None  # None: tercet's own core routes

    @property
    def error_body(self) -> Callable[..., dict]:
        return self.route.error_body or error_payload

    @property
    def documented_path(self) -> str:
        # A route's "{model:path}" is OpenAPI's "{model}": the converter is starlette's.
        return re.sub(r"\{(\w+):\w+\}", r"{\1}", self.route.path)


def installed_route_registrations() -> tuple[Registration, ...]:
    """The HTTP routes of every installed plugin (an app built without its own list serves these)."""
    registries = PluginRegistries.from_plugin_manager(create_plugin_manager())
    return tuple(registries.http_routes.entries.values())


def served_routes(registrations: Iterable[Registration], core_paths: Iterable[str]) -> tuple[ServedRoute, ...]:
    """The registrations checked against the paths tercet serves itself, their references imported."""
    core_paths = frozenset(core_paths)
    served = []
    for registration in registrations:
        if registration.name in core_paths:
            raise ConfigError(f"HTTP route {registration.name!r} is served by tercet itself; "
                              f"plugin {registration.plugin_name!r} cannot register it")
        served.append(ServedRoute(registration.obj.resolved(), registration.plugin_name))
    return tuple(served)


def bind(served: ServedRoute, tokenizer_manager) -> Callable[[Request], Awaitable[Response]]:
    """The starlette endpoint of one route: ``endpoint(request, tokenizer_manager)`` within its checks."""
    route = served.route

    def error(message: str, status_code: int, param: str | None = None) -> Response:
        return JSONResponse(served.error_body(message, status_code, param, None), status_code=status_code)

    async def handle(request: Request) -> Response:
        if route.needs_children:
            reason = health.unhealthy_reason(tokenizer_manager)
            if reason is not None:
                # No Retry-After: the server will not recover by itself.
                return error(f"the server is unhealthy: {reason}", 503)
        abilities = getattr(tokenizer_manager, "abilities", None)
        if route.generates and abilities is not None and not abilities.can_generate:
            return error(ENCODER_CANNOT_GENERATE, 400, "model")
        try:
            return await route.endpoint(request, tokenizer_manager)
        except RequestError as exc:
            return request_error_response(exc, served.error_body)
        except HTTPException:
            raise  # a plugin's deliberate status; the app's handler formats it
        except ClientDisconnect:
            return Response(status_code=CLIENT_CLOSED_REQUEST)
        except Exception:
            # One broken request must not take the server down with it.
            tokenizer_manager.failures.record("http_handler", f"{request.method} {request.url.path} failed",
                                              plugin=served.plugin_name)
            return error(INTERNAL_ERROR_MESSAGE, 500)

    return handle
