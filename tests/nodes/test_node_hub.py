import socket
import time

import pytest

from tercet.nodes import hub as hub_module
from tercet.nodes.address import DistInitAddr
from tercet.nodes.handshake import connect_and_prove
from tercet.nodes.hub import MAX_JOINING, MAX_JOINING_PER_ADDRESS, NodeHub
from tercet.parallel.topology import Topology
from tercet.processes.supervisor import ChildFailed, ChildSupervisor
from tercet.testing import free_port

DESCRIPTION = {"scheduler.max_running_requests": "8", "server.api_key": "hmac-sha256:5eed", "checkpoint size": 100}
SECRET = "0123456789abcdef0123"
WELCOME = {"scheduler_inputs": ["tcp://127.0.0.1:1", "tcp://127.0.0.1:2"], "detokenizer_input": "tcp://127.0.0.1:3",
           "tokenizer_inputs": ["tcp://127.0.0.1:4"], "tp_store": "127.0.0.1:5"}


@pytest.fixture
def hub():
    supervisor = ChildSupervisor()
    hub = NodeHub(DistInitAddr("127.0.0.1", free_port()), Topology(dp_size=2, tp_size=1, nnodes=2), DESCRIPTION,
                  WELCOME, supervisor, join_timeout=60, secret=SECRET)
    yield hub
    hub.stop(failed=False)


def join(hub, node=1, description=DESCRIPTION):
    link = connect_and_prove(hub.address, SECRET, timeout=30)
    link.send("join", node=node, host="b", address="127.0.0.1", description=description)
    return link, link.receive(timeout=10)


def reported(supervisor, timeout=10.0):
    deadline = time.monotonic() + timeout
    while supervisor.reported_failure is None and time.monotonic() < deadline:
        time.sleep(0.02)
    return supervisor.reported_failure


def test_a_node_that_agrees_is_welcomed_and_its_inputs_are_collected(hub):
    link, answer = join(hub)
    assert answer == {"kind": "welcome", **WELCOME}
    link.send("ready", inputs={"1": "tcp://127.0.0.1:777"})
    assert hub.wait_until_ready(timeout=10) == {1: "tcp://127.0.0.1:777"}
    reason = "scheduler-0 process died (exit code 1)"
    hub.stop(failed=True, reason=reason)
    assert link.receive(timeout=10) == {"kind": "stop", "failed": True, "reason": reason}
    assert hub.supervisor.reported_failure is None  # a stop closes links without it being a failure
    link.close()


@pytest.mark.parametrize("key, value", [("scheduler.max_running_requests", "4"), ("server.api_key", "hmac-sha256:0dd")])
def test_a_node_that_disagrees_is_refused_naming_only_the_key_and_fails_the_start(hub, key, value):
    link, answer = join(hub, description={**DESCRIPTION, key: value})
    reason = f"node 1 disagrees with node 0 on {key}; every node must be started with the same config"
    assert answer["kind"] == "refused" and answer["reason"].startswith(reason)
    assert DESCRIPTION[key] not in answer["reason"] and value not in answer["reason"]
    assert reported(hub.supervisor)[0] == "node 1 (host b, 127.0.0.1)"
    with pytest.raises(ChildFailed, match=reason):
        hub.wait_until_ready(timeout=10)
    link.close()


@pytest.mark.parametrize("node, reason", [(0, "node rank 0 is not one of 1..1"), ("1", "node rank '1' is not one")])
def test_a_node_number_out_of_range_is_refused(hub, node, reason):
    link, answer = join(hub, node=node)
    assert answer["kind"] == "refused" and reason in answer["reason"]
    link.close()


def test_a_second_node_1_is_refused_without_failing_the_first(hub):
    first, _ = join(hub)
    second, answer = join(hub)
    assert answer["kind"] == "refused" and "node 1 has joined already, from host b, 127.0.0.1" in answer["reason"]
    second.close()
    assert hub.supervisor.reported_failure is None  # a refusal is reported before it is sent
    first.send("ready", inputs={"1": "tcp://127.0.0.1:777"})
    assert hub.wait_until_ready(timeout=10) == {1: "tcp://127.0.0.1:777"}
    first.close()


def test_a_worker_failure_on_the_node_is_reported_naming_it_and_the_host(hub):
    link, _ = join(hub)
    link.send("failed", name="scheduler-1", reason="killed by signal SIGKILL")
    assert reported(hub.supervisor) == ("scheduler-1 on node 1 (host b, 127.0.0.1)", "killed by signal SIGKILL")
    link.close()


def test_a_link_that_closes_is_a_lost_node(hub):
    link, _ = join(hub)
    link.close()
    name, reason = reported(hub.supervisor)
    assert name == "node 1 launcher (host b, 127.0.0.1)"
    assert reason.startswith("its link to node 0 closed") and reason.endswith("it ran scheduler-1")


