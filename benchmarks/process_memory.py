"""Memory of a server's processes: PSS of the API process (TokenizerManager), each scheduler and the detokenizer.

PSS (proportional set size) counts each shared page divided by the number of
processes that map it, so the processes' PSS add up to what the server really
holds, and a library two processes both load is not counted twice.

    python benchmarks/process_memory.py --pid PID [--url http://127.0.0.1:8000] [--requests 4] [--json]
    python benchmarks/process_memory.py [--requests 4] [--json] -- [tercet serve arguments ...]

With ``--pid``, the running server whose API process has that PID is
measured. Otherwise ``tercet serve`` is started with the arguments after
``--`` (a free ``--port`` is added unless they give one), measured once
healthy, and stopped. Before measuring, ``--requests`` short chat completions
are sent (when the URL is known), so what the first requests load is counted.

The component children are named by start order, which is the server's: the
schedulers (rank order), then the detokenizer. The small helper processes (the
runtime-directory watcher, multiprocessing's resource tracker) are listed
after them, and counted in the total.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import subprocess
import sys
import tempfile
import time

import httpx
import psutil

MIB = 1 << 20
HEALTH_TIMEOUT_S = 600


def server_processes(pid: int) -> list[tuple[str, psutil.Process]]:
    """``(role, process)`` for the API process and its children: the components in start order, then helpers."""
    api = psutil.Process(pid)
    components, helpers = [], []
    for child in sorted(api.children(), key=lambda child: child.create_time()):
        command = " ".join(child.cmdline())
        if "spawn_main" in command:
            components.append(child)
        else:
            helpers.append((_helper_role(command), child))
    *schedulers, detokenizer = components if components else [None]
    roles = [("tokenizer manager", api)]
    names = ["scheduler"] if len(schedulers) == 1 else [f"scheduler-{rank}" for rank in range(len(schedulers))]
    roles += list(zip(names, schedulers))
    if detokenizer is not None:
        roles.append(("detokenizer", detokenizer))
    return roles + helpers


def _helper_role(command: str) -> str:
    if "resource_tracker" in command:
        return "resource tracker"
    if "tercet.ipc.runtime_dir" in command:
        return "runtime-dir watcher"
    return "other child"


def measure(pid: int) -> dict:
    rows = []
    for role, process in server_processes(pid):
        memory = process.memory_full_info()
        rows.append({"role": role, "pid": process.pid, "pss_mib": memory.pss / MIB, "uss_mib": memory.uss / MIB,
                     "rss_mib": memory.rss / MIB})
    return {"processes": rows, "total_pss_mib": sum(row["pss_mib"] for row in rows)}


def format_table(result: dict) -> str:
    lines = [f"{'process':<20} {'pid':>8} {'PSS MiB':>9} {'USS MiB':>9} {'RSS MiB':>9}"]
    for row in result["processes"]:
        lines.append(f"{row['role']:<20} {row['pid']:>8} {row['pss_mib']:>9.1f} {row['uss_mib']:>9.1f} "
                     f"{row['rss_mib']:>9.1f}")
    lines.append(f"{'total':<20} {'':>8} {result['total_pss_mib']:>9.1f}")
    return "\n".join(lines)


def send_requests(url: str, count: int) -> None:
    """A few short chat completions, so the memory measured is that of a server that has served."""
    with httpx.Client(base_url=url, timeout=300) as client:
        model = client.get("/v1/models").json()["data"][0]["id"]
        for index in range(count):
            response = client.post("/v1/chat/completions", json={
                "model": model, "max_tokens": 8, "temperature": 0,
                "messages": [{"role": "user", "content": f"Say hello to number {index}."}],
            })
            response.raise_for_status()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_server(serve_arguments: list[str]) -> tuple[subprocess.Popen, str]:
    arguments = list(serve_arguments)
    if "--port" in arguments:
        port = int(arguments[arguments.index("--port") + 1])
    else:
        port = free_port()
        arguments += ["--port", str(port)]
    url = f"http://127.0.0.1:{port}"
    # The log goes to a file: a pipe nobody reads would block the server once full.
    log = tempfile.TemporaryFile("w+")
    server = subprocess.Popen([sys.executable, "-m", "tercet", "serve", *arguments], stdout=log,
                              stderr=subprocess.STDOUT)
    deadline = time.monotonic() + HEALTH_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            log.seek(0)
            raise SystemExit(f"tercet serve exited with {server.returncode}:\n{log.read()}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return server, url
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    stop_server(server)
    raise SystemExit(f"tercet serve not healthy after {HEALTH_TIMEOUT_S} s")


def stop_server(server: subprocess.Popen) -> None:
    if server.poll() is None:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    serve_arguments = argv[argv.index("--") + 1:] if "--" in argv else []
    own_arguments = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pid", type=int, help="the API process of a running server (else one is started)")
    parser.add_argument("--url", help="the running server's base URL, for --requests (with --pid)")
    parser.add_argument("--requests", type=int, default=4, help="chat completions to send before measuring")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    arguments = parser.parse_args(own_arguments)
    server = None
    if arguments.pid is not None:
        pid, url = arguments.pid, arguments.url
    else:
        server, url = start_server(serve_arguments)
        pid = server.pid
    try:
        if url is not None and arguments.requests:
            send_requests(url, arguments.requests)
        result = measure(pid)
    finally:
        if server is not None:
            stop_server(server)
    print(json.dumps(result, indent=2) if arguments.json else format_table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
