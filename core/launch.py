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
import functools
import logging
from concurrent.futures import Future, ThreadPoolExecutor

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
from tercet.processes.api_worker_group import ApiWorkerGroup
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
    config, context, port_args = _set_up(config)
    # Removes the directory if this process dies without its finally (SIGKILL, OOM).
    watcher = RuntimeDirWatcher(port_args.runtime_dir)
    supervisor = ChildSupervisor()
    topology = Topology.of(config)
    hub = None
    exit_code, failure_told = 1, ""
    try:
        if topology.spans_nodes:
            hub, port_args = open_node_hub(config, topology, port_args, supervisor)
        with ThreadPoolExecutor(1, thread_name_prefix="tercet-api-ahead") as ahead:
            # The API side's imports and tokenizer load while the children start, not after.
            api_side = ahead.submit(_prepare_api_side, config)
            port_args, first_report = _start_children(config, topology, port_args, supervisor, hub)
            exit_code = _serve(context, port_args, supervisor, first_report, api_side)
        return exit_code
    except ChildFailed as failure:
        logger.error("%s; stopping the server", failure)
        failure_told = str(failure)
        return 1
    except BaseException as error:
        # Reported by the caller only after the finally: the other nodes hear of it first, here.
        failure_told = f"{type(error).__name__}: {error}"
        raise
    finally:
        if hub is not None:
            hub.stop(failed=exit_code != 0, reason=failure_told)
        # After a failure the server must be gone within seconds: less grace for stragglers.
        supervisor.stop_all(timeout=STOP_GRACE_SECONDS if exit_code == 0 else FAILED_STOP_GRACE_SECONDS)
        port_args.remove_runtime_dir()
        watcher.stop()


def _set_up(config: TercetConfig) -> tuple[TercetConfig, ProcessContext, PortArgs]:
    """This process's logging and title, the plugins, the model resolved, and the IPC endpoints (logged)."""
    configure_logging("server", config.server.log_level)
    num_workers = config.server.api_workers
    set_process_title("tercet server (http api, tokenizer)" if num_workers == 1 else "tercet server")
    context = ProcessContext.create(config)
    config = resolve_model(config)
    context = dataclasses.replace(context, config=config)
    _warn_if_the_serializer_trusts_its_peers(context)
    for removed in sweep_abandoned_runtime_dirs():
        logger.info("removed %s, left behind by a server that is gone", removed)
    port_args = PortArgs.create(context.create_transport(), dp_size=config.scheduler.dp_size, api_workers=num_workers)
    logger.info(
        "IPC endpoints: scheduler %s, detokenizer %s, tokenizer %s",
        ", ".join(port_args.scheduler_inputs), port_args.detokenizer_input, ", ".join(port_args.tokenizer_inputs),
    )
    return config, context, port_args


def _prepare_api_side(config: TercetConfig):
    """The HTTP side's modules, and the tokenizer when this process serves HTTP itself (one API worker)."""
    from tercet.http.server import api_process  # noqa: F401 (imported for its cost, off the start's critical path)
    from tercet.tokenizer.loading import load_tokenizer

    return load_tokenizer(config.model.path) if config.server.api_workers == 1 else None


def _serve(context: ProcessContext, port_args: PortArgs, supervisor: ChildSupervisor, first_report: dict,
           api_side: Future) -> int:
    """The API side: in this process, or in ``server.api_workers`` processes of its own."""
    from tercet.http.server.api_process import serve_api

    config = context.config
    tokenizer = api_side.result()
    if config.server.api_workers > 1:
        return serve_api_workers(config, port_args, supervisor, first_report)
    watch = functools.partial(supervisor.watch, watchdog_timeout=config.server.watchdog_timeout)
    return asyncio.run(serve_api(context, port_args, watch, first_report["context_len"],
                                 ModelAbilities.from_dict(first_report), tokenizer=tokenizer))


def serve_api_workers(config: TercetConfig, port_args: PortArgs, supervisor: ChildSupervisor, first_report: dict) -> int:
    """``server.api_workers`` processes serve HTTP on one port (:mod:`tercet.processes.api_worker_group`)."""
    from tercet.http.server.api_worker import run_api_worker_process
    from tercet.http.server.hypercorn_server import reserve_shared_port

    server = config.server
    try:
        reserved = reserve_shared_port(server.host, server.port)
    except OSError as error:
        raise TercetError(f"cannot listen on {server.host}:{server.port}: {error}") from None
    with reserved:
        # Port 0 asks for any free port: the one reserved, the same for every worker.
        config = dataclasses.replace(config, server=dataclasses.replace(server, port=reserved.getsockname()[1]))
        group = ApiWorkerGroup(supervisor, server.api_workers, server.on_child_failure)
        group.start(
            run_api_worker_process,
            lambda worker: (config, port_args, worker, first_report["context_len"], first_report),
            server.startup_timeout,
        )
        logger.info("%d API workers listening on %s:%d", server.api_workers, server.host, config.server.port)
        return group.serve(server.watchdog_timeout)


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
        "tokenizer_inputs": list(port_args.tokenizer_inputs),
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
