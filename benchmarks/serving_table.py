"""The serving table of docs/benchmarks.md: each system at several concurrencies.

Every system is an OpenAI-compatible server started here, in turn, and loaded
with ``tercet bench`` (streamed ``/v1/completions``, greedy, ``ignore_eos``,
synthetic prompts from a seed); only one server runs at a time.

    python benchmarks/serving_table.py --system tercet-fp32 --system tercet-bf16 \\
        --system "llama.cpp-q4_1=/tmp/llamacpp/serve.sh" --json-out /tmp/table.json

A ``--system`` is ``tercet``, ``tercet-fp32``, ``tercet-bf16``, ``tercet-avx2``, ``tercet-avx512vnni``,
``tercet-kv-int8``, ``tercet-kv-fp8`` or
``NAME=COMMAND``: a shell command that starts a server on ``$PORT`` (its ``-np``/slots from ``$NP``).
The server's whole process tree (its session) is sampled for PSS: once when healthy (idle) and every
0.25 s during each load (peak). The markdown table goes to stdout; progress and server logs to stderr
and to files next to ``--json-out``.

On a shared machine one pass can land in a slow spell for one system and not
another. ``--rounds N`` runs the systems in turn N times (A, B, C, A, B, C, ...,
a fresh server each time) and the table shows each figure's median over the
rounds; every round's figures are in the JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

TERCET_SYSTEMS = {
    "tercet": [],  # the default: the GGUF's own Q4_1 blocks, bfloat16 activations
    "tercet-fp32": ["--quantization", "none", "--dtype", "float32"],
    "tercet-bf16": ["--quantization", "none", "--dtype", "bfloat16"],
    # The default with every kernel at the AVX2 level (and torch's held there too): an AVX2-only CPU's code.
    "tercet-avx2": ["--set", "model.cpu_isa=avx2"],
    # The code of a CPU with AVX-512 VNNI but no BF16 (Cascade Lake, Ice Lake): the block kernel's AVX2 code
    # with 256-bit vpdpbusd, AVX-512 elsewhere.
    "tercet-avx512vnni": ["--set", "model.cpu_isa=avx512vnni"],
    # The default with a quantized KV cache (a float16 scale a token and head) in the same kv_cache_memory.
    "tercet-kv-int8": ["--set", "cache.kv_dtype=int8"],
    "tercet-kv-fp8": ["--set", "cache.kv_dtype=fp8_e4m3"],
}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_server(system: str, port: int, max_concurrency: int, log_path: Path,
                 tercet_settings: tuple[str, ...] = ()) -> subprocess.Popen:
    """``system`` started on ``port``; a tercet system also gets ``tercet_settings`` (``SECTION.KEY=VALUE``)."""
    log = open(log_path, "w")
    env = dict(os.environ, PORT=str(port), NP=str(max_concurrency))
    if system in TERCET_SYSTEMS:
        command = [sys.executable, "-m", "tercet", "serve", "--port", str(port), *TERCET_SYSTEMS[system],
                   "--set", f"scheduler.max_running_requests={max(max_concurrency, 32)}"]
        command += [part for setting in tercet_settings for part in ("--set", setting)]
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    _, _, shell_command = system.partition("=")
    return subprocess.Popen(shell_command, shell=True, stdout=log, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)


# Not every OpenAI-compatible server has /health (llama-cpp-python's has not);
# any of these answering 200 means the server is up.
READINESS_PATHS = ("/health", "/v1/models")


def wait_until_healthy(base_url: str, process: subprocess.Popen, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}")
        for path in READINESS_PATHS:
            try:
                if httpx.get(base_url + path, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
        time.sleep(0.5)
    raise TimeoutError(f"{base_url} not healthy after {timeout} s")


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def session_pss(session_id: int) -> int:
    """Bytes of PSS of every process in the server's session (started with start_new_session)."""
    import psutil

    total = 0
    for process in psutil.process_iter():
        try:
            if os.getsid(process.pid) == session_id:
                total += process.memory_full_info().pss
        except (psutil.Error, ProcessLookupError, PermissionError):
            continue  # gone, or not ours to read
    return total


class PeakPss:
    """Samples a server session's PSS in a thread while a load runs; ``peak`` in bytes."""

    def __init__(self, session_id: int, interval: float = 0.25):
        self.session_id, self.interval = session_id, interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, session_pss(self.session_id))
            self._stop.wait(self.interval)

    def __enter__(self) -> "PeakPss":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def bench(base_url: str, concurrency: int, num_prompts: int, input_len: int, output_len: int,
          ignore_eos: bool = True) -> dict:
    command = [sys.executable, "-m", "tercet", "bench", "--base-url", base_url, "--concurrency", str(concurrency),
               "--num-prompts", str(num_prompts), "--input-len", str(input_len), "--output-len", str(output_len),
               "--warmup", str(min(concurrency, 4)), "--json"]
    if not ignore_eos:
        command.append("--no-ignore-eos")
    completed = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(completed.stdout)