def test_a_node_that_never_joins_fails_the_start_at_the_timeout():
    supervisor = ChildSupervisor()
    address = DistInitAddr("127.0.0.1", free_port())
    hub = NodeHub(address, Topology(2, 1, 2), DESCRIPTION, WELCOME, supervisor, join_timeout=0.5, secret=SECRET)
    try:
        with pytest.raises(ChildFailed, match=rf"node 1 process failed: did not join within 0.5 s "
                                              rf"\(parallel.dist_init_timeout\); start it with --nnodes 2 "
                                              rf"--node-rank 1 --dist-init-addr {address}"):
            hub.wait_until_ready(timeout=60)
    finally:
        hub.stop(failed=True)


def test_a_malformed_ready_fails_the_start_naming_the_node(hub):
    link, _ = join(hub)
    link.send("ready", inputs=["not", "a", "mapping"])
    name, reason = reported(hub.supervisor)
    assert name == "node 1 (host b, 127.0.0.1)" and reason.startswith("sent a malformed ready")
    link.close()


@pytest.mark.parametrize("description", [None, "not a mapping", ["a"]])
def test_a_proven_but_malformed_join_is_refused_without_failing_the_start(hub, description):
    link, answer = join(hub, description=description)
    assert answer == {"kind": "refused", "reason": "the join did not describe the node's config"}
    link.close()
    assert hub.supervisor.reported_failure is None
    second, answer = join(hub)
    assert answer == {"kind": "welcome", **WELCOME}
    second.close()


def test_a_node_with_another_secret_is_told_nothing_and_the_start_goes_on(hub):
    from tercet.nodes.handshake import HandshakeFailed

    with pytest.raises(HandshakeFailed, match="did not take this node's proof of parallel.node_secret"):
        connect_and_prove(hub.address, "another secret, 20 chars", timeout=30)
    assert hub.supervisor.reported_failure is None
    link, answer = join(hub)
    assert answer["kind"] == "welcome"
    link.close()


def test_unproven_connections_are_named_when_the_start_fails():
    supervisor = ChildSupervisor()
    hub = NodeHub(DistInitAddr("127.0.0.1", free_port()), Topology(2, 1, 2), DESCRIPTION, WELCOME, supervisor,
                  join_timeout=3, secret=SECRET)
    try:
        with socket.create_connection((hub.address.host, hub.address.port), timeout=10) as stranger:
            stranger.sendall(b'{"kind":"join","node":1,"description":{}}\n')
            assert read_all(stranger).startswith(b'{"kind":"challenge"')
        with pytest.raises(ChildFailed, match=r"did not join within 3 s .*; 1 connection\(s\), the last from "
                                              r"127.0.0.1, did not prove they hold parallel.node_secret"):
            hub.wait_until_ready(timeout=60)
    finally:
        hub.stop(failed=True)


def read_all(connection: socket.socket) -> bytes:
    received = b""
    while chunk := connection.recv(4096):
        received += chunk
    return received


def connect_from(hub, source: str) -> socket.socket:
    return socket.create_connection((hub.address.host, hub.address.port), timeout=30, source_address=(source, 0))


def test_joining_connections_are_capped_by_address(hub):
    idle = [connect_from(hub, "127.0.0.1") for _ in range(10)]
    try:
        # Held: those that got a challenge. The rest were closed unread.
        challenged = [connection for connection in idle if connection.recv(1)]
        assert len(challenged) == MAX_JOINING_PER_ADDRESS < MAX_JOINING
        assert all(connection.recv(4096) == b"" for connection in idle if connection not in challenged)
        # A real node, from the same address, still gets in once a place frees up.
        challenged[0].close()
        link, answer = join(hub)
        assert answer["kind"] == "welcome"
        link.close()
    finally:
        for connection in idle:
            connection.close()


def test_joining_connections_are_capped_in_all(hub):
    # Loopback answers for all of 127/8: each of these is another address.
    sources = [f"127.0.0.{host}" for host in range(2, 2 + MAX_JOINING // MAX_JOINING_PER_ADDRESS + 2)]
    idle = [connect_from(hub, source) for source in sources for _ in range(MAX_JOINING_PER_ADDRESS)]
    try:
        assert sum(1 for connection in idle if connection.recv(1)) == MAX_JOINING
    finally:
        for connection in idle:
            connection.close()


def test_a_connection_that_never_proves_is_closed_when_its_time_is_up(hub, monkeypatch):
    monkeypatch.setattr(hub_module, "JOIN_SECONDS", 0.5)
    with socket.create_connection((hub.address.host, hub.address.port), timeout=30) as slow:
        slow.sendall(b'{"kind":"pro')  # and never the rest
        started = time.monotonic()
        assert read_all(slow).startswith(b'{"kind":"challenge"')
        assert time.monotonic() - started < 20
