import threading
import time

import pytest

from tercet.nodes.address import DistInitAddr
from tercet.nodes.link import NodeLink, NodeLinkError, connect_to_node_zero, listen_for_nodes
from tercet.testing import free_port


def linked_pair() -> tuple[NodeLink, NodeLink]:
    listener = listen_for_nodes(DistInitAddr("127.0.0.1", free_port()))
    host, port = listener.getsockname()
    try:
        node = connect_to_node_zero(DistInitAddr(host, port), timeout=10)
        accepted, _ = listener.accept()
    finally:
        listener.close()
    return node, NodeLink(accepted)


def test_messages_cross_in_order_and_a_close_reads_as_none():
    node, zero = linked_pair()
    node.send("join", node=1, description={"a": "1"})
    node.send("ready", inputs={"0": "tcp://127.0.0.1:5"})
    assert zero.receive(timeout=10) == {"kind": "join", "node": 1, "description": {"a": "1"}}
    assert zero.receive(timeout=10)["inputs"] == {"0": "tcp://127.0.0.1:5"}
    node.close()
    assert zero.receive(timeout=10) is None
    zero.close()


def test_silence_past_a_timeout_is_an_error_naming_the_peer():
    node, zero = linked_pair()
    try:
        with pytest.raises(NodeLinkError, match="no answer from 127.0.0.1 within 0.2 s"):
            zero.receive(timeout=0.2)
    finally:
        node.close()
        zero.close()


def test_what_is_not_a_node_message_is_refused():
    node, zero = linked_pair()
    try:
        node.connection.sendall(b"GET / HTTP/1.1\n")
        with pytest.raises(NodeLinkError, match="not a node message"):
            zero.receive(timeout=10)
    finally:
        node.close()
        zero.close()


def test_connecting_retries_until_node_0_listens():
    address = DistInitAddr("127.0.0.1", free_port())
    listeners = []
    threading.Timer(1.0, lambda: listeners.append(listen_for_nodes(address))).start()
    link = connect_to_node_zero(address, timeout=30)
    try:
        assert link.peer_address == "127.0.0.1"
    finally:
        link.close()
        listeners[0].close()


def test_an_unreachable_node_0_fails_at_the_timeout():
    port = free_port()
    started = time.monotonic()
    with pytest.raises(NodeLinkError, match=rf"cannot reach node 0 at 127.0.0.1:{port} \(parallel.dist_init_addr\) "
                                            r"within 1 s \(parallel.dist_init_timeout\): Connection refused"):
        connect_to_node_zero(DistInitAddr("127.0.0.1", port), timeout=1)
    assert time.monotonic() - started < 10


def test_node_0_must_listen_on_its_own_address():
    with pytest.raises(NodeLinkError, match="node 0 cannot listen on 192.0.2.1:29500"):
        listen_for_nodes(DistInitAddr("192.0.2.1", 29500))
