"""Serve the app with hypercorn on asyncio."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Awaitable, Callable

from hypercorn.asyncio import serve
from hypercorn.config import Config

logger = logging.getLogger(__name__)

LISTEN_BACKLOG = 1024
# Idle keep-alive connections are closed after this long. It must outlast the
# clients' own idle expiry (httpx: 5 s, load balancers: often 60 s): when both
# sides give up at the same moment, a client can send a request on a connection
# the server is closing and get a connection error instead of an answer.
KEEP_ALIVE_SECONDS = 75.0


async def serve_http(
    app,
    host: str,
    port: int,
    shutdown_trigger: Callable[[], Awaitable[None]] | None,
    on_listening: Callable[[], None] | None = None,
    *,
    graceful_timeout: float = 2.0,
    reuse_port: bool = False,
) -> None:
    """Serve ``app`` on ``host:port`` until ``shutdown_trigger`` returns.

    A bind failure (address in use, unknown host) raises ``OSError``.

    With ``shutdown_trigger=None`` hypercorn stops on SIGINT/SIGTERM itself.
    Requests still running at shutdown get ``graceful_timeout`` seconds.

    The socket is bound and listening here, before hypercorn starts, and handed
    to it as ``fd://``: hypercorn has no "now listening" hook, and this way a
    connection made right after ``on_listening`` waits in the backlog instead
    of being refused. It also makes port 0 (any free port) loggable.

    With ``reuse_port`` several processes listen on the same port (SO_REUSEPORT):
    the kernel spreads new connections over them (the API workers).
    """
    listener = _listen(host, port, reuse_port)
    try:
        config = Config()
        config.accesslog = None
        config.errorlog = _hypercorn_logger()
        config.graceful_timeout = graceful_timeout
        config.backlog = LISTEN_BACKLOG
        config.keep_alive_timeout = KEEP_ALIVE_SECONDS
        bound_port = listener.getsockname()[1]
        logger.info("tercet listening on http://%s:%d", _url_host(host), bound_port)
        if on_listening is not None:
            on_listening()
        # hypercorn owns (and closes) a duplicate; ours is closed below.
        config.bind = [f"fd://{os.dup(listener.fileno())}"]
        await serve(app, config, shutdown_trigger=shutdown_trigger)
    finally:
        listener.close()


def _listen(host: str, port: int, reuse_port: bool = False) -> socket.socket:
    listener = _bound_socket(host, port, reuse_port)
    try:
        listener.listen(LISTEN_BACKLOG)
    except OSError:
        listener.close()
        raise
    return listener


def _bound_socket(host: str, port: int, reuse_port: bool) -> socket.socket:
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    listener = socket.socket(family, kind, proto)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        listener.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        listener.bind(address)
    except OSError:
        listener.close()
        raise
    return listener


def reserve_shared_port(host: str, port: int) -> socket.socket:
    """Hold ``host:port`` for the API workers: bound with SO_REUSEPORT but not listening, so no
    connection comes to it, the workers can all bind it, and port 0 becomes one port for all.
    A port already in use by anything else is refused here (``OSError``), not shared."""
    with _bound_socket(host, port, reuse_port=False) as probe:
        port = probe.getsockname()[1]
    return _bound_socket(host, port, reuse_port=True)


def _hypercorn_logger() -> logging.Logger:
    # hypercorn logs its own "Running on …" at INFO; the line above says the
    # same, so only its warnings and errors come through.
    hypercorn_logger = logging.getLogger("tercet.http.hypercorn")
    if hypercorn_logger.level == logging.NOTSET:
        hypercorn_logger.setLevel(logging.WARNING)
    return hypercorn_logger


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
