"""Node 0's side of the node links: who joined, who is ready, what failed on another node.

Node 0 listens at ``dist_init_addr``. A node that joins is compared with node
0 (its config description) and welcomed with the endpoints to serve with, or
refused, naming the difference. Then its link is read for the server's life:
``ready`` gives the inputs its DP ranks bound; ``failed``, or the link closing
while node 0 is not stopping, is reported to the supervisor like a child's
death, naming the worker and the node's host. Nodes that have not joined
within ``parallel.dist_init_timeout`` fail the start.
"""

from __future__ import annotations

import logging
import threading
import time

from tercet.nodes.address import DistInitAddr
from tercet.nodes.link import NodeLink, NodeLinkError, listen_for_nodes
from tercet.parallel.description import first_difference
from tercet.parallel.topology import Topology, scheduler_name
from tercet.processes.supervisor import ChildFailed, ChildSupervisor

logger = logging.getLogger(__name__)


class NodeHub:
    def __init__(self, address: DistInitAddr, topology: Topology, description: dict, welcome: dict,
                 supervisor: ChildSupervisor, join_timeout: float):
        self.address = address
        self.topology = topology
        self.description = description
        self.welcome = welcome
        self.supervisor = supervisor
        self.join_timeout = join_timeout
        self.listener = listen_for_nodes(address)
        self.links: dict[int, NodeLink] = {}
        self.hosts: dict[int, str] = {}
        self.ready_nodes: set[int] = set()
        self.inputs: dict[int, str] = {}
        self.condition = threading.Condition()
        self.is_stopping = False
        threading.Thread(target=self._accept, name="tercet-node-hub", daemon=True).start()
        self.join_timer = threading.Timer(join_timeout, self._fail_missing_nodes)
        self.join_timer.daemon = True
        self.join_timer.start()

    @property
    def other_nodes(self) -> range:
        return range(1, self.topology.nnodes)

    def workers_of(self, node: int) -> str:
        dp_size, tp_size = self.topology.dp_size, self.topology.tp_size
        return ", ".join(scheduler_name(worker.dp_rank, worker.tp_rank, dp_size, tp_size)
                         for worker in self.topology.workers_on(node))

    def wait_until_ready(self, timeout: float) -> dict[int, str]:
        """Block until every other node's workers are ready; the inputs they bound, by DP rank."""
        deadline = time.monotonic() + timeout
        with self.condition:
            while len(self.ready_nodes) < len(self.other_nodes):
                self.supervisor.raise_reported_failure()
                if time.monotonic() > deadline:
                    missing = [node for node in self.other_nodes if node not in self.ready_nodes]
                    raise ChildFailed(f"node {missing[0]}", f"not ready after {timeout:.0f} s (server.startup_timeout)")
                self.condition.wait(0.2)
            return dict(self.inputs)

    def stop(self, failed: bool) -> None:
        """Tell every node to stop (``failed``: the server is stopping on a failure), and stop listening."""
        self.is_stopping = True
        self.join_timer.cancel()
        self.listener.close()
        with self.condition:
            links = list(self.links.values())
        for link in links:
            try:
                link.send("stop", failed=failed)
            except OSError:
                pass  # that node is gone already
            link.close()

    # -- the links ---------------------------------------------------------

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return  # closed: node 0 is stopping
            threading.Thread(target=self._serve, args=(NodeLink(connection),), daemon=True).start()

    def _serve(self, link: NodeLink) -> None:
        node = self._admit(link)
        if node is None:
            link.close()
            return
        where = self.hosts[node]
        while True:
            try:
                message = link.receive()
            except NodeLinkError as error:
                message = {"kind": "failed", "name": f"node {node}", "reason": str(error)}
            if message is None:
                if not self.is_stopping:
                    self.supervisor.report_failure(
                        f"node {node} launcher ({where})",
                        f"its link to node 0 closed: the launcher died or its host went away; "
                        f"it ran {self.workers_of(node)}",
                    )
                return
            if message["kind"] == "ready":
                try:
                    inputs = {int(rank): str(endpoint) for rank, endpoint in message["inputs"].items()}
                except (KeyError, AttributeError, TypeError, ValueError):
                    # A node that says nonsense cannot be served with: it fails the start, named.
                    self.supervisor.report_failure(f"node {node} ({where})", f"sent a malformed ready: {message}")
                    return
                with self.condition:
                    self.inputs.update(inputs)
                    self.ready_nodes.add(node)
                    self.condition.notify_all()
                logger.info("node %d (%s) is ready: %s", node, where, self.workers_of(node))
            elif message["kind"] == "failed":
                name = message.get("name", f"node {node}")
                self.supervisor.report_failure(f"{name} on node {node} ({where})", str(message.get("reason")))
                return

    def _admit(self, link: NodeLink) -> int | None:
        """Read a join, answer it; the node's number when welcomed."""
        try:
            join = link.receive(timeout=self.join_timeout)
        except NodeLinkError as error:
            logger.warning("ignored a connection to %s: %s", self.address, error)
            return None
        if join is None or join["kind"] != "join":
            logger.warning("ignored a connection from %s that did not join", link.peer_address)
            return None
        node, where = join.get("node"), f"host {join.get('host')}, {link.peer_address}"
        with self.condition:
            refusal = self._refusal(node, join.get("description"))
            if refusal is None:
                self.links[node], self.hosts[node] = link, where
        if refusal is not None:
            # Reported before the node hears it, so what the node sees has happened here.
            if isinstance(node, int) and node in self.other_nodes and node not in self.links:
                self.supervisor.report_failure(f"node {node} ({where})", refusal)
            else:
                logger.warning("refused a node joining from %s: %s", link.peer_address, refusal)
            link.send("refused", reason=refusal)
            return None
        link.send("welcome", **self.welcome)
        logger.info("node %d joined from %s; it runs %s", node, where, self.workers_of(node))
        return node

    def _refusal(self, node, description) -> str | None:
        if not isinstance(node, int) or node not in self.other_nodes:
            return f"node rank {node!r} is not one of 1..{self.topology.nnodes - 1} (parallel.nnodes = {self.topology.nnodes})"
        if node in self.links:
            return f"node {node} has joined already, from {self.hosts[node]}"
        if not isinstance(description, dict):
            return "the join did not describe the node's config"
        difference = first_difference(self.description, description)
        if difference is not None:
            return (f"node {node} disagrees with node 0 on {difference}; every node must be started with the same "
                    "config, but for parallel.node_rank")
        return None

    def _fail_missing_nodes(self) -> None:
        with self.condition:
            missing = [node for node in self.other_nodes if node not in self.links]
        if missing and not self.is_stopping:
            nnodes = self.topology.nnodes
            self.supervisor.report_failure(
                f"node {missing[0]}",
                f"did not join within {self.join_timeout:g} s (parallel.dist_init_timeout); start it with "
                f"--nnodes {nnodes} --node-rank {missing[0]} --dist-init-addr {self.address}",
            )
