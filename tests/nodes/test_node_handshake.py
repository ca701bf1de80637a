import hashlib
import hmac
import json
import threading

import pytest
from test_node_link import linked_pair

from tercet.nodes.handshake import (
    HandshakeFailed,
    LinkSeal,
    NodeZeroBusy,
    challenge_joining_node,
    prove_to_node_zero,
)
from tercet.nodes.link import NodeLinkError

SECRET = "a node secret of 24 chars"


def handshake(node_secret: str = SECRET, zero_secret: str = SECRET):
    """Both sides at once: node 0's verdict, and what the node's side raised (None: nothing)."""
    node, zero = linked_pair()
    verdict = {}

    def challenge():
        verdict["ok"] = challenge_joining_node(zero, zero_secret, 10)
        if not verdict["ok"]:
            zero.close()  # what the hub does with a connection that did not prove the secret

    thread = threading.Thread(target=challenge)
    thread.start()
    try:
        prove_to_node_zero(node, node_secret, 10)
        raised = None
    except HandshakeFailed as error:
        raised = error
    thread.join(10)
    return node, zero, verdict["ok"], raised


def test_nodes_with_the_same_secret_prove_it_both_ways_and_then_every_message_is_sealed():
    node, zero, ok, raised = handshake()
    assert ok and raised is None
    node.send("join", node=1)
    assert zero.receive(timeout=10) == {"kind": "join", "node": 1}
    zero.send("welcome", tp_store="x")
    assert node.receive(timeout=10) == {"kind": "welcome", "tp_store": "x"}
    node.close(), zero.close()


def test_a_node_with_another_secret_is_refused_both_ways():
    node, _, ok, raised = handshake(node_secret="another secret of 24 chr")
    assert not ok
    assert "did not take this node's proof of parallel.node_secret: the secret differs" in str(raised)
    node.close()


def test_a_node_0_that_cannot_prove_the_secret_is_not_believed():
    node, zero = linked_pair()
    zero.send("challenge", nonce="00" * 32)
    thread = threading.Thread(target=lambda: (zero.receive(timeout=10), zero.send("proof", proof="11" * 32)))
    thread.start()
    with pytest.raises(HandshakeFailed, match="could not prove it holds parallel.node_secret: it is not this server"):
        prove_to_node_zero(node, SECRET, 10)
    thread.join(10)
    node.close(), zero.close()


def test_a_node_0_that_closes_before_its_challenge_is_busy():
    node, zero = linked_pair()
    zero.close()
    with pytest.raises(NodeZeroBusy):
        prove_to_node_zero(node, SECRET, 10)
    node.close()


def test_the_node_s_own_proof_reflected_back_is_not_node_0_s():
    node, zero = linked_pair()
    zero.send("challenge", nonce="22" * 32)

    def reflect():
        proof = zero.receive(timeout=10)
        zero.send("proof", proof=proof["proof"])  # what a stranger could send without the secret

    thread = threading.Thread(target=reflect)
    thread.start()
    with pytest.raises(HandshakeFailed, match="could not prove"):
        prove_to_node_zero(node, SECRET, 10)
    thread.join(10)
    node.close(), zero.close()


@pytest.mark.parametrize("answer", [
    b'{"kind":"join","node":1,"description":{}}\n',
    b'{"kind":"proof","nonce":"zz","proof":"00"}\n',
    b'{"kind":"proof","nonce":"' + b"00" * 32 + b'","proof":"' + b"00" * 32 + b'"}\n',
    b"\x00\xff not json\n",
    b"[" * 600 + b"\n",
])
def test_node_0_takes_no_answer_but_a_right_proof(answer):
    node, zero = linked_pair()
    verdict = {}
    thread = threading.Thread(target=lambda: verdict.update(ok=challenge_joining_node(zero, SECRET, 10)))
    thread.start()
    challenge = node.receive(timeout=10)
    assert set(challenge) == {"kind", "nonce"} and len(bytes.fromhex(challenge["nonce"])) == 32
    node.connection.sendall(answer)
    thread.join(10)
    assert verdict == {"ok": False}
    node.close(), zero.close()


def test_every_challenge_is_fresh():
    nonces = set()
    for _ in range(3):
        node, zero = linked_pair()
        thread = threading.Thread(target=challenge_joining_node, args=(zero, SECRET, 10))
        thread.start()
        nonces.add(node.receive(timeout=10)["nonce"])
        node.close()
        thread.join(10)
        zero.close()
    assert len(nonces) == 3


def test_a_sealed_link_breaks_on_an_injected_replayed_or_altered_message():
    key = hmac.new(SECRET.encode(), b"session", hashlib.sha256).digest()
    sender, receiver = LinkSeal(key, b"to", b"from"), LinkSeal(key, b"from", b"to")
    first, second = sender.seal(b'{"kind":"ready"}'), sender.seal(b'{"kind":"failed"}')
    assert receiver.open(first) == b'{"kind":"ready"}'
    assert receiver.open(first) is None  # replayed
    assert receiver.open(second.replace(b"failed", b"ready!")) is None  # altered
    assert receiver.open(b"0" * 64 + b" " + json.dumps({"kind": "stop"}).encode()) is None  # injected
    assert receiver.open(second) == b'{"kind":"failed"}'
    # A node's own messages are not node 0's: the direction is part of the tag.
    assert LinkSeal(key, b"to", b"to").open(sender.seal(b"x")) is None


def test_a_link_receiving_a_message_without_its_seal_breaks():
    node, zero, ok, _ = handshake()
    assert ok
    node.connection.sendall(b'{"kind":"failed","name":"forged"}\n')
    with pytest.raises(NodeLinkError, match="does not carry this link's HMAC"):
        zero.receive(timeout=10)
    node.close(), zero.close()
