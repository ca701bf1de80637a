"""Start-up to healthy: ``tercet serve`` on the default model, on a fresh cache and on a warm one.

A fresh start gets a new, empty ``TERCET_CACHE_DIR`` (nothing compiled or
converted there yet: only what installing tercet built); a warm start reuses
the cache of the fresh start before it. Rounds alternate fresh and warm, so a
busy spell of the machine hits both. Prints each start's seconds to a 200 from
``/health`` and the CPU seconds each process (and the compilers it ran) spent
until then, then the medians. Run on an otherwise idle machine:

    python benchmarks/startup.py --rounds 3
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_once(cache_dir: Path, extra_args: list[str]) -> tuple[float, dict[str, float]]:
    """Seconds to healthy, and CPU seconds by process until then."""
    port = free_port()
    env = dict(os.environ, TERCET_CACHE_DIR=str(cache_dir))
    command = [str(Path(sys.executable).parent / "tercet"), "serve", "--port", str(port), *extra_args]
    began = time.perf_counter()
    server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    cpu: dict[int, tuple[str, float]] = {}
    root = psutil.Process(server.pid)
    try:
        while True:
            _sample_cpu(root, cpu)
            if server.poll() is not None:
                raise RuntimeError(f"the server exited with {server.returncode} before it was healthy")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.02)
        seconds = time.perf_counter() - began
        _sample_cpu(root, cpu)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait()
    by_name: dict[str, float] = {}
    for name, seconds_of_cpu in cpu.values():
        by_name[name] = by_name.get(name, 0.0) + seconds_of_cpu
    return seconds, by_name


def _sample_cpu(root: psutil.Process, cpu: dict) -> None:
    for process in [root, *root.children(recursive=True)]:
        try:
            times = process.cpu_times()
            name = process.name() if process.name() in ("cc", "cc1", "gcc", "as", "ld", "collect2") else " ".join(
                process.cmdline()[:3])[:40]
            cpu[process.pid] = (name, times.user + times.system)
        except psutil.Error:
            pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("serve_args", nargs="*", help="more arguments for tercet serve (after --)")
    args = parser.parse_args()
    results: dict[str, list[float]] = {"fresh": [], "warm": []}
    with tempfile.TemporaryDirectory(prefix="tercet-startup-") as scratch:
        for round_number in range(args.rounds):
            cache = Path(scratch) / f"cache{round_number}"
            for kind in ("fresh", "warm"):
                seconds, cpu = start_once(cache, args.serve_args)
                results[kind].append(seconds)
                spent = ", ".join(f"{name} {value:.2f}" for name, value in sorted(cpu.items(), key=lambda i: -i[1]))
                print(f"round {round_number + 1} {kind}: healthy in {seconds:.2f} s; CPU s: {spent}", flush=True)
            shutil.rmtree(cache, ignore_errors=True)
    for kind, values in results.items():
        print(f"{kind}: median {statistics.median(values):.2f} s (min {min(values):.2f}, max {max(values):.2f})")


if __name__ == "__main__":
    main()
