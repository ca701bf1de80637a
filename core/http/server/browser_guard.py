"""Refusing what another site's page can make a browser send: a foreign ``Origin``, a ``Host``
that is not the server's, or a body that does not say it is JSON.

Any page the user opens can make their browser send requests to a server on
their machine or network. A form POST needs nobody's permission, so without
these checks a page could abort everyone's requests, pause the server or swap
its weights; a page that rebinds its own DNS name to the server's address can
even read the answers, since its requests then look same-origin to the browser.
Three checks close that, with or without ``server.api_key``:

- ``Host``: a rebinding page reaches the server under the attacker's name, which
  the ``Host`` header still carries. A name that is not one of the server's is
  refused with 403 unless ``server.allowed_hosts`` lists it. An IP address cannot
  be rebound, so any address passes; so does a request without ``Host``. Ports are
  not compared: behind a port mapping the name is what tells the server's own
  requests from a rebinding page's.
- ``Origin``: browsers name the page's origin on every cross-origin request. One
  that is not this server's own (its scheme, and the host and port of ``Host``) is
  refused with 403 unless ``server.allowed_origins`` lists it.
- A request with a body must send it as JSON (``Content-Type: application/json`` or
  ``application/*+json``), else 415: what a form or a plain ``fetch`` may send to another
  site without asking (urlencoded, multipart, text/plain, or no type) never is.

Clients that are not browsers send no ``Origin`` and the ``Host`` they connected
to, and pass unchanged.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from tercet.http.errors import error_response

ANY = "*"
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
ALL_INTERFACES = frozenset({"", "0.0.0.0", "::"})
DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class HostNames:
    """The names a request may address the server by."""

    names: frozenset[str]
    any_name: bool = False

    @classmethod
    def of_server(cls, bound_host: str, allowed: Iterable[str] = ()) -> HostNames:
        """The bound host; localhost by every spelling when bound to loopback or to all
        interfaces (then this machine's own name too); and the ``allowed`` ones."""
        bound = _bare(bound_host)
        names = {bound, *(_bare(name) for name in allowed)}
        if bound in ALL_INTERFACES or _is_loopback(bound):
            names |= LOOPBACK_NAMES
        if bound in ALL_INTERFACES:
            names.add(socket.gethostname().lower())
        return cls(frozenset(names - ALL_INTERFACES - {ANY}), any_name=ANY in names)

    def allows(self, host: str) -> bool:
        return self.any_name or host in self.names or _is_ip_address(host)


@dataclass(frozen=True)
class Authority:
    """The host (lower case, no brackets) and port of a ``Host`` header or an origin."""

    host: str
    port: int | None

    @classmethod
    def parse(cls, text: str) -> Authority | None:
        """``Authority`` of ``host[:port]``, or None when it is not one."""
        try:
            parts = urlsplit("//" + text)
            return cls(parts.hostname or "", parts.port) if parts.hostname else None
        except ValueError:  # a port that is not a number
            return None


def is_own_origin(origin: str, host: Authority, scheme: str = "http") -> bool:
    """The page at ``origin`` was served by the server that ``host`` addresses over ``scheme``:
    same scheme, same host, same port (a URL and a Host header leave out the scheme's default)."""
    try:
        parts = urlsplit(origin)
        origin_port = parts.port
    except ValueError:
        return False
    if parts.scheme != scheme or scheme not in DEFAULT_PORTS or parts.hostname != host.host:
        return False
    default = DEFAULT_PORTS[scheme]
    return (origin_port or default) == (host.port or default)


class BrowserGuard:
    """ASGI middleware: 403 for a foreign ``Origin`` or a ``Host`` that is none of the server's names,
    415 for a body that is not JSON.

    ``host_check_exempt``: paths whose ``Host`` is not checked (load balancers probe
    health under whatever name they know the server by).
    """

    def __init__(self, app: ASGIApp, host_names: HostNames, allowed_origins: Iterable[str] = (),
                 host_check_exempt: Iterable[str] = ()):
        self.app = app
        self.host_names = host_names
        origins = {origin.lower().rstrip("/") for origin in allowed_origins}
        self.any_origin = ANY in origins
        self.allowed_origins = frozenset(origins - {ANY})
        self.host_check_exempt = frozenset(host_check_exempt)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = Headers(scope=scope)
        refusal = self.foreign_request_problem(headers, scope["path"], scope.get("scheme", "http"))
        if refusal is not None:
            await error_response(refusal, 403)(scope, receive, send)
            return
        refusal = body_type_problem(headers)
        if refusal is not None:
            await error_response(refusal, 415)(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def foreign_request_problem(self, headers: Headers, path: str, scheme: str) -> str | None:
        host_header = headers.get("host")
        host = Authority.parse(host_header) if host_header is not None else None
        if host_header is not None and path not in self.host_check_exempt and not self._is_own_name(host):
            return (f"requests addressed to {host_header!r} are refused: it is not a name of this server "
                    "(server.allowed_hosts adds names)")
        origin = headers.get("origin")
        if origin is None or self._is_allowed_origin(origin.lower(), host, scheme):
            return None
        return (f"requests from pages of {origin!r} are refused: it is not this server's origin "
                "(server.allowed_origins adds origins)")

    def _is_own_name(self, host: Authority | None) -> bool:
        return host is not None and self.host_names.allows(host.host)

    def _is_allowed_origin(self, origin: str, host: Authority | None, scheme: str) -> bool:
        if self.any_origin or origin in self.allowed_origins:
            return True
        return host is not None and is_own_origin(origin, host, scheme)


def body_type_problem(headers: Headers) -> str | None:
    """Why a request's body may not be read as JSON, or None (no body, or a JSON one)."""
    length = headers.get("content-length")
    has_body = "transfer-encoding" in headers or (length is not None and length.strip() not in ("", "0"))
    if not has_body:
        return None
    content_type = headers.get("content-type")
    media_type = (content_type or "").partition(";")[0].strip().lower()
    if media_type == "application/json" or (media_type.startswith("application/") and media_type.endswith("+json")):
        return None
    shown = f"Content-Type {content_type!r}" if content_type else "no Content-Type"
    return (f"a request body must be JSON sent as Content-Type: application/json, not {shown} "
            "(curl: -H 'Content-Type: application/json')")


def _bare(host: str) -> str:
    return host.strip().lower().removeprefix("[").removesuffix("]")


def _is_ip_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _is_loopback(host: str) -> bool:
    return host in LOOPBACK_NAMES or (_is_ip_address(host) and ipaddress.ip_address(host).is_loopback)
