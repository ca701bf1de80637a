"""One API process against several: ``server.api_workers`` 1 and 2 under loads that weigh on the front door.

    python3 benchmarks/api_workers.py [--workers 1 --workers 2] [--json-out /tmp/api_workers.json] [--quick]

For each worker count a server is started here (one at a time) and loaded with:

- ``front-door``: streamed ``/v1/chat/completions`` with ``max_tokens`` 1–4 and a user
  message of 1–2 k tokens, c=64. Each message is one of a few long texts plus a short
  tail of its own: the prefix cache computes each long text once (a warm-up request
  each, not measured), so the scheduler's prefill is the tail alone while the API
  process still templates, tokenizes and streams the whole request. Without that
  sharing, 1–2 k fresh tokens a request make the model's prefill the bottleneck on a
  CPU and the load measures the scheduler, not the front door;
- ``embeddings``: ``/v1/embeddings`` of short texts on all-MiniLM-L6-v2 (a server of its
  own), c=64;
- ``decode``: ``tercet bench``'s default workload (128 in, 128 out, greedy) at c=32.

Each load reports requests/s, TTFT p50/p99 (for embeddings: the whole answer), how many
requests each API worker took (the client keeps c connections open and the kernel spreads
them over the workers), with ``--dp-size 2`` how many each rank finished, and the CPU
seconds each process used per request, summed by role (the API processes, the
schedulers, the detokenizer, the main process, this client). Then the ratios of every
figure at each worker count to those at the first, and a projection to a host with
``--project-cores`` cores from the per-request CPU costs measured at the first count
(see docs/benchmarks.md for the method). The defaults take about 8 minutes on a 2-core
machine; ``--quick`` only checks that the script runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import re
import sys
import time
from pathlib import Path

import httpx
import psutil

from tercet.bench.serving import BenchConfig, run_serving_benchmark
from tercet.bench.summary import percentile, summarize
from tercet.formats.embedding_model import ensure_minilm_dir
from tercet.testing.running_server import RunningServer

WORDS = ("river stone lamp orange quiet market window garden silver letter music cloud "
         "engine paper winter forest candle bridge yellow harbor").split()
# Long texts the front-door messages start with: few enough that the prefix cache holds them all.
NUM_SHARED_TEXTS = 4
TAIL_WORDS = 8
ROLES = ("api", "scheduler", "detokenizer", "main", "client")
# Room for the shared texts (1–2 k tokens each) and 64 requests' tails and outputs.
SERVER_SETTINGS = ["scheduler.max_running_requests=64", "cache.max_total_tokens=32768"]


def start_server(model: str | None, workers: int, log_path: Path, settings: list[str]) -> RunningServer:
    server = RunningServer(Path(model) if model else None, log_path, settings, ["--api-workers", str(workers)])
    server.wait_until_healthy(timeout=900)
    # /health answers once one worker listens; connections opened before the others do would all go to it.
    deadline = time.monotonic() + 300
    while workers > 1 and f"{workers} API workers listening" not in server.log():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not every API worker listens:\n{server.log()}")
        time.sleep(0.2)
    return server


def role_of(title: str) -> str:
    for role, marks in (("api", ("api worker", "http api")), ("scheduler", ("scheduler",)),
                        ("detokenizer", ("detokenizer",))):
        if any(mark in title for mark in marks):
            return role
    return "main"


class CpuMeter:
    """CPU seconds of every process of a server's tree and of this client, between start() and stop()."""

    def __init__(self, pid: int):
        root = psutil.Process(pid)
        self.processes = [root, *root.children(recursive=True)]
        self.roles = {process.pid: role_of(" ".join(process.cmdline()[:4])) for process in self.processes}
        self.processes.append(psutil.Process())
        self.roles[self.processes[-1].pid] = "client"

    def _times(self) -> dict[int, float]:
        times = {}
        for process in self.processes:
            try:
                cpu = process.cpu_times()
                times[process.pid] = cpu.user + cpu.system
            except psutil.NoSuchProcess:
                pass
        return times

    def start(self) -> None:
        self.started = self._times()

    def stop(self) -> dict[str, float]:
        """CPU seconds by role."""
        ended, used = self._times(), dict.fromkeys(ROLES, 0.0)
        for pid, seconds in ended.items():
            used[self.roles[pid]] += seconds - self.started.get(pid, 0.0)
        return used


