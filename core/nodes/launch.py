"""Serving across nodes: the settings every node derives, and the life of a node other than node 0.

Node 0 is ``tercet serve`` as on one host, plus a listener at
``dist_init_addr`` (:mod:`tercet.nodes.hub`). Every other node runs only its
share of the scheduler workers (:mod:`tercet.parallel.topology`): it proves it
holds the node secret and joins node 0 (:mod:`tercet.nodes.handshake`,
:mod:`tercet.nodes.link`), starts its workers with the endpoints node 0
hands it, reports them ready, and then watches both ways: a worker of its own
that dies is reported to node 0 (which stops the server), and a link to node
0 that closes stops this node's workers. Its exit code is 0 only when node 0
asked it to stop.
"""

from __future__ import annotations

import logging
import signal
import socket
import threading

from tercet.config import TercetConfig
from tercet.errors import TercetError
from tercet.formats.default_model import resolve_model
from tercet.ipc.port_args import PortArgs
from tercet.ipc.runtime_dir import RuntimeDirWatcher, create_runtime_dir
from tercet.nodes.address import DistInitAddr, pin_collectives_to
from tercet.nodes.handshake import connect_and_prove
from tercet.nodes.link import NodeLink, NodeLinkError
from tercet.nodes.secret import read_node_secret
from tercet.parallel.description import describe_rank
from tercet.parallel.topology import Topology, scheduler_name
from tercet.processes.context import configure_logging
from tercet.processes.supervisor import FAILED_STOP_GRACE_SECONDS, STOP_GRACE_SECONDS, ChildFailed, ChildSupervisor
from tercet.processes.title import set_process_title
from tercet.processes.watchdog import StepHeartbeat
from tercet.scheduler.process import run_scheduler_process

logger = logging.getLogger("tercet.node")

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def config_for_nodes(config: TercetConfig) -> TercetConfig:
    """What serving over several nodes needs, derived alike on every node: the node secret, read and
    checked, and endpoints other hosts can reach (the tcp transport, on node 0's address, in place
    of the default ipc on loopback)."""
    address = DistInitAddr.parse(config.parallel.dist_init_addr)
    config = config.replace("parallel", node_secret=read_node_secret(config.parallel), node_secret_file=None)
    if config.parallel.node_rank >= config.parallel.nnodes:
        raise TercetError(
            f"parallel.node_rank = {config.parallel.node_rank} is not below parallel.nnodes = {config.parallel.nnodes}"
        )
    Topology.of(config)  # checks that the workers split evenly
    if config.ipc.transport == "ipc":
        config = config.replace("ipc", transport="tcp")
    if config.ipc.tcp_host in LOOPBACK:
        try:
            host = socket.gethostbyname(address.host)
        except OSError as error:
            raise TercetError(f"cannot resolve parallel.dist_init_addr's host {address.host!r}: {error}") from None
        config = config.replace("ipc", tcp_host=host)
    return config


def serve_node(config: TercetConfig) -> int:
    """Run node ``parallel.node_rank`` (not 0) until node 0 stops it (0) or something fails (1)."""
    node = config.parallel.node_rank
    configure_logging(f"node{node}", config.server.log_level)
    set_process_title(f"tercet node {node} (schedulers)")
    config = resolve_model(config)
    topology = Topology.of(config)
    address = DistInitAddr.parse(config.parallel.dist_init_addr)
    try:
        link = connect_and_prove(address, config.parallel.node_secret, config.parallel.dist_init_timeout)
    except NodeLinkError as error:
        logger.error("node %d: %s", node, error)
        return 1
    try:
        return _serve_joined(config, topology, link)
    finally:
        link.close()


def _serve_joined(config: TercetConfig, topology: Topology, link: NodeLink) -> int:
    node = config.parallel.node_rank
    # Spawned workers inherit it: their collectives bind where other nodes can reach them.
    pin_collectives_to(link.local_address)
    welcome = _join(config, link)
    if welcome is None:
        return 1
    runtime_dir = create_runtime_dir()
    watcher = RuntimeDirWatcher(runtime_dir)
    port_args = _node_port_args(welcome, topology, node, link.local_address, runtime_dir)
    supervisor = ChildSupervisor()
    outcome = {"code": 1}
    try:
        _start_workers(config, topology, port_args, supervisor, link)
        outcome["code"] = _serve_until_stopped(config, supervisor, link)
        return outcome["code"]
    except ChildFailed as failure:
        logger.error("%s; stopping this node", failure)
        _tell(link, "failed", name=failure.name, reason=failure.reason)
        return 1
    finally:
        supervisor.stop_all(timeout=STOP_GRACE_SECONDS if outcome["code"] == 0 else FAILED_STOP_GRACE_SECONDS)
        port_args.remove_runtime_dir()
        watcher.stop()


