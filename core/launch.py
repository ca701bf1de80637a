"""Launching a server: endpoints, children in order, then the API.

Order: PortArgs names every endpoint -> the scheduler binds and reports ready
-> the detokenizer binds and reports ready -> the TokenizerManager connects ->
HTTP listens. Any failure on the way, or a child dying later, stops
everything with a message naming the child, a non-zero exit and no process
left behind; with ``server.on_child_failure = "unhealthy"`` a child dying later
instead leaves the server up, answering 503 until it is stopped (then exiting 1).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import signal

from tercet.config import TercetConfig
from tercet.detokenizer.detokenizer_manager import run_detokenizer_process
from tercet.errors import TercetError
from tercet.formats.default_model import resolve_model
from tercet.ipc.port_args import PortArgs
from tercet.ipc.runtime_dir import RuntimeDirWatcher, sweep_abandoned_runtime_dirs
from tercet.model_abilities import ModelAbilities
from tercet.nodes.address import DistInitAddr, pin_collectives_to
from tercet.nodes.hub import NodeHub
from tercet.nodes.launch import config_for_nodes, serve_node
from tercet.parallel.description import describe_rank
from tercet.parallel.rendezvous import run_rendezvous_process
from tercet.parallel.topology import Topology, scheduler_name
from tercet.processes.context import ProcessContext, configure_logging
from tercet.processes.supervisor import FAILED_STOP_GRACE_SECONDS, STOP_GRACE_SECONDS, ChildFailed, ChildSupervisor
from tercet.processes.title import set_process_title
from tercet.processes.watchdog import StepHeartbeat
from tercet.scheduler.process import run_scheduler_process

logger = logging.getLogger("tercet.launch")


def launch_server(config: TercetConfig) -> int:
    """Run a server until SIGINT/SIGTERM (exit code 0) or a failure (non-zero).

    With ``parallel.nnodes > 1`` this is node 0 of several; on the others
    (``parallel.node_rank > 0``) it runs only that node's workers (:mod:`tercet.nodes.launch`).
    """
    if config.parallel.nnodes > 1:
        config = config_for_nodes(config)
        if config.parallel.node_rank != 0:
            return serve_node(config)
    configure_logging("server", config.server.log_level)
    set_process_title("tercet server (http api, tokenizer)")
    context = ProcessContext.create(config)
    config = resolve_model(config)
    context = dataclasses.replace(context, config=config)
    _warn_if_the_serializer_trusts_its_peers(context)
    for removed in sweep_abandoned_runtime_dirs():
        logger.info("removed %s, left behind by a server that is gone", removed)
    port_args = PortArgs.create(context.create_transport(), dp_size=config.scheduler.dp_size)
    # Removes the directory if this process dies without its finally (SIGKILL, OOM).
    watcher = RuntimeDirWatcher(port_args.runtime_dir)
    logger.info(
        "IPC endpoints: scheduler %s, detokenizer %s, tokenizer %s",
        ", ".join(port_args.scheduler_inputs), port_args.detokenizer_input, port_args.tokenizer_input,
    )
    supervisor = ChildSupervisor()
    topology = Topology.of(config)
    hub = None
    exit_code = 1
    try:
        if topology.spans_nodes:
            hub, port_args = open_node_hub(config, topology, port_args, supervisor)
        port_args, first_report = _start_children(config, topology, port_args, supervisor, hub)
        exit_code = asyncio.run(serve_api(context, port_args, supervisor, first_report["context_len"],
                                          ModelAbilities.from_dict(first_report)))
        return exit_code
    except ChildFailed as failure:
        logger.error("%s; stopping the server", failure)
        return 1
    finally:
        if hub is not None:
            hub.stop(failed=exit_code != 0)
        # After a failure the server must be gone within seconds: less grace for stragglers.
        supervisor.stop_all(timeout=STOP_GRACE_SECONDS if exit_code == 0 else FAILED_STOP_GRACE_SECONDS)
        port_args.remove_runtime_dir()
        watcher.stop()


def _warn_if_the_serializer_trusts_its_peers(context: ProcessContext) -> None:
    if getattr(context.chosen("serializers"), "is_trusted_only", False):
        logger.warning(
            "ipc.serializer = %r can run code chosen by anyone able to write to the IPC endpoints; "
            "use it only when every process on them is trusted", context.config.ipc.serializer,
        )


def _start_children(config: TercetConfig, topology: Topology, port_args: PortArgs, supervisor: ChildSupervisor,
                    hub: NodeHub | None) -> tuple[PortArgs, dict]:
    """The schedulers and the detokenizer. On one node every endpoint is known already, so the
    detokenizer starts beside the first schedulers; across nodes it waits for the inputs the
    other nodes bound. Returns what :func:`_start_schedulers` does."""
    detokenizer = ("detokenizer", run_detokenizer_process, (config, port_args), None)
    early = () if topology.spans_nodes else (detokenizer,)
    port_args, first_report = _start_schedulers(config, topology, port_args, supervisor, hub, early)
    if not early:
        supervisor.start("detokenizer", run_detokenizer_process, (config, port_args), config.server.startup_timeout)
    return port_args, first_report


def _start_schedulers(config: TercetConfig, topology: Topology, port_args: PortArgs, supervisor: ChildSupervisor,
                      hub: NodeHub | None, with_first: tuple = ()) -> tuple[PortArgs, dict]:
    """Start this node's scheduler workers, rank by rank (and the children ``with_first`` beside
    the first rank's), and wait for the other nodes' when there are any.

    Returns the endpoints with every rank's input as bound (a rank on another node picked its
    own port) and data-parallel rank 0's ready report (its context length and what the model can do)."""
    timeout = config.server.startup_timeout
    inputs: dict[int, str] = {}
    first_report: dict = {}
    for rank, workers in topology.groups_on(0).items():
        # A data-parallel rank is tp_size processes, which only come up together.
        group = []
        for worker in workers:
            heartbeat = StepHeartbeat()
            name = scheduler_name(rank, worker.tp_rank, topology.dp_size, topology.tp_size)
            group.append((name, run_scheduler_process, (config, port_args, rank, heartbeat, worker.tp_rank), heartbeat))
        reports = supervisor.start_together([*group, *(with_first if rank == 0 else ())], timeout)
        if workers[0].tp_rank == 0:
            inputs[rank] = reports[0]["input"]
        if rank == 0:
            first_report = reports[0]
    if hub is not None:
        inputs.update(hub.wait_until_ready(timeout))
    bound = tuple(inputs[rank] for rank in range(topology.dp_size))
    return dataclasses.replace(port_args, scheduler_inputs=bound), first_report