def front_door_texts(rng: random.Random, count: int) -> tuple[list[str], list[str]]:
    """The shared long texts (one warm-up message each) and ``count`` messages: a shared text and a tail."""
    shared = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1000, 2000))) for _ in range(NUM_SHARED_TEXTS)]
    messages = [f"{rng.choice(shared)} {' '.join(rng.choice(WORDS) for _ in range(TAIL_WORDS))} {index}"
                for index in range(count)]
    return shared, messages


async def timed_chat(client: httpx.AsyncClient, model: str, text: str, max_tokens: int) -> float:
    """Seconds to the first content of a streamed chat completion."""
    body = {"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": max_tokens,
            "temperature": 0, "stream": True}
    start = time.perf_counter()
    first = None
    async with client.stream("POST", "/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if first is None and line.startswith("data: {") and json.loads(line[6:])["choices"][0]["delta"].get("content"):
                first = time.perf_counter() - start
    return first if first is not None else time.perf_counter() - start


async def timed_embedding(client: httpx.AsyncClient, model: str, text: str) -> float:
    start = time.perf_counter()
    response = await client.post("/v1/embeddings", json={"model": model, "input": text})
    response.raise_for_status()
    return time.perf_counter() - start


async def run_load(base_url: str, concurrency: int, calls: list) -> dict:
    """Run ``calls`` (each ``client -> awaitable of seconds``) ``concurrency`` at a time."""
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    gate = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(base_url=base_url, timeout=600, limits=limits) as client:
        async def one(call):
            async with gate:
                return await call(client)

        start = time.perf_counter()
        seconds = await asyncio.gather(*(one(call) for call in calls))
        wall = time.perf_counter() - start
    return {"requests": len(calls), "requests_per_s": len(calls) / wall, "ttft_p50_ms": percentile(seconds, 50) * 1e3,
            "ttft_p99_ms": percentile(seconds, 99) * 1e3}


def model_of(base_url: str) -> str:
    return httpx.get(base_url + "/v1/models", timeout=30).json()["data"][0]["id"]


def counts_by_label(base_url: str) -> dict[str, dict[str, float]]:
    """From /metrics: requests each API worker sent, completions and embedding inputs each rank finished."""
    counts: dict[str, dict[str, float]] = {"per_worker": {}, "per_rank": {}}
    patterns = (("per_worker", r'tercet:api_worker_requests_total\{.*api_worker="(\d+)".*\} (\S+)'),
                ("per_rank", r'tercet:(?:request_success|embedding_inputs)_total\{.*dp_rank="(\d+)".*\} (\S+)'))
    for line in httpx.get(base_url + "/metrics", timeout=60).text.splitlines():
        for key, pattern in patterns:
            match = re.match(pattern, line)
            if match:
                counts[key][match.group(1)] = counts[key].get(match.group(1), 0.0) + float(match.group(2))
    return counts


def measured(server: RunningServer, load) -> dict:
    """``load()``'s figures, the CPU seconds per request of each role meanwhile, and how the
    workers and the ranks shared the requests."""
    meter = CpuMeter(server.process.pid)
    before = counts_by_label(server.base_url)
    meter.start()
    result = load()
    cpu = meter.stop()
    after = counts_by_label(server.base_url)
    shares = {key: {label: after[key][label] - before[key].get(label, 0.0) for label in sorted(after[key])}
              for key in after}
    return {**result, **shares, "cpu_ms_per_request": {role: seconds * 1e3 / result["requests"]
                                                       for role, seconds in cpu.items()}}


def front_door_and_decode(workers: int, arguments, log_dir: Path) -> dict:
    server = start_server(arguments.model, workers, log_dir / f"server-{workers}.log",
                          [*SERVER_SETTINGS, f"scheduler.dp_size={arguments.dp_size}"])
    try:
        base_url = server.base_url
        model, rng = model_of(base_url), random.Random(0)
        shared, messages = front_door_texts(rng, arguments.front_door_requests)
        # Each shared text is computed before the measured load: one after the other on one
        # connection, so with round-robin ranks each text's dp_size tries reach every rank.
        warmups = [lambda client, text=text: timed_chat(client, model, text, 1)
                   for text in shared for _ in range(arguments.dp_size)]
        asyncio.run(run_load(base_url, 1, warmups))
        calls = [lambda client, text=text, tokens=rng.randint(1, 4): timed_chat(client, model, text, tokens)
                 for text in messages]
        front = measured(server, lambda: asyncio.run(run_load(base_url, 64, calls)))
        config = BenchConfig(base_url, num_prompts=arguments.decode_requests, input_len=128,
                             output_len=arguments.decode_tokens, concurrency=32)
        decode = measured(server, lambda: _decode_figures(run_serving_benchmark(config, sys.stderr)))
        return {"front-door": front, "decode": decode}
    finally:
        server.stop()


def _decode_figures(run) -> dict:
    summary = summarize(run.outcomes, run.duration_s)
    return {"requests": summary.completed, "requests_per_s": summary.requests_per_s,
            "ttft_p50_ms": summary.ttft.p50, "ttft_p99_ms": summary.ttft.p99,
            "output_tokens_per_s": summary.output_tokens_per_s}


def embeddings(workers: int, arguments, log_dir: Path) -> dict:
    server = start_server(str(ensure_minilm_dir()), workers, log_dir / f"minilm-{workers}.log",
                          [*SERVER_SETTINGS, f"scheduler.dp_size={arguments.dp_size}"])
    try:
        model, rng = model_of(server.base_url), random.Random(1)
        texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 16)))
                 for _ in range(arguments.embedding_requests)]
        calls = [lambda client, text=text: timed_embedding(client, model, text) for text in texts]
        return measured(server, lambda: asyncio.run(run_load(server.base_url, 64, calls)))
    finally:
        server.stop()