def _join(config: TercetConfig, link: NodeLink) -> dict | None:
    """Ask node 0 to take this node: its welcome (the endpoints), or None, logged, when there is none."""
    node = config.parallel.node_rank
    link.send("join", node=node, host=socket.gethostname(), address=link.local_address,
              description=describe_rank(config))
    try:
        answer = link.receive(timeout=config.parallel.dist_init_timeout)
    except NodeLinkError as error:
        logger.error("node %d: %s (parallel.dist_init_timeout)", node, error)
        return None
    if answer is None or answer["kind"] not in ("welcome", "refused"):
        logger.error("node %d: node 0 at %s closed the link before welcoming this node", node, link.peer_address)
        return None
    if answer["kind"] == "refused":
        logger.error("node %d: node 0 refused this node: %s", node, answer["reason"])
        return None
    return answer


def _node_port_args(welcome: dict, topology: Topology, node: int, own_address: str, runtime_dir: str) -> PortArgs:
    receiving = [rank for rank in range(topology.dp_size) if topology.receiving_node(rank) == node]
    return PortArgs(
        runtime_dir=runtime_dir,
        # The inputs this node's TP ranks 0 bind: the system picks the port, node 0 learns it from `ready`.
        scheduler_inputs=tuple(
            f"tcp://{own_address}:*" if rank in receiving else endpoint
            for rank, endpoint in enumerate(welcome["scheduler_inputs"])
        ),
        detokenizer_input=welcome["detokenizer_input"],
        tokenizer_inputs=tuple(welcome["tokenizer_inputs"]),
        tp_store=welcome["tp_store"],
    )


def _start_workers(config: TercetConfig, topology: Topology, port_args: PortArgs, supervisor: ChildSupervisor,
                   link: NodeLink) -> None:
    """Start this node's share of the workers, then tell node 0 where its DP ranks' inputs are bound."""
    node = config.parallel.node_rank
    workers = topology.workers_on(node)
    children = []
    for worker in workers:
        heartbeat = StepHeartbeat()
        name = scheduler_name(worker.dp_rank, worker.tp_rank, topology.dp_size, topology.tp_size)
        children.append(
            (name, run_scheduler_process, (config, port_args, worker.dp_rank, heartbeat, worker.tp_rank), heartbeat)
        )
    # Started at once: their TP groups come up when their peers on other nodes join too.
    reports = supervisor.start_together(children, config.server.startup_timeout)
    inputs = {str(worker.dp_rank): report["input"] for worker, report in zip(workers, reports) if worker.tp_rank == 0}
    link.send("ready", inputs=inputs)
    logger.info("node %d serves %s for node 0 at %s", node, ", ".join(name for name, *_ in children), link.peer_address)


def _serve_until_stopped(config: TercetConfig, supervisor: ChildSupervisor, link: NodeLink) -> int:
    """Wait for node 0's stop (0, or 1 when it stops on a failure), a worker's death or a signal (1)."""
    node = config.parallel.node_rank
    stop = threading.Event()
    outcome = {"code": 1}

    def on_death(name: str, reason: str) -> None:
        logger.error("%s process died (%s); stopping this node", name, reason)
        _tell(link, "failed", name=name, reason=reason)
        stop.set()

    supervisor.watch(on_death, watchdog_timeout=config.server.watchdog_timeout)
    threading.Thread(target=_follow_node_zero, args=(link, stop, outcome), daemon=True).start()
    for signal_number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signal_number, lambda number, _: _stopped_here(link, stop, node, number))
    stop.wait()
    return outcome["code"]


def _follow_node_zero(link: NodeLink, stop: threading.Event, outcome: dict) -> None:
    while True:
        try:
            message = link.receive()
        except NodeLinkError as error:
            logger.error("%s; stopping this node", error)
            break
        if message is None:
            logger.error("the link to node 0 closed without a stop (node 0 died?); stopping this node")
            break
        if message["kind"] == "stop":
            failed = bool(message.get("failed"))
            # Node 0 says why: its own log may end before it can (it is stopped while it reports).
            why = f" on a failure ({message['reason']})" if failed and message.get("reason") else " on a failure"
            logger.info("node 0 stops the server%s; stopping this node", why if failed else "")
            outcome["code"] = 1 if failed else 0
            break
    stop.set()


def _stopped_here(link: NodeLink, stop: threading.Event, node: int, signal_number: int) -> None:
    name = signal.Signals(signal_number).name
    logger.warning("%s: stopping this node; the server cannot serve without it", name)
    _tell(link, "failed", name=f"node {node} launcher", reason=f"stopped by {name}")
    stop.set()


def _tell(link: NodeLink, kind: str, **fields) -> None:
    try:
        link.send(kind, **fields)
    except OSError:
        pass  # node 0 is gone: it learns nothing more from us anyway


