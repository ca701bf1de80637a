"""Only a node holding the node secret joins; a stranger at node 0's join port learns nothing and ends nothing.

Node 0 of a two-node dp=2 server is probed from node 1's namespace, before the
real node 1 joins and again once the server serves: the early join that used
to end node 0, a join carrying node 0's own config description, a proof made
with a wrong secret, bytes that are no message, a line past every limit, and
300 idle connections. Each stranger hears one random nonce at most, and node 0
holds no more joining connections than its caps. The real node 1 still joins
and serves. A node with another secret is refused, and node 0 waits on for the
right one. Without a secret, a multi-node start is refused with how to make one.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import socket
import subprocess
import sys
import time

import psutil
import zmq
from two_nodes import FLOAT32, MEET_PORT, TIMEOUT, Node, needs_root
from zmq.utils.monitor import recv_monitor_message

from tercet.cli import build_parser, config_from_arguments
from tercet.formats.default_model import resolve_model
from tercet.nodes.hub import MAX_JOINING, MAX_JOINING_PER_ADDRESS
from tercet.nodes.launch import config_for_nodes
from tercet.parallel.description import describe_rank
from tercet.testing import free_port

ARGS = ["--dp-size", "2"]
NUM_IDLE_CONNECTIONS = 300
WRONG_SECRET = "a-guess-at-the-node-secret-0000"


def node_zero_description(namespaces, model_dir) -> dict:
    """What node 0 describes itself as, computed as a stranger can: from the same flags."""
    address = f"{namespaces.addresses[0]}:{MEET_PORT}"
    argv = ["serve", "--model", str(model_dir), "--nnodes", "2", "--node-rank", "1", "--dist-init-addr", address,
            *ARGS, *[part for setting in FLOAT32 for part in ("--set", setting)]]
    config = config_from_arguments(build_parser().parse_args(argv))
    # Any secret: it is not part of the description.
    return describe_rank(resolve_model(config_for_nodes(config.replace("parallel", node_secret="anything-16-chars"))))


def read_until_closed(connection: socket.socket) -> bytes:
    received = b""
    try:
        while chunk := connection.recv(65536):
            received += chunk
    except ConnectionResetError:
        pass  # node 0 closed with our bytes unread: it says nothing more either way
    return received


def send_then_listen(address: tuple[str, int], data: bytes) -> bytes:
    """From node 1's namespace: connect, send ``data``, and read all node 0 says until it closes."""
    with socket.create_connection(address, timeout=TIMEOUT) as connection:
        try:
            connection.sendall(data)
        except OSError:
            pass  # closed on us midway (a line past the limit)
        return read_until_closed(connection)


def prove_with_a_wrong_secret(address: tuple[str, int], description: dict) -> bytes:
    """Answer the challenge as a node would, with a guessed secret, then join with node 0's own description."""
    with socket.create_connection(address, timeout=TIMEOUT) as connection:
        reader = connection.makefile("rb")
        challenge = reader.readline()
        nonce = bytes.fromhex(json.loads(challenge)["nonce"])
        own_nonce = os.urandom(32)
        proof = hmac.new(WRONG_SECRET.encode(), b"tercet node joins" + nonce + own_nonce, hashlib.sha256).hexdigest()
        join = {"kind": "join", "node": 1, "host": "stranger", "address": "x", "description": description}
        try:
            connection.sendall(json.dumps({"kind": "proof", "nonce": own_nonce.hex(), "proof": proof}).encode() + b"\n"
                               + json.dumps(join).encode() + b"\n")
        except OSError:
            pass
        try:
            return challenge + reader.read()
        except ConnectionResetError:
            return challenge


def fake_joins(namespaces, description: dict) -> list[bytes]:
    """Every way in a stranger tries, from node 1's namespace; what node 0 said to each."""
    address = (namespaces.addresses[0], MEET_PORT)
    lines = [
        b'{"kind":"join","node":1,"description":{}}\n',
        json.dumps({"kind": "join", "node": 1, "host": "stranger", "description": description}).encode() + b"\n",
        b'{"kind":"ready","inputs":{"1":"tcp://10.0.0.9:1"}}\n{"kind":"failed","name":"x","reason":"y"}\n',
        b'{"kind":"proof","nonce":"' + b"00" * 32 + b'","proof":"' + b"00" * 32 + b'"}\n',
        b"[" * 100_000 + b"\n",
        os.urandom(4096),
        b"x" * (2 << 20),
    ]
    said = [namespaces.call_in(1, send_then_listen, address, line) for line in lines]
    return said + [namespaces.call_in(1, prove_with_a_wrong_secret, address, description)]


def told_more_than_a_nonce(said: bytes) -> bool:
    if not said:
        return False
    message = json.loads(said)  # one line, or this fails
    return set(message) != {"kind", "nonce"} or message["kind"] != "challenge" or \
        not re.fullmatch("[0-9a-f]{64}", message["nonce"])


def zmq_handshake_refused(endpoint: str) -> bool:
    """From node 1's namespace: push a forged request to ``endpoint`` with plain ZeroMQ; True once the
    endpoint has turned the connection away at the handshake (CURVE: no node secret, no way in),
    False if it never did."""
    context = zmq.Context()
    try:
        plain = context.socket(zmq.PUSH)
        plain.linger = 0
        monitor = plain.get_monitor_socket()
        plain.connect(endpoint)
        plain.send(b"\x92\xa3rid\xa6forged")
        failed = zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
        deadline = time.monotonic() + TIMEOUT
        refused = False
        while not refused and monitor.poll(max(deadline - time.monotonic(), 0) * 1000):
            refused = bool(recv_monitor_message(monitor)["event"] & failed)
        plain.disable_monitor()
        monitor.close(0)
        return refused
    finally:
        context.destroy(0)