def figures_table(results: dict) -> str:
    lines = ["| api_workers | load | requests/s | TTFT p50 ms | TTFT p99 ms | requests per worker | finished per rank | "
             "CPU ms per request: " + ", ".join(ROLES) + " | API share of the server's CPU |",
             "|---|---|---|---|---|---|---|---|---|"]
    for workers, loads in results.items():
        for load, figures in loads.items():
            cpu_ms = figures["cpu_ms_per_request"]
            cpu = ", ".join(f"{cpu_ms[role]:.1f}" for role in ROLES)
            server_ms = sum(cpu_ms[role] for role in ROLES if role != "client") or 1.0
            spread = [", ".join(f"{count:.0f}" for count in figures[key].values()) for key in ("per_worker", "per_rank")]
            lines.append(f"| {workers} | {load} | {figures['requests_per_s']:.1f} | {figures['ttft_p50_ms']:.0f} | "
                         f"{figures['ttft_p99_ms']:.0f} | {spread[0]} | {spread[1]} | {cpu} | {cpu_ms['api'] / server_ms:.0%} |")
    return "\n".join(lines)


def ratios_table(results: dict) -> str:
    """Every worker count's figures over the first count's, measured in this one run."""
    counts = list(results)
    lines = ["| load | api_workers | requests/s ratio | TTFT p50 ratio | TTFT p99 ratio | API CPU per request ratio |",
             "|---|---|---|---|---|---|"]
    for load in results[counts[0]]:
        base = results[counts[0]][load]
        for workers in counts[1:]:
            figures = results[workers][load]
            ratio = [figures[key] / base[key] for key in ("requests_per_s", "ttft_p50_ms", "ttft_p99_ms")]
            api = figures["cpu_ms_per_request"]["api"] / base["cpu_ms_per_request"]["api"]
            lines.append(f"| {load} | {workers} against {counts[0]} | {ratio[0]:.2f}× | {ratio[1]:.2f}× | "
                         f"{ratio[2]:.2f}× | {api:.2f}× |")
    return "\n".join(lines)


