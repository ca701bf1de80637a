"""Two nodes of one server on one machine: two network namespaces joined by a veth pair stand in
for two hosts (tests/e2e/network_namespaces.py), and ``tercet serve`` runs as node 0 in one and
node 1 in the other, both holding the same node secret."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest
from network_namespaces import NetworkNamespaces, can_create_namespaces

from tercet.testing import TINY_SETTINGS, RunningServer

TIMEOUT = 120
FLOAT32 = [*TINY_SETTINGS, "model.dtype=float32"]
HTTP_PORT = 30000
MEET_PORT = 29500
# Given through the environment, as a user would keep it off the command line.
NODE_SECRET = "node-secret-for-the-two-node-tests"

needs_root = pytest.mark.skipif(
    not can_create_namespaces() and os.environ.get("CI") != "true",
    reason="creating network namespaces needs root and iproute2 (CI has both)",
)


class Node(RunningServer):
    """``tercet serve`` as node ``rank`` of two, inside namespace ``rank`` (stopped and logged as any server)."""

    def __init__(self, namespaces: NetworkNamespaces, rank: int, model_dir: Path, log_path: Path,
                 args: list[str], settings: list[str] = FLOAT32, secret: str = NODE_SECRET):
        self.namespaces, self.rank, self.log_path = namespaces, rank, log_path
        address = namespaces.addresses[0]
        self.base_url = f"http://{address}:{HTTP_PORT}"
        command = [sys.executable, "-m", "tercet", "serve", "--model", str(model_dir), "--host", address,
                   "--port", str(HTTP_PORT), "--nnodes", "2", "--node-rank", str(rank),
                   "--dist-init-addr", f"{address}:{MEET_PORT}", *args]
        for setting in settings:
            command += ["--set", setting]
        self.log_file = open(log_path, "w")
        self.process = subprocess.Popen(namespaces.command(rank, command), stdout=self.log_file,
                                        stderr=subprocess.STDOUT,
                                        env={**os.environ, "TERCET_PARALLEL_NODE_SECRET": secret})
        self.psutil = psutil.Process(self.process.pid)

    def processes(self) -> list[psutil.Process]:
        return [self.psutil, *self.psutil.children(recursive=True)]

    def http(self, method: str, path: str, **kwargs) -> httpx.Response:
        """A request to node 0's API, from inside its namespace."""
        return self.namespaces.call_in(0, httpx.request, method, self.base_url + path, timeout=TIMEOUT, **kwargs)

    def wait_until_serving(self, others: list["Node"], timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for node in [self, *others]:
                if node.process.poll() is not None:
                    # Every node's log: one node's exit is often the other's failure, told in the other's log.
                    logs = "\n".join(f"--- node {each.rank}:\n{each.log()}" for each in [self, *others])
                    raise RuntimeError(f"node {node.rank} exited with {node.process.returncode}:\n{logs}")
            try:
                if self.http("GET", "/health").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"node 0 not healthy after {timeout} s:\n{self.log()}")


class TwoNodes:
    def __init__(self, namespaces, model_dir, tmp_path, args, settings=FLOAT32, settings_of_node_1=None):
        self.zero = Node(namespaces, 0, model_dir, tmp_path / "node0.log", args, settings)
        self.one = Node(namespaces, 1, model_dir, tmp_path / "node1.log", args, settings_of_node_1 or settings)

    def wait_until_healthy(self) -> "TwoNodes":
        self.zero.wait_until_serving([self.one])
        return self

    def processes(self) -> list[psutil.Process]:
        return [process for node in (self.zero, self.one) for process in node.processes()]

    def stop(self) -> None:
        # Node 0 first: it tells node 1 to stop.
        self.zero.stop()
        try:
            self.one.process.wait(30)
        finally:
            self.one.stop()