def wait_until_listening(namespaces, node: Node) -> None:
    def reachable() -> bool:
        try:
            with socket.create_connection((namespaces.addresses[0], MEET_PORT), timeout=5):
                return True
        except OSError:
            return False

    deadline = time.monotonic() + TIMEOUT
    while not namespaces.call_in(1, reachable):
        assert node.process.poll() is None, node.log()
        assert time.monotonic() < deadline, f"node 0 never listened:\n{node.log()}"
        time.sleep(0.2)


def hold_idle_connections(namespaces) -> tuple[list[socket.socket], int]:
    """NUM_IDLE_CONNECTIONS connections from node 1's namespace that never say anything; how many node 0 kept."""
    def open_them() -> tuple[list[socket.socket], int]:
        idle = [socket.create_connection((namespaces.addresses[0], MEET_PORT), timeout=TIMEOUT)
                for _ in range(NUM_IDLE_CONNECTIONS)]
        # Each hears first either its challenge (kept) or its close (turned away unread).
        kept = sum(1 for connection in idle if connection.recv(1))
        return idle, kept

    return namespaces.call_in(1, open_them)


@needs_root
def test_fake_joins_learn_nothing_and_node_0_keeps_serving(namespaces, tiny_llama_dir, tmp_path):
    description = node_zero_description(namespaces, tiny_llama_dir)
    zero = Node(namespaces, 0, tiny_llama_dir, tmp_path / "node0.log", ARGS)
    one = None
    try:
        wait_until_listening(namespaces, zero)
        threads_before = psutil.Process(zero.process.pid).num_threads()
        said = fake_joins(namespaces, description)
        idle, kept = hold_idle_connections(namespaces)
        threads_held = psutil.Process(zero.process.pid).num_threads()
        assert zero.process.poll() is None, zero.log()
        assert kept == MAX_JOINING_PER_ADDRESS < MAX_JOINING
        # A thread and a timer for each connection kept, none for those turned away.
        assert threads_held - threads_before <= 2 * MAX_JOINING, (threads_before, threads_held)
        # The real node 1 joins all the same, once a place frees up.
        one = Node(namespaces, 1, tiny_llama_dir, tmp_path / "node1.log", ARGS)
        zero.wait_until_serving([one])
        for connection in idle:
            connection.close()
        said += fake_joins(namespaces, description)
        for prompt in ("Hello, my name is", "The capital of France is", "1, 2, 3,", "Once upon a time"):
            body = {"text": prompt, "sampling_params": {"max_new_tokens": 4, "temperature": 0, "ignore_eos": True}}
            assert len(zero.http("POST", "/generate", json=body).json()["output_ids"]) == 4
        assert [rank["rank"] for rank in zero.http("GET", "/get_server_info").json()["ranks"]] == [0, 1]
        assert "node-secret" not in zero.http("GET", "/get_server_info").text
        # Node 0's own tcp endpoints are CURVE-encrypted: a plain ZeroMQ peer is turned away.
        listed = zero.log().split("IPC endpoints:", 1)[1].split("\n", 1)[0]
        # Those node 0 binds: the first rank's input (the second's is bound on node 1), the detokenizer's, its own.
        endpoints = [re.search(rf"\b{name} (tcp://[\d.]+:\d+)", listed)[1]
                     for name in ("scheduler", "detokenizer", "tokenizer")]
        assert all(namespaces.call_in(1, zmq_handshake_refused, endpoint) for endpoint in endpoints)
        told = [answer for answer in said if told_more_than_a_nonce(answer)]
        print(f"{len(said)} fake joins and {NUM_IDLE_CONNECTIONS} idle connections: {len(told)} told more than "
              f"a nonce, {kept} idle ones held at once, {threads_held - threads_before} threads more")
        assert not told, told
        assert zero.process.poll() is None and one.process.poll() is None
        assert "did not prove it holds parallel.node_secret" in zero.log()
    finally:
        zero.stop()  # first: it tells node 1 to stop
        if one is not None:
            one.process.wait(TIMEOUT)
            one.stop()
    assert zero.process.returncode == 0 and one.process.returncode == 0, one.log()


@needs_root
def test_a_node_with_another_secret_is_refused_and_node_0_waits_on(namespaces, tiny_llama_dir, tmp_path):
    zero = Node(namespaces, 0, tiny_llama_dir, tmp_path / "node0.log", ARGS)
    one = Node(namespaces, 1, tiny_llama_dir, tmp_path / "node1.log", ARGS, secret="another-secret-of-enough-length")
    try:
        assert one.process.wait(timeout=TIMEOUT) == 1
        assert ("did not take this node's proof of parallel.node_secret: the secret differs from node 0's"
                in one.log()), one.log()
        deadline = time.monotonic() + TIMEOUT
        while "did not prove it holds parallel.node_secret" not in zero.log():
            assert time.monotonic() < deadline, zero.log()
            time.sleep(0.2)
        assert zero.process.poll() is None, zero.log()
    finally:
        zero.stop()
        one.stop()


def test_serving_over_nodes_without_a_secret_is_refused_at_start_up(tiny_llama_dir):
    environ = {name: value for name, value in os.environ.items() if not name.startswith("TERCET_PARALLEL_")}
    completed = subprocess.run(
        [sys.executable, "-m", "tercet", "serve", "--model", str(tiny_llama_dir), "--nnodes", "2", "--node-rank", "0",
         "--dist-init-addr", f"127.0.0.1:{free_port()}", "--dp-size", "2"],
        capture_output=True, text=True, timeout=TIMEOUT, check=False, env=environ,
    )
    assert completed.returncode == 1
    assert "parallel.nnodes = 2 needs a node secret" in completed.stderr, completed.stderr
    assert "openssl rand -hex 32" in completed.stderr
