"""Serving over two nodes: two network namespaces joined by a veth pair stand in for two hosts.

A two-node tp=2 server answers token for token as one host does, and so does a
two-node dp=2 server; their traffic runs between the namespaces' own
addresses. A worker or a node launcher killed on node 1 stops the server
within 5 s, naming what died and where, with no process left on either node
(or, with on_child_failure = "unhealthy", node 0 stays up answering 503). A
node that disagrees on the config (named by its key alone), a node that never
joins and a node that cannot reach node 0 each fail clearly, within their
timeouts. The nodes share their node secret as a user would (tests/e2e/two_nodes.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx
import psutil
import pytest
from network_namespaces import NetworkNamespaces
from two_nodes import FLOAT32, MEET_PORT, NODE_SECRET, TIMEOUT, Node, TwoNodes, needs_root

from tercet.testing import free_port

PROMPTS = ["Hello, my name is", "The capital of France is", "1, 2, 3,", "Once upon a time"]


def greedy(call, prompt: str) -> list[int]:
    body = {"text": prompt, "sampling_params": {"max_new_tokens": 12, "temperature": 0, "ignore_eos": True}}
    return call("POST", "/generate", json=body).json()["output_ids"]


def title_of(process: psutil.Process) -> str:
    return " ".join(" ".join(process.cmdline()).split())


def schedulers_of(node: Node) -> list[str]:
    return sorted(title for title in map(title_of, node.psutil.children()) if title.startswith("tercet scheduler"))


def left_alive(processes: list[psutil.Process]) -> list[psutil.Process]:
    _, alive = psutil.wait_procs(processes, timeout=10)
    return [process for process in alive if process.status() != psutil.STATUS_ZOMBIE]


@pytest.fixture(scope="module")
def expected(start_server, tiny_llama_dir) -> list[list[int]]:
    """Greedy answers of one host's tp=1 server: what both two-node servers must give."""
    server = start_server(tiny_llama_dir, FLOAT32)
    answers = [greedy(lambda method, path, **kwargs: httpx.request(method, server.base_url + path, timeout=TIMEOUT,
                                                                   **kwargs), prompt) for prompt in PROMPTS]
    assert all(len(tokens) == 12 for tokens in answers)
    return answers


def only_between_the_nodes(namespaces: NetworkNamespaces) -> None:
    own = set(namespaces.addresses)
    for index in (0, 1):
        connections = namespaces.tcp_connections(index)
        assert connections, f"namespace {index} has no connection at all"
        # Node 0's HTTP client and server both sit on node 0's address, so its loopback stays empty too.
        assert all(local in own and peer in own for local, peer in connections), connections
    across = [(local, peer) for local, peer in namespaces.tcp_connections(1) if peer == namespaces.addresses[0]]
    assert across, "node 1 has no connection to node 0"


@needs_root
def test_two_node_tp2_answers_as_one_host_does(namespaces, tiny_llama_dir, tmp_path, expected):
    nodes = TwoNodes(namespaces, tiny_llama_dir, tmp_path, ["--tp-size", "2"]).wait_until_healthy()
    try:
        assert [greedy(nodes.zero.http, prompt) for prompt in PROMPTS] == expected
        assert schedulers_of(nodes.zero) == ["tercet scheduler dp0 tp0"]
        assert schedulers_of(nodes.one) == ["tercet scheduler dp0 tp1"]
        only_between_the_nodes(namespaces)
        # Control requests reach the group: rank 0 answers for it.
        assert [rank["rank"] for rank in nodes.zero.http("GET", "/get_server_info").json()["ranks"]] == [0]
        assert nodes.zero.http("POST", "/flush_cache").status_code == 200
    finally:
        processes = nodes.processes()
        nodes.stop()
    assert (nodes.zero.process.returncode, nodes.one.process.returncode) == (0, 0), nodes.one.log()
    assert not left_alive(processes)


@needs_root
def test_two_node_dp2_serves_on_both_nodes(namespaces, tiny_llama_dir, tmp_path, expected):
    nodes = TwoNodes(namespaces, tiny_llama_dir, tmp_path, ["--dp-size", "2"]).wait_until_healthy()
    try:
        # Round robin: with twice as many requests as ranks, each rank serves some.
        assert [greedy(nodes.zero.http, prompt) for prompt in PROMPTS] == expected
        ranks = nodes.zero.http("GET", "/get_server_info").json()["ranks"]
        assert [rank["rank"] for rank in ranks] == [0, 1]
        assert schedulers_of(nodes.zero) == ["tercet scheduler dp0 tp0"]
        assert schedulers_of(nodes.one) == ["tercet scheduler dp1 tp0"]
        assert "node 1 (host" in nodes.zero.log() and "is ready: scheduler-1" in nodes.zero.log()
        only_between_the_nodes(namespaces)
    finally:
        processes = nodes.processes()
        nodes.stop()
    assert (nodes.zero.process.returncode, nodes.one.process.returncode) == (0, 0), nodes.one.log()
    assert not left_alive(processes)


def stops_within_5_s(nodes: TwoNodes, kill) -> float:
    processes = nodes.processes()
    killed = time.monotonic()
    kill()
    try:
        nodes.zero.process.wait(timeout=60)
        took = time.monotonic() - killed
        nodes.one.process.wait(timeout=60)
    finally:
        nodes.stop()
    assert nodes.zero.process.returncode != 0 and nodes.one.process.returncode != 0
    assert not left_alive(processes), "a process outlived the server"
    return took


