"""The API side of a server: the TokenizerManager and the HTTP app, until a signal or a failure.

With ``server.api_workers = 1`` it runs in the main process, beside the supervisor of
the children; with more, each API worker process runs it
(:mod:`tercet.http.server.api_worker`), listening on the same port as the others.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable

from tercet.errors import TercetError
from tercet.frontend.tokenizer_manager import TokenizerManager
from tercet.http.server.app import create_app
from tercet.http.server.hypercorn_server import serve_http
from tercet.ipc.control_messages import AbortAllReq
from tercet.ipc.port_args import PortArgs
from tercet.ipc.result_routes import ApiWorker
from tercet.model_abilities import ModelAbilities
from tercet.processes.context import ProcessContext
from tercet.tokenizer.loading import load_tokenizer

logger = logging.getLogger("tercet.launch")

# How the API side learns that a child died: called once with ChildDeaths.on_death.
WatchChildren = Callable[[Callable[[str, str], None]], None]


async def serve_api(context: ProcessContext, port_args: PortArgs, watch_children: WatchChildren, context_len: int,
                    abilities: ModelAbilities | None = None, *, worker: ApiWorker = ApiWorker(),
                    on_listening: Callable[[TokenizerManager], None] | None = None,
                    stop_signals: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM), tokenizer=None) -> int:
    """Serve HTTP until a signal in ``stop_signals`` (drained: exit code 0) or a child's death (1).
    ``on_listening`` is called once the port is bound; ``tokenizer``: the model's, if already loaded."""
    config = context.config
    tokenizer_manager = TokenizerManager(
        context, port_args, tokenizer or load_tokenizer(config.model.path), config.model.served_model_name,
        context_len, abilities, worker,
    )
    tokenizer_manager.start()
    app = create_app(
        tokenizer_manager,
        api_key=config.server.api_key,
        routes=context.registries.http_routes.entries.values(),
        health_generate_timeout=config.server.health_generate_timeout,
        max_request_body_bytes=config.server.max_request_body_bytes,
        bound_host=config.server.host,
        allowed_origins=config.server.allowed_origins,
        allowed_hosts=config.server.allowed_hosts,
    )
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    graceful_stop = GracefulStop(tokenizer_manager, config.server.shutdown_timeout, stop)
    for signal_number in stop_signals:
        loop.add_signal_handler(signal_number, graceful_stop.on_signal, signal_number)
    child_deaths = ChildDeaths(tokenizer_manager, config.server.on_child_failure, loop, stop)
    watch_children(child_deaths.on_death)
    context.plugin_manager.hook.tercet_startup(component="server", config=config)
    try:
        await serve_http(
            app, config.server.host, config.server.port, shutdown_trigger=stop.wait,
            on_listening=None if on_listening is None else lambda: on_listening(tokenizer_manager),
            graceful_timeout=HTTP_CLOSE_SECONDS, reuse_port=worker.count > 1,
        )
    except OSError as error:
        raise TercetError(f"cannot listen on {config.server.host}:{config.server.port}: {error}") from None
    finally:
        context.plugin_manager.hook.tercet_shutdown(component="server")
        tokenizer_manager.close()
    return child_deaths.exit_code


class ChildDeaths:
    """What the API process does when a child dies (called on the supervisor's thread): end the
    requests in flight, then stop the server, or stay up answering 503 (``server.on_child_failure``)."""

    def __init__(self, tokenizer_manager, on_child_failure: str, loop: asyncio.AbstractEventLoop, stop: asyncio.Event):
        self.tokenizer_manager = tokenizer_manager
        self.stays_up = on_child_failure == "unhealthy"
        self.loop = loop
        self.stop = stop
        self.exit_code = 0

    def on_death(self, name: str, reason: str) -> None:
        self.exit_code = 1
        manager = self.tokenizer_manager
        manager.unhealthy_reason = f"{name} process died ({reason})"
        self.abort_requests_of_a_dead_worker(name)
        # With a child dead the outputs of requests in flight will never come.
        end_requests = (manager.fail_requests_in_flight, f"the server is unhealthy: {manager.unhealthy_reason}")
        if self.stays_up:
            # Stay up so the failure is visible: health checks and generation answer 503.
            logger.error(
                "%s process died (%s); the server stays up and answers 503 (server.on_child_failure = unhealthy)",
                name, reason,
            )
            _call_in_loop(self.loop, *end_requests)
            return
        logger.error("%s process died (%s); stopping the server", name, reason)
        _call_in_loop(self.loop, *end_requests)
        _call_in_loop(self.loop, self.stop.set)

    def abort_requests_of_a_dead_worker(self, name: str) -> None:
        """A dead API worker's requests would run on in the ranks with nobody to take their
        outputs: abort every request (the server now answers 503 anyway), freeing their KV."""
        if name.startswith("api worker"):
            manager = self.tokenizer_manager
            _call_in_loop(self.loop, manager.router.send_to_all_ranks, AbortAllReq(manager.worker.tag("dead-worker")))


# Once requests in flight are finished or ended, the seconds hypercorn gives
# their connections to send what is left.
HTTP_CLOSE_SECONDS = 1.0


def _call_in_loop(loop: asyncio.AbstractEventLoop, function, *args) -> None:
    try:
        loop.call_soon_threadsafe(function, *args)
    except RuntimeError:  # the loop already closed: the server is stopping anyway
        pass


class GracefulStop:
    """The first SIGTERM/SIGINT drains: new requests get 503 while those in flight
    finish, for up to ``server.shutdown_timeout`` seconds; then the rest are ended
    with a 503 and HTTP stops (the children are stopped after it, in reverse
    start order). A second signal stops at once."""

    POLL_SECONDS = 0.05

    def __init__(self, tokenizer_manager, timeout: float, stop: asyncio.Event):
        self.tokenizer_manager = tokenizer_manager
        self.timeout = timeout
        self.stop = stop
        self.drain_task: asyncio.Task | None = None

    def on_signal(self, signal_number: int) -> None:
        name = signal.Signals(signal_number).name
        if self.drain_task is None:
            self.drain_task = asyncio.get_running_loop().create_task(self.drain(name))
            return
        logger.warning("%s again: stopping without waiting for requests in flight", name)
        self.end_the_rest()

    async def drain(self, signal_name: str) -> None:
        self.tokenizer_manager.is_draining = True
        in_flight = self.tokenizer_manager.num_requests_in_flight
        logger.info(
            "%s: refusing new requests; waiting up to %g s (server.shutdown_timeout) for %d in flight",
            signal_name, self.timeout, in_flight,
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        while self.tokenizer_manager.num_requests_in_flight and loop.time() < deadline and not self.stop.is_set():
            await asyncio.sleep(self.POLL_SECONDS)
        self.end_the_rest()

    def end_the_rest(self) -> None:
        left = self.tokenizer_manager.num_requests_in_flight
        if left:
            logger.warning("ending %d requests still in flight: the server is stopping", left)
            self.tokenizer_manager.fail_requests_in_flight(
                f"the server stopped before the request finished (server.shutdown_timeout = {self.timeout:g} s)"
            )
        self.stop.set()