def median_row(rounds: list[dict]) -> dict:
    """Each numeric figure's median over a system's rounds at one concurrency (or of its server)."""
    return {key: statistics.median(r[key] for r in rounds) for key, value in rounds[0].items()
            if isinstance(value, (int, float)) and not isinstance(value, bool)}


def markdown_table(results: dict[str, list[dict]], concurrencies: list[int]) -> str:
    header = "| system | start-up s | idle PSS MiB | " + " | ".join(
        f"c={c}: out tok/s | c={c}: TTFT p50 ms | c={c}: ITL p50 ms | c={c}: peak PSS MiB" for c in concurrencies
    ) + " |"
    lines = [header, "|---" * (3 + 4 * len(concurrencies)) + "|"]
    for system, rounds in results.items():
        rounds = [r for r in rounds if all(c in r for c in concurrencies)]
        if not rounds:
            continue
        server = median_row([r["server"] for r in rounds])
        cells = [f"{server['startup_s']:.1f}", f"{server['idle_pss_bytes'] / 2**20:.0f}"]
        for concurrency in concurrencies:
            row = median_row([r[concurrency] for r in rounds])
            cells += [f"{row['output_tokens_per_s']:.1f}", f"{row['p50_ttft_ms']:.0f}", f"{row['p50_itl_ms']:.1f}",
                      f"{row['peak_pss_bytes'] / 2**20:.0f}"]
        lines.append(f"| {system} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def run_system(system: str, concurrencies: list[int], arguments: argparse.Namespace, log_path: Path,
               figures: dict, save) -> None:
    """One round of one system: a fresh server, each concurrency in turn, into ``figures`` by
    concurrency (``save()`` after each, so a run cut short keeps what it measured)."""
    name = system.partition("=")[0]
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    print(f"[table] starting {name} (log {log_path})", file=sys.stderr)
    started = time.monotonic()
    process = start_server(system, port, max(concurrencies), log_path)
    try:
        wait_until_healthy(base_url, process)
        figures["server"] = {"startup_s": time.monotonic() - started, "idle_pss_bytes": session_pss(process.pid)}
        for concurrency in concurrencies:
            num_prompts = max(arguments.min_prompts, arguments.prompts_per_slot * concurrency)
            print(f"[table] {name}: concurrency {concurrency}, {num_prompts} requests", file=sys.stderr)
            with PeakPss(process.pid) as pss:
                row = bench(base_url, concurrency, num_prompts, arguments.input_len, arguments.output_len,
                            ignore_eos=name not in arguments.no_ignore_eos)
            row["peak_pss_bytes"] = pss.peak
            figures[concurrency] = row
            print(f"[table] {name} c={concurrency}: {row['output_tokens_per_s']:.1f} out tok/s, "
                  f"ITL p50 {row['p50_itl_ms']:.1f} ms, {row['total_output_tokens']} output tokens, "
                  f"failed {row['failed']}, peak PSS {pss.peak / 2**20:.0f} MiB", file=sys.stderr)
            save()
    finally:
        stop(process)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--system", action="append", required=True)
    parser.add_argument("--concurrency", type=int, action="append", default=None)
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--prompts-per-slot", type=int, default=2,
                        help="requests per concurrency slot (at least --min-prompts per run)")
    parser.add_argument("--min-prompts", type=int, default=8,
                        help="the fewest requests a run sends (fewer for long prompts at c=1)")
    parser.add_argument("--json-out", type=Path, required=True)
    parser.add_argument("--no-ignore-eos", action="append", default=[], metavar="NAME",
                        help="a system that rejects ignore_eos (transformers serve): its requests may end at EOS")
    parser.add_argument("--rounds", type=int, default=1,
                        help="run the systems in turn this many times; the table shows medians")
    arguments = parser.parse_args()
    # A SIGTERM (a time limit's) unwinds like an exception, so the server running is stopped, not left behind.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    concurrencies = arguments.concurrency or [1, 8, 32]
    results: dict[str, list[dict]] = {system.partition("=")[0]: [] for system in arguments.system}

    def save() -> None:
        arguments.json_out.write_text(json.dumps(results, indent=2))

    for round_index in range(arguments.rounds):
        for system in arguments.system:
            name = system.partition("=")[0]
            figures: dict = {}
            results[name].append(figures)
            suffix = f".round{round_index + 1}" if arguments.rounds > 1 else ""
            try:
                run_system(system, concurrencies, arguments, arguments.json_out.with_name(f"{name}{suffix}.log"),
                           figures, save)
            except (RuntimeError, TimeoutError, subprocess.CalledProcessError) as error:
                # One system failing (a peer that did not start) does not lose the others' rounds.
                print(f"[table] {name} round {round_index + 1} failed: {error}", file=sys.stderr)
                figures["error"] = str(error)
                save()
    print(markdown_table(results, concurrencies))
    return 0


if __name__ == "__main__":
    sys.exit(main())
