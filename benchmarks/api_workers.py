"""One API process against several: ``server.api_workers`` 1 and 2 under loads that weigh on the front door.

    python3 benchmarks/api_workers.py [--workers 1 --workers 2] [--json-out /tmp/api_workers.json] [--quick]

For each worker count a server is started here (one at a time) and loaded with:

- ``front-door``: streamed ``/v1/chat/completions`` with ``max_tokens`` 1–4 and a user
  message of 1–2 k tokens (chat template, tokenizing and JSON dominate), c=64;
- ``embeddings``: ``/v1/embeddings`` of short texts on all-MiniLM-L6-v2 (a server of its
  own), c=64;
- ``decode``: ``tercet bench``'s default workload (128 in, 128 out, greedy) at c=32.

Each load reports requests/s, TTFT p50/p99 (for embeddings: the whole answer), and every
process's CPU: its CPU seconds over the load's wall time (1.0 = one core) and its share of
the whole server's CPU time, and (with ``--dp-size 2``) how many requests each rank finished,
which shows how evenly the workers' routers together spread them. The API process's share at one worker shows whether it was the
bottleneck. The client keeps c connections open: the kernel spreads them over the workers. ``--quick`` only checks that the script runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import subprocess
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


def start_server(model: str | None, workers: int, log_path: Path, settings: list[str]) -> RunningServer:
    server = RunningServer(Path(model) if model else None, log_path, settings, ["--api-workers", str(workers)])
    return server.wait_until_healthy(timeout=900)


class CpuMeter:
    """CPU seconds of every process of a server's tree, by title, between start() and stop()."""

    def __init__(self, pid: int):
        root = psutil.Process(pid)
        self.processes = [root, *root.children(recursive=True)]
        self.names = {process.pid: " ".join(part for part in process.cmdline()[:4] if part) for process in self.processes}

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
        self.started, self.began = self._times(), time.monotonic()

    def stop(self) -> dict[str, dict]:
        ended, wall = self._times(), time.monotonic() - self.began
        used = {pid: ended[pid] - self.started.get(pid, 0.0) for pid in ended}
        total = sum(used.values()) or 1.0
        return {f"{self.names[pid]} ({pid})": {"cores": seconds / wall, "share": seconds / total}
                for pid, seconds in sorted(used.items(), key=lambda item: -item[1])}


def chat_prompt(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1000, 2000)))


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


def finished_per_rank(base_url: str) -> dict[str, float]:
    """Completions and embedding inputs each data-parallel rank finished, from /metrics."""
    counts: dict[str, float] = {}
    for line in httpx.get(base_url + "/metrics", timeout=60).text.splitlines():
        if line.startswith(("tercet:request_success_total{", "tercet:embedding_inputs_total{")):
            rank = line.split('dp_rank="', 1)[1].split('"', 1)[0]
            counts[rank] = counts.get(rank, 0.0) + float(line.rsplit(" ", 1)[1])
    return counts


def measured(process: subprocess.Popen, base_url: str, load) -> dict:
    """``load()``'s figures, the CPU each process used meanwhile, and how the ranks shared the requests."""
    meter = CpuMeter(process.pid)
    before = finished_per_rank(base_url)
    meter.start()
    result = load()
    cpu = meter.stop()
    after = finished_per_rank(base_url)
    per_rank = {rank: after[rank] - before.get(rank, 0.0) for rank in sorted(after)}
    return {**result, "cpu": cpu, "finished_per_rank": per_rank}


def front_door_and_decode(workers: int, arguments, log_dir: Path) -> dict:
    server = start_server(arguments.model, workers, log_dir / f"server-{workers}.log",
                                     ["scheduler.max_running_requests=64", f"scheduler.dp_size={arguments.dp_size}"])
    process, base_url = server.process, server.base_url
    try:
        model, rng = model_of(base_url), random.Random(0)
        calls = [(lambda text, tokens: lambda client: timed_chat(client, model, text, tokens))(
            chat_prompt(rng), rng.randint(1, 4)) for _ in range(arguments.front_door_requests)]
        front = measured(process, base_url, lambda: asyncio.run(run_load(base_url, 64, calls)))
        config = BenchConfig(base_url, num_prompts=arguments.decode_requests, input_len=128,
                             output_len=arguments.decode_tokens, concurrency=32)
        decode = measured(process, base_url, lambda: _decode_figures(run_serving_benchmark(config, sys.stderr)))
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
                                     ["scheduler.max_running_requests=64", f"scheduler.dp_size={arguments.dp_size}"])
    process, base_url = server.process, server.base_url
    try:
        model, rng = model_of(base_url), random.Random(1)
        texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 16)))
                 for _ in range(arguments.embedding_requests)]
        calls = [(lambda text: lambda client: timed_embedding(client, model, text))(text) for text in texts]
        return measured(process, base_url, lambda: asyncio.run(run_load(base_url, 64, calls)))
    finally:
        server.stop()


def table(results: dict) -> str:
    lines = ["| api_workers | load | requests/s | TTFT p50 ms | TTFT p99 ms | finished per rank | CPU (cores used, share) by process |",
             "|---|---|---|---|---|---|---|"]
    for workers, loads in results.items():
        for load, figures in loads.items():
            cpu = "; ".join(f"{name}: {use['cores']:.2f}, {use['share']:.0%}" for name, use in figures["cpu"].items()
                            if use["share"] >= 0.01)
            ranks = ", ".join(f"{count:.0f}" for count in figures["finished_per_rank"].values())
            lines.append(f"| {workers} | {load} | {figures['requests_per_s']:.1f} | {figures['ttft_p50_ms']:.0f} | "
                         f"{figures['ttft_p99_ms']:.0f} | {ranks} | {cpu} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, action="append", help="api_workers values (default: 1 and 2)")
    parser.add_argument("--model", help="checkpoint for the front-door and decode loads (default: the built-in model)")
    parser.add_argument("--front-door-requests", type=int, default=512)
    parser.add_argument("--embedding-requests", type=int, default=2048)
    parser.add_argument("--decode-requests", type=int, default=64)
    parser.add_argument("--decode-tokens", type=int, default=128)
    parser.add_argument("--dp-size", type=int, default=1,
                        help="data-parallel ranks: above 1, finished_per_rank shows how the workers' requests spread")
    parser.add_argument("--quick", action="store_true", help="a few requests of each load: checks that it runs")
    parser.add_argument("--json-out", type=Path)
    arguments = parser.parse_args()
    if arguments.quick:
        arguments.front_door_requests, arguments.embedding_requests = 8, 16
        arguments.decode_requests, arguments.decode_tokens = 4, 8
    log_dir = (arguments.json_out.parent if arguments.json_out else Path.cwd())
    results = {}
    for workers in arguments.workers or [1, 2]:
        results[workers] = {**front_door_and_decode(workers, arguments, log_dir),
                            "embeddings": embeddings(workers, arguments, log_dir)}
        print(f"api_workers = {workers} done", file=sys.stderr)
    if arguments.json_out:
        arguments.json_out.write_text(json.dumps(results, indent=2))
    print(table(results))


if __name__ == "__main__":
    main()
