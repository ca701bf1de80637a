"""Proof of the node secret, both ways, before a node's link carries anything else.

::

    node 0                                            joining node
      challenge {nonce: N0}          ───────────────►
                                     ◄─────────────── proof {nonce: N1, proof: HMAC(secret, "join" N0 N1)}
      (a wrong, malformed or late proof: the connection is closed, nothing more said)
      proof {proof: HMAC(secret, "answer" N1 N0)} ───►  (a wrong one: the node gives up)

Both nonces are fresh random bytes, so an overheard proof is worth nothing
later, and the two proofs are labelled apart, so neither side's proof can be
reflected as the other's. Node 0 proves itself only after the node has, so a
stranger at the join port learns nothing but a random nonce. From then on
every message carries an HMAC under a key both derived from the secret and
the two nonces, numbered in each direction (:class:`LinkSeal`): a message
injected, replayed or reordered on the connection breaks the link.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time

from tercet.nodes.address import DistInitAddr
from tercet.nodes.link import RETRY_SECONDS, NodeLink, NodeLinkError, connect_to_node_zero

NONCE_BYTES = 32
# Handshake lines are a few hundred bytes: a stranger may not make node 0 buffer more.
HANDSHAKE_LINE_BYTES = 512
JOINING, ANSWERING, SESSION = b"tercet node joins", b"tercet node 0 answers", b"tercet node link"
TO_NODE_ZERO, FROM_NODE_ZERO = b"to node 0", b"from node 0"


class HandshakeFailed(NodeLinkError):
    pass


class NodeZeroBusy(HandshakeFailed):
    """Node 0 closed the connection unread: as many connections as it holds at once are joining (try again)."""


class LinkSeal:
    """Each message's HMAC, under the link's key, over its direction, its number and its bytes."""

    def __init__(self, key: bytes, sending: bytes, receiving: bytes):
        self.key, self.sending, self.receiving = key, sending, receiving
        self.num_sent = self.num_received = 0

    def seal(self, body: bytes) -> bytes:
        tag = self._tag(self.sending, self.num_sent, body)
        self.num_sent += 1
        return tag + b" " + body

    def open(self, sealed: bytes) -> bytes | None:
        """The body, or None when its tag is not this link's next one from the other side."""
        tag, _, body = sealed.partition(b" ")
        if not hmac.compare_digest(tag, self._tag(self.receiving, self.num_received, body)):
            return None
        self.num_received += 1
        return body

    def _tag(self, direction: bytes, number: int, body: bytes) -> bytes:
        return hmac.new(self.key, direction + number.to_bytes(8, "big") + body, hashlib.sha256).hexdigest().encode()


def challenge_joining_node(link: NodeLink, secret: str, timeout: float) -> bool:
    """Node 0's side: True once the other end proved it holds ``secret`` and heard node 0 prove it
    back (the link is sealed from then on); False, with nothing more said, otherwise."""
    node_zero_nonce = secrets.token_bytes(NONCE_BYTES)
    try:
        link.send("challenge", nonce=node_zero_nonce.hex())
        answer = link.receive(timeout, HANDSHAKE_LINE_BYTES)
    except (OSError, NodeLinkError):
        return False
    node_nonce, proof = _nonce_and_proof(answer, with_nonce=True)
    if node_nonce is None or not hmac.compare_digest(proof, _mac(secret, JOINING, node_zero_nonce, node_nonce)):
        return False
    link.send("proof", proof=_mac(secret, ANSWERING, node_nonce, node_zero_nonce).hex())
    link.seal = LinkSeal(_mac(secret, SESSION, node_zero_nonce, node_nonce), FROM_NODE_ZERO, TO_NODE_ZERO)
    return True


def prove_to_node_zero(link: NodeLink, secret: str, timeout: float) -> None:
    """The joining node's side: prove it holds ``secret``, and check node 0 does (HandshakeFailed if not)."""
    challenge = link.receive(timeout, HANDSHAKE_LINE_BYTES)
    if challenge is None:
        raise NodeZeroBusy(f"node 0 at {link.peer_address} closed the connection before challenging this node")
    node_zero_nonce = _hex_field(challenge, "nonce") if challenge.get("kind") == "challenge" else None
    if node_zero_nonce is None:
        raise HandshakeFailed(f"{link.peer_address} does not speak tercet's node link: is parallel.dist_init_addr right?")
    node_nonce = secrets.token_bytes(NONCE_BYTES)
    link.send("proof", nonce=node_nonce.hex(), proof=_mac(secret, JOINING, node_zero_nonce, node_nonce).hex())
    answer = link.receive(timeout, HANDSHAKE_LINE_BYTES)
    if answer is None:
        raise HandshakeFailed(
            f"node 0 at {link.peer_address} did not take this node's proof of parallel.node_secret: "
            "the secret differs from node 0's"
        )
    _, proof = _nonce_and_proof(answer, with_nonce=False)
    if proof is None or not hmac.compare_digest(proof, _mac(secret, ANSWERING, node_nonce, node_zero_nonce)):
        raise HandshakeFailed(
            f"{link.peer_address} could not prove it holds parallel.node_secret: it is not this server's node 0"
        )
    link.seal = LinkSeal(_mac(secret, SESSION, node_zero_nonce, node_nonce), TO_NODE_ZERO, FROM_NODE_ZERO)


def connect_and_prove(address: DistInitAddr, secret: str, timeout: float) -> NodeLink:
    """A proven link to node 0, retrying while node 0 is not up yet, or holds as many joining
    connections as it takes at once, for up to ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        link = connect_to_node_zero(address, max(deadline - time.monotonic(), RETRY_SECONDS))
        try:
            prove_to_node_zero(link, secret, max(deadline - time.monotonic(), RETRY_SECONDS))
            return link
        except NodeZeroBusy as busy:
            link.close()
            if time.monotonic() + RETRY_SECONDS >= deadline:
                raise NodeLinkError(f"{busy}, again and again for {timeout:g} s (parallel.dist_init_timeout)") from None
            time.sleep(RETRY_SECONDS)
        except BaseException:
            link.close()
            raise


def _nonce_and_proof(message: dict | None, with_nonce: bool) -> tuple[bytes | None, bytes | None]:
    if message is None or message.get("kind") != "proof":
        return None, None
    proof = _hex_field(message, "proof")  # an HMAC-SHA256: as long as a nonce
    nonce = _hex_field(message, "nonce") if with_nonce else b""
    if proof is None or nonce is None:
        return None, None
    return nonce, proof


def _hex_field(message: dict, name: str) -> bytes | None:
    value = message.get(name)
    if not isinstance(value, str) or len(value) != 2 * NONCE_BYTES:
        return None
    try:
        return bytes.fromhex(value)
    except ValueError:
        return None


def _mac(secret: str, label: bytes, first_nonce: bytes, second_nonce: bytes) -> bytes:
    return hmac.new(secret.encode(), label + first_nonce + second_nonce, hashlib.sha256).digest()