def projection(cpu_ms: dict[str, float], cores: int) -> dict:
    """Requests/s a host of ``cores`` cores could serve with one API process, and with the split
    of cores between API workers and ranks that balances them, each process one serial core
    (see docs/benchmarks.md). ``cpu_ms``: CPU ms per request by role."""
    api, rank, detokenizer = cpu_ms["api"], cpu_ms["scheduler"], cpu_ms["detokenizer"]
    usable = cores - 2  # one core each for the detokenizer and the main process
    detokenizer_bound = 1e3 / detokenizer if detokenizer > 0 else math.inf
    one_worker = min(1e3 / api, (usable - 1) * 1e3 / rank, detokenizer_bound)
    workers = max(1, min(usable - 1, round(usable * api / (api + rank))))
    balanced = min(workers * 1e3 / api, (usable - workers) * 1e3 / rank, detokenizer_bound)
    return {"one_worker_rps": one_worker, "workers": workers, "ranks": usable - workers, "balanced_rps": balanced,
            "gain": balanced / one_worker, "detokenizer_bound_rps": detokenizer_bound}


def projection_table(results: dict, cores: int) -> str:
    workers = next(iter(results))
    lines = [f"Projection to {cores} cores from the CPU per request measured at api_workers = {workers}:",
             "| load | 1 API process: requests/s | balanced: API workers + rank cores | balanced: requests/s | gain | "
             "detokenizer bound requests/s |", "|---|---|---|---|---|---|"]
    for load, figures in results[workers].items():
        bound = projection(figures["cpu_ms_per_request"], cores)
        lines.append(f"| {load} | {bound['one_worker_rps']:.0f} | {bound['workers']} + {bound['ranks']} | "
                     f"{bound['balanced_rps']:.0f} | {bound['gain']:.1f}× | {_bound(bound['detokenizer_bound_rps'])} |")
    return "\n".join(lines)


def _bound(rate: float) -> str:
    return f"{rate:.0f}" if math.isfinite(rate) else "none (no text to detokenize)"


def parsed_arguments():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, action="append", help="api_workers values (default: 1 and 2)")
    parser.add_argument("--model", help="checkpoint for the front-door and decode loads (default: the built-in model)")
    parser.add_argument("--front-door-requests", type=int, default=256)
    parser.add_argument("--embedding-requests", type=int, default=1024)
    parser.add_argument("--decode-requests", type=int, default=64)
    parser.add_argument("--decode-tokens", type=int, default=128)
    parser.add_argument("--dp-size", type=int, default=1,
                        help="data-parallel ranks: above 1, finished per rank shows how the workers' requests spread")
    parser.add_argument("--project-cores", type=int, default=64, help="the host size the projection is for")
    parser.add_argument("--quick", action="store_true", help="a few requests of each load: checks that it runs")
    parser.add_argument("--json-out", type=Path)
    arguments = parser.parse_args()
    if arguments.quick:
        arguments.front_door_requests, arguments.embedding_requests = 16, 32
        arguments.decode_requests, arguments.decode_tokens = 4, 8
    return arguments


def main() -> None:
    arguments, began = parsed_arguments(), time.monotonic()
    log_dir = (arguments.json_out.parent if arguments.json_out else Path.cwd())
    results = {}
    for workers in arguments.workers or [1, 2]:
        results[workers] = {**front_door_and_decode(workers, arguments, log_dir),
                            "embeddings": embeddings(workers, arguments, log_dir)}
        print(f"api_workers = {workers} done after {time.monotonic() - began:.0f} s", file=sys.stderr)
    if arguments.json_out:
        arguments.json_out.write_text(json.dumps(results, indent=2))
    print(figures_table(results), end="\n\n")
    if len(results) > 1:
        print(ratios_table(results), end="\n\n")
    print(projection_table(results, arguments.project_cores))


if __name__ == "__main__":
    main()
