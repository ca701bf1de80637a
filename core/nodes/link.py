"""The connection between a node and node 0: joining, start-up, failures, the stop.

Every node other than node 0 opens one TCP connection to ``dist_init_addr``
and keeps it for the server's life. It carries JSON objects, one per line:

- node -> node 0: ``join`` (the node's number, host name, address and a
  description of its config), then ``ready`` (the input each DP rank it
  receives for has bound), or ``failed`` (which worker, and why);
- node 0 -> node: ``welcome`` (the endpoints to serve with) or ``refused``
  (why), and at the end ``stop``.

The connection itself is the liveness signal: a node whose launcher dies
closes it (the kernel does, even on SIGKILL), and TCP keepalive notices a
host that vanished without closing it within a few seconds. Before any of
these, both ends prove they hold the node secret (:mod:`tercet.nodes.handshake`),
which then seals every message: a connection that cannot prove it is closed.
"""

from __future__ import annotations

import json
import socket
import time

from tercet.errors import TercetError
from tercet.nodes.address import DistInitAddr

# A host gone silent (no FIN, no RST) is given up on after about IDLE + INTERVAL * COUNT seconds.
KEEPALIVE_IDLE_SECONDS = 1
KEEPALIVE_INTERVAL_SECONDS = 1
KEEPALIVE_COUNT = 3
# The longest one message may be: config descriptions and endpoint lists are small.
MAX_LINE_BYTES = 1 << 20
RETRY_SECONDS = 0.5


class NodeLinkError(TercetError):
    pass


class NodeLink:
    def __init__(self, connection: socket.socket):
        _keep_alive(connection)
        self.connection = connection
        self.reader = connection.makefile("rb")
        try:
            # Kept: a peer that has gone has no address to ask for, yet errors name it.
            self.peer_address = connection.getpeername()[0]
        except OSError:
            self.peer_address = "a peer already gone"
        # Set by the handshake: from then on every message carries its HMAC (a LinkSeal).
        self.seal = None

    @property
    def local_address(self) -> str:
        return self.connection.getsockname()[0]

    def send(self, kind: str, **fields) -> None:
        body = json.dumps({"kind": kind, **fields}, separators=(",", ":")).encode()
        self.connection.sendall((self.seal.seal(body) if self.seal else body) + b"\n")

    def receive(self, timeout: float | None = None, max_bytes: int = MAX_LINE_BYTES) -> dict | None:
        """The next message, or None once the other side has closed (or the link broke)."""
        try:
            self.connection.settimeout(timeout)
            line = self.reader.readline(max_bytes + 1)
        except socket.timeout:
            raise NodeLinkError(f"no answer from {self.peer_address} within {timeout:g} s") from None
        except (OSError, ValueError):  # broken, or closed here (by a stop) while waiting
            return None
        if not line:
            return None
        if len(line) > max_bytes or not line.endswith(b"\n"):
            raise NodeLinkError(f"a message from {self.peer_address} is over {max_bytes} bytes")
        return self._message_in(line[:-1])

    def _message_in(self, line: bytes) -> dict:
        body = self.seal.open(line) if self.seal else line
        if body is None:
            raise NodeLinkError(f"a message from {self.peer_address} does not carry this link's HMAC: "
                                "something else wrote on the connection")
        try:
            message = json.loads(body)
        except (ValueError, RecursionError):
            raise NodeLinkError(f"{self.peer_address} sent something that is not a node message") from None
        if not isinstance(message, dict) or not isinstance(message.get("kind"), str):
            raise NodeLinkError(f"{self.peer_address} sent something that is not a node message")
        return message

    def cut_off(self) -> None:
        """End the connection both ways; a thread reading it sees it closed."""
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def close(self) -> None:
        self.cut_off()
        self.reader.close()
        self.connection.close()


def connect_to_node_zero(address: DistInitAddr, timeout: float) -> NodeLink:
    """Connect to node 0, retrying (it may still be starting) for up to ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        try:
            return NodeLink(socket.create_connection((address.host, address.port), timeout=max(left, 0.1)))
        except OSError as error:
            if time.monotonic() + RETRY_SECONDS >= deadline:
                raise NodeLinkError(
                    f"cannot reach node 0 at {address} (parallel.dist_init_addr) within {timeout:g} s "
                    f"(parallel.dist_init_timeout): {error.strerror or error}"
                ) from None
            time.sleep(RETRY_SECONDS)


def listen_for_nodes(address: DistInitAddr) -> socket.socket:
    """Node 0's listening socket at ``dist_init_addr``."""
    listener = socket.socket(socket.AF_INET6 if ":" in address.host else socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((address.host, address.port))
    except OSError as error:
        listener.close()
        raise NodeLinkError(
            f"node 0 cannot listen on {address} (parallel.dist_init_addr): {error.strerror or error}; "
            "node 0 must run on the host that address names"
        ) from None
    listener.listen()
    return listener


def _keep_alive(connection: socket.socket) -> None:
    connection.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for option, value in (("TCP_KEEPIDLE", KEEPALIVE_IDLE_SECONDS), ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL_SECONDS),
                          ("TCP_KEEPCNT", KEEPALIVE_COUNT)):
        if hasattr(socket, option):  # Linux names; other systems keep their defaults
            connection.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)
