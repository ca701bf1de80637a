"""What one HTTP route registration holds: its path, methods, endpoint and OpenAPI description.

A plugin calls ``register(path, endpoint, methods, openapi=..., ...)`` from its
``register_http_routes`` hook; :func:`http_route_registration` turns those
arguments into an :class:`HttpRoute` registered under its path, so two plugins
claiming one path fail at start-up naming both, as any kind's duplicate names do.

``endpoint`` and ``openapi`` may be given as ``"module:attribute"`` references,
imported only when the app is built: the built-in route plugins name tercet's
own handler modules that way, and a plugin module stays cheap to import in
every process (none but the API process ever builds the app).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tercet.errors import ConfigError

HTTP_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE"})
# An error body builder: (message, status, param, code) -> the JSON body a client of this route expects.
ErrorBody = Callable[[str, int, "str | None", "str | None"], dict]


@dataclass(frozen=True)
class HttpRoute:
    """One path of the API server and how it is served.

    ``endpoint(request, tokenizer_manager)`` is an async function returning a
    starlette response. ``openapi`` is the path's OpenAPI path item
    (``{"post": {operation}}``), listed in ``/openapi.json`` while the route is
    served. ``needs_children``: answer 503 at once once a child process died
    (false for a route answered from the API process alone). ``generates``:
    answer 400 on a model that cannot generate (an encoder), before reading the
    body. ``error_body``: the error shape of the protocol the route speaks
    (OpenAI's when not given).
    """

    path: str
    endpoint: Callable | str
    methods: tuple[str, ...]
    openapi: Mapping | str | None = None
    needs_children: bool = True
    generates: bool = False
    error_body: ErrorBody | str | None = None

    def resolved(self) -> "HttpRoute":
        """The route with each ``"module:attribute"`` reference replaced by what it names."""
        return HttpRoute(self.path, resolve_reference(self.endpoint), self.methods, resolve_reference(self.openapi),
                         self.needs_children, self.generates, resolve_reference(self.error_body))


def http_route_registration(
    path: str,
    endpoint: Callable | str,
    methods: Sequence[str] | None = None,
    *,
    openapi: Mapping | str | None = None,
    needs_children: bool = True,
    generates: bool = False,
    error_body: ErrorBody | str | None = None,
) -> tuple[str, HttpRoute]:
    """``register``'s arguments for an HTTP route, as the (name, object) every kind's registry keeps."""
    if not isinstance(path, str) or not path.startswith("/"):
        raise ConfigError(f"an HTTP route's path must be a string starting with '/', got {path!r}")
    methods = tuple(method.upper() for method in (methods or ("GET",)))
    unknown = sorted(set(methods) - HTTP_METHODS)
    if unknown:
        raise ConfigError(f"HTTP route {path!r}: unknown methods {unknown}; use {sorted(HTTP_METHODS)}")
    route = HttpRoute(path, endpoint, methods, openapi, needs_children, generates, error_body)
    return path, route


def resolve_reference(value: Any) -> Any:
    """What a ``"module:attribute"`` string names (anything else is returned as it is)."""
    if not isinstance(value, str):
        return value
    module_name, _, attribute = value.partition(":")
    try:
        return getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError, ValueError) as error:
        raise ConfigError(f"HTTP route reference {value!r} names nothing importable: {error}") from None
