"""ZeroMQ CURVE on tcp endpoints when the server spans nodes: encrypted, and open only to holders of the node secret.

Every process of every node derives the same two key pairs from the node
secret: one for the side that binds an endpoint (the CURVE server), one for
the side that connects. A peer must know the server's public key to complete
CURVE's handshake, and that key is derived from the secret and never sent, so
a process without the secret cannot connect at all; every frame is encrypted
and authenticated. On one host (no node secret) nothing changes.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

import zmq
from zmq.utils import z85

SERVER, CLIENT = b"tercet zmq curve server", b"tercet zmq curve client"


@dataclass(frozen=True)
class CurveKeys:
    server_public: bytes
    server_secret: bytes
    client_public: bytes
    client_secret: bytes

    @classmethod
    def from_node_secret(cls, node_secret: str) -> CurveKeys:
        server_secret, client_secret = (z85.encode(hmac.new(node_secret.encode(), role, hashlib.sha256).digest())
                                        for role in (SERVER, CLIENT))
        return cls(zmq.curve_public(server_secret), server_secret, zmq.curve_public(client_secret), client_secret)

    def apply(self, socket: zmq.Socket, bind: bool) -> None:
        """Make ``socket`` the CURVE server (it binds) or a client of it (it connects)."""
        if bind:
            socket.curve_server = True
            socket.curve_secretkey = self.server_secret
        else:
            socket.curve_serverkey = self.server_public
            socket.curve_publickey = self.client_public
            socket.curve_secretkey = self.client_secret