@needs_root
def test_a_worker_killed_on_node_1_stops_both_nodes_naming_it(namespaces, tiny_llama_dir, tmp_path):
    nodes = TwoNodes(namespaces, tiny_llama_dir, tmp_path, ["--tp-size", "2"]).wait_until_healthy()
    worker = next(process for process in nodes.one.psutil.children() if title_of(process) == "tercet scheduler dp0 tp1")
    took = stops_within_5_s(nodes, lambda: os.kill(worker.pid, signal.SIGKILL))
    log = nodes.zero.log()
    assert (f"scheduler-tp1 on node 1 (host {os.uname().nodename}, {namespaces.addresses[1]}) process died "
            "(killed by signal SIGKILL)") in log, log
    assert took < 5, f"node 0 took {took:.1f} s to exit after a worker on node 1 died"


@needs_root
def test_node_1_killed_stops_the_server_naming_the_node(namespaces, tiny_llama_dir, tmp_path):
    nodes = TwoNodes(namespaces, tiny_llama_dir, tmp_path, ["--dp-size", "2"]).wait_until_healthy()
    took = stops_within_5_s(nodes, lambda: os.kill(nodes.one.process.pid, signal.SIGKILL))
    log = nodes.zero.log()
    assert f"node 1 launcher (host {os.uname().nodename}, {namespaces.addresses[1]}) process died" in log, log
    assert "it ran scheduler-1" in log
    assert took < 5, f"node 0 took {took:.1f} s to exit after node 1 died"


@needs_root
def test_unhealthy_mode_answers_503_after_node_1_dies(namespaces, tiny_llama_dir, tmp_path):
    nodes = TwoNodes(namespaces, tiny_llama_dir, tmp_path, ["--dp-size", "2"],
                     settings=[*FLOAT32, "server.on_child_failure=unhealthy"]).wait_until_healthy()
    try:
        os.kill(nodes.one.process.pid, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while nodes.zero.http("GET", "/health").status_code != 503:
            assert time.monotonic() < deadline, "node 0 never turned unhealthy"
            time.sleep(0.1)
        assert "node 1 launcher" in nodes.zero.http("GET", "/health").text
        assert nodes.zero.http("POST", "/generate", json={"text": "Hi"}).status_code == 503
        assert nodes.zero.process.poll() is None
    finally:
        nodes.stop()
    assert nodes.zero.process.returncode == 1


@needs_root
def test_a_node_that_disagrees_fails_both_naming_the_difference(namespaces, tiny_llama_dir, tmp_path):
    nodes = TwoNodes(namespaces, tiny_llama_dir, tmp_path, ["--tp-size", "2"],
                     settings_of_node_1=[*FLOAT32[:-2], "scheduler.max_running_requests=4", "model.dtype=float32"])
    try:
        assert nodes.zero.process.wait(timeout=TIMEOUT) == 1
        assert nodes.one.process.wait(timeout=TIMEOUT) == 1
    finally:
        nodes.stop()
    difference = "node 1 disagrees with node 0 on scheduler.max_running_requests; every node must be started"
    assert difference in nodes.zero.log() and difference in nodes.one.log()
    # Named, never shown: node 0's value is not told to the node (nor the node's written here).
    assert "against" not in nodes.one.log() and "against" not in nodes.zero.log()


@needs_root
def test_node_0_fails_when_a_node_never_joins(namespaces, tiny_llama_dir, tmp_path):
    zero = Node(namespaces, 0, tiny_llama_dir, tmp_path / "node0.log", ["--dp-size", "2"],
                [*FLOAT32, "parallel.dist_init_timeout=3"])
    try:
        assert zero.process.wait(timeout=TIMEOUT) == 1
    finally:
        zero.stop()
    assert ("node 1 process failed: did not join within 3 s (parallel.dist_init_timeout); start it with "
            f"--nnodes 2 --node-rank 1 --dist-init-addr {namespaces.addresses[0]}:{MEET_PORT}") in zero.log()


def test_a_node_that_cannot_reach_node_0_fails_within_its_timeout(tiny_llama_dir, tmp_path):
    # Nothing listens there: every attempt is refused until the timeout.
    port = free_port()
    started = time.monotonic()
    completed = subprocess.run(
        [sys.executable, "-m", "tercet", "serve", "--model", str(tiny_llama_dir), "--nnodes", "2", "--node-rank", "1",
         "--dist-init-addr", f"127.0.0.1:{port}", "--set", "parallel.dist_init_timeout=2", "--dp-size", "2"],
        capture_output=True, text=True, timeout=TIMEOUT, check=False,
        env={**os.environ, "TERCET_PARALLEL_NODE_SECRET": NODE_SECRET},
    )
    assert completed.returncode == 1
    assert (f"cannot reach node 0 at 127.0.0.1:{port} (parallel.dist_init_addr) within 2 s "
            "(parallel.dist_init_timeout): Connection refused") in completed.stderr, completed.stderr
    # The timeout, plus the start of a Python that loads a model's config: nowhere near a hang.
    assert time.monotonic() - started < 60
