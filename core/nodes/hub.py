"""Node 0's side of the node links: who joined, who is ready, what failed on another node.

Node 0 listens at ``dist_init_addr``. A connection must first prove it holds
the node secret (:mod:`tercet.nodes.handshake`) or is closed with nothing said;
joining connections are capped and given ``JOIN_SECONDS``. A node that joins
is compared with node 0 (its config description) and welcomed with the
endpoints to serve with, or refused, naming the key that differs (never node
0's value). Then its link is read for the server's life:
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
from tercet.nodes.handshake import challenge_joining_node
from tercet.nodes.link import NodeLink, NodeLinkError, listen_for_nodes
from tercet.parallel.description import first_differing_key
from tercet.parallel.topology import Topology, scheduler_name
from tercet.processes.supervisor import ChildFailed, ChildSupervisor

logger = logging.getLogger(__name__)

# Connections node 0 holds at once that have not joined yet (proving the node secret, then
# joining), in all and from one address: beyond them a connection is closed unread, and a real
# node tries again. Each has JOIN_SECONDS to prove the secret and join.
MAX_JOINING = 16
MAX_JOINING_PER_ADDRESS = 4
JOIN_SECONDS = 10.0


class NodeHub:
    def __init__(self, address: DistInitAddr, topology: Topology, description: dict, welcome: dict,
                 supervisor: ChildSupervisor, join_timeout: float, secret: str):
        self.address = address
        self.topology = topology
        self.description = description
        self.welcome = welcome
        self.supervisor = supervisor
        self.join_timeout = join_timeout
        self.secret = secret
        self.listener = listen_for_nodes(address)
        self.links: dict[int, NodeLink] = {}
        self.hosts: dict[int, str] = {}
        self.ready_nodes: set[int] = set()
        self.inputs: dict[int, str] = {}
        self.condition = threading.Condition()
        self.is_stopping = False
        self.num_joining: dict[str, int] = {}  # by peer address
        self.num_unproven, self.last_unproven_from = 0, None
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

    def stop(self, failed: bool, reason: str = "") -> None:
        """Tell every node to stop (``failed``: the server is stopping on a failure, ``reason`` says which),
        and stop listening."""
        self.is_stopping = True
        self.join_timer.cancel()
        self.listener.close()
        with self.condition:
            links = list(self.links.values())
        for link in links:
            try:
                link.send("stop", failed=failed, **({"reason": reason} if reason else {}))
            except OSError:
                pass  # that node is gone already
            link.close()

    # -- the links ---------------------------------------------------------

    def _accept(self) -> None:
        while True:
            try:
                connection, peer = self.listener.accept()
            except OSError:
                return  # closed: node 0 is stopping
            address = peer[0]
            with self.condition:
                from_there = self.num_joining.get(address, 0)
                taken = from_there < MAX_JOINING_PER_ADDRESS and sum(self.num_joining.values()) < MAX_JOINING
                if taken:
                    self.num_joining[address] = from_there + 1
            if not taken:
                connection.close()  # unread: a real node tries again
                continue
            threading.Thread(target=self._serve, args=(connection, address), daemon=True).start()

    def _serve(self, connection, address: str) -> None:
        link, node = None, None
        try:
            link = NodeLink(connection)
            # However slowly a peer trickles its bytes in, its connection ends when its time to join has.
            time_up = threading.Timer(JOIN_SECONDS, link.cut_off)
            time_up.daemon = True  # a stranger's clock must not hold node 0's exit
            time_up.start()
            try:
                node = self._admit(link)
            finally:
                time_up.cancel()
        except OSError as error:  # gone while joining
            logger.info("a connection from %s broke while joining: %s", address, error)
        finally:
            with self.condition:
                self.num_joining[address] -= 1
                if not self.num_joining[address]:
                    del self.num_joining[address]
        if node is None:
            if link is not None:
                link.close()
            connection.close()
            return
        self._follow(node, link)

    def _follow(self, node: int, link: NodeLink) -> None:
        """Read a welcomed node's link for the server's life."""
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
        """Check the proof, then read a join and answer it; the node's number when welcomed."""
        if not challenge_joining_node(link, self.secret, JOIN_SECONDS):
            self._note_unproven(link.peer_address)
            return None
        try:
            join = link.receive(timeout=JOIN_SECONDS)
        except NodeLinkError as error:
            logger.warning("ignored a connection to %s: %s", self.address, error)
            return None
        if join is None or join["kind"] != "join":
            logger.warning("ignored a connection from %s that did not join", link.peer_address)
            return None
        node, where = join.get("node"), f"host {join.get('host')}, {link.peer_address}"
        with self.condition:
            refusal, is_misconfigured = self._refusal(node, join.get("description"))
            if refusal is None:
                self.links[node], self.hosts[node] = link, where
        if refusal is not None:
            # Reported before the node hears it, so what the node sees has happened here.
            if is_misconfigured:
                self.supervisor.report_failure(f"node {node} ({where})", refusal)
            else:
                logger.warning("refused a node joining from %s: %s", link.peer_address, refusal)
            link.send("refused", reason=refusal)
            return None
        try:
            link.send("welcome", **self.welcome)
        except OSError:
            with self.condition:
                del self.links[node], self.hosts[node]  # gone before it heard: its place stays open
            raise
        logger.info("node %d joined from %s; it runs %s", node, where, self.workers_of(node))
        return node

    def _refusal(self, node, description) -> tuple[str | None, bool]:
        """Why a join is refused (None: it is not), and whether it is a real node started with another config.

        A proven node that is malformed, or takes a place already taken, is refused and the start goes
        on; only one that disagrees on the config fails it. The reason names a key, never node 0's value.
        """
        if not isinstance(node, int) or isinstance(node, bool) or node not in self.other_nodes:
            nnodes = self.topology.nnodes
            return f"node rank {node!r} is not one of 1..{nnodes - 1} (parallel.nnodes = {nnodes})", False
        if node in self.links:
            return f"node {node} has joined already, from {self.hosts[node]}", False
        if not isinstance(description, dict):
            return "the join did not describe the node's config", False
        key = first_differing_key(self.description, description)
        if key is not None:
            return (f"node {node} disagrees with node 0 on {key}; every node must be started with the same "
                    "config, but for parallel.node_rank"), True
        return None, False

    def _note_unproven(self, address: str) -> None:
        with self.condition:
            self.num_unproven += 1
            self.last_unproven_from = address
            num_unproven = self.num_unproven
        # Logged at 1, 2, 4, 8… so that a flood of strangers cannot flood the log too.
        if num_unproven & (num_unproven - 1) == 0:
            logger.warning("a connection from %s did not prove it holds parallel.node_secret (%d so far); closed it",
                           address, num_unproven)

    def _fail_missing_nodes(self) -> None:
        with self.condition:
            missing = [node for node in self.other_nodes if node not in self.links]
        if missing and not self.is_stopping:
            nnodes = self.topology.nnodes
            unproven = (f"; {self.num_unproven} connection(s), the last from {self.last_unproven_from}, did not "
                        "prove they hold parallel.node_secret: is that node's secret another?"
                        if self.num_unproven else "")
            self.supervisor.report_failure(
                f"node {missing[0]}",
                f"did not join within {self.join_timeout:g} s (parallel.dist_init_timeout); start it with "
                f"--nnodes {nnodes} --node-rank {missing[0]} --dist-init-addr {self.address}{unproven}",
            )