def open_node_hub(config: TercetConfig, topology: Topology, port_args: PortArgs, supervisor: ChildSupervisor):
    """Node 0's part in serving over nodes: the rendezvous for TP groups, and the hub the nodes join."""
    host = config.ipc.tcp_host
    # Spawned children inherit it: their collectives bind where other nodes can reach them.
    pin_collectives_to(host)
    rendezvous = supervisor.start(
        "rendezvous", run_rendezvous_process, (config, host), config.server.startup_timeout
    )
    port_args = dataclasses.replace(port_args, tp_store=rendezvous["store"])
    welcome = {
        "scheduler_inputs": list(port_args.scheduler_inputs),
        "detokenizer_input": port_args.detokenizer_input,
        "tokenizer_input": port_args.tokenizer_input,
        "tp_store": port_args.tp_store,
    }
    hub = NodeHub(
        DistInitAddr.parse(config.parallel.dist_init_addr), topology, describe_rank(config), welcome, supervisor,
        join_timeout=config.parallel.dist_init_timeout, secret=config.parallel.node_secret,
    )
    logger.info(
        "node 0 of %d: waiting at %s for nodes %s", topology.nnodes, config.parallel.dist_init_addr,
        ", ".join(str(node) for node in hub.other_nodes),
    )
    return hub, port_args


async def serve_api(context: ProcessContext, port_args: PortArgs, supervisor: ChildSupervisor, context_len: int,
                    abilities: ModelAbilities | None = None) -> int:
    from tercet.frontend.tokenizer_manager import TokenizerManager
    from tercet.http.app import create_app
    from tercet.http.server import serve_http
    from tercet.tokenizer.loading import load_tokenizer

    config = context.config
    tokenizer_manager = TokenizerManager(
        context, port_args, load_tokenizer(config.model.path), config.model.served_model_name, context_len, abilities
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
    for signal_number in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signal_number, graceful_stop.on_signal, signal_number)
    child_deaths = ChildDeaths(tokenizer_manager, config.server.on_child_failure, loop, stop)
    supervisor.watch(child_deaths.on_death, watchdog_timeout=config.server.watchdog_timeout)
    context.plugin_manager.hook.tercet_startup(component="server", config=config)
    try:
        await serve_http(
            app, config.server.host, config.server.port, shutdown_trigger=stop.wait,
            graceful_timeout=HTTP_CLOSE_SECONDS,
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
