"""A real ``tercet serve`` in a subprocess: started, waited for, stopped.

The server is the command a user runs (``python -m tercet serve``), with its
own processes, sockets and HTTP, so a test of a plugin sees what a user would.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

import httpx

# Small pools keep start-up quick and memory low on a 2-core CI machine.
TINY_SETTINGS = ["cache.max_total_tokens=4096", "cache.page_size=8", "scheduler.max_running_requests=8"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class RunningServer:
    """``model_path`` None serves the built-in default model; ``settings`` are
    ``--set section.key=value`` strings; ``env`` is added to this process's."""

    def __init__(self, model_path: Path | None, log_path: Path, settings: Sequence[str] = (),
                 extra_args: Sequence[str] = (), env: dict[str, str] | None = None):
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = Path(log_path)
        command = [sys.executable, "-m", "tercet", "serve", "--port", str(self.port)]
        if model_path is not None:
            command += ["--model", str(model_path)]
        for setting in settings:
            command += ["--set", setting]
        command += list(extra_args)
        self.log_file = open(self.log_path, "w")
        self.process = subprocess.Popen(command, stdout=self.log_file, stderr=subprocess.STDOUT,
                                        env={**os.environ, **(env or {})})

    def wait_until_healthy(self, timeout: float = 300) -> "RunningServer":
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode}:\n{self.log()}")
            try:
                if httpx.get(self.base_url + "/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"server not healthy after {timeout} s:\n{self.log()}")

    def child_processes(self) -> list:
        import psutil

        return psutil.Process(self.process.pid).children(recursive=True)

    def log(self) -> str:
        if not self.log_file.closed:
            self.log_file.flush()
        return self.log_path.read_text(errors="replace")

    def stop(self) -> int:
        """SIGTERM (a graceful drain), a kill after 30 s; the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log_file.close()
        return self.process.returncode

    def __enter__(self) -> "RunningServer":
        return self.wait_until_healthy()

    def __exit__(self, *exc_info) -> None:
        self.stop()


def wait_for_ranks(base_url: str, predicate, timeout: float = 60) -> list[dict]:
    """Poll /get_server_info until ``predicate(ranks)`` holds; the ranks' states then."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ranks = httpx.get(base_url + "/get_server_info", timeout=30).json()["ranks"]
        if predicate(ranks):
            return ranks
        time.sleep(0.02)
    raise TimeoutError(f"server state never matched; last: {ranks}")


def num_running(ranks) -> int:
    return sum(rank["num_running_requests"] for rank in ranks)


def num_waiting(ranks) -> int:
    return sum(rank["num_waiting_requests"] for rank in ranks)
