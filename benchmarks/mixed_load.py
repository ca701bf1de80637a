"""Long prompts arriving among decoding streams: the streams' inter-token latency and the prompts' time to first token.

For each system (a server started here, one at a time, as in serving_table.py):

1. **Unloaded:** 31 streams decode (64-token prompts, long greedy outputs) for
   ``--seconds``; every gap between two of a stream's tokens in that window is one ITL.
2. **Loaded:** 31 fresh streams decode while a prompt of ``--long-prompt`` tokens
   (16 tokens out) arrives once a second for ``--seconds``. The streams' ITLs in that
   window, and each long prompt's TTFT.

Prints a table: ITL p50 and p99 unloaded and loaded, the loaded p99 over the unloaded p50
and over the unloaded p99 (the bound asked: ≤ 2×), and the long prompts' TTFT p50 and p99.
Streams that have not started (no first token) when the window opens do not count; the
window's first second is skipped so that every stream is past its prefill.

    python benchmarks/mixed_load.py --system tercet --system "llama.cpp=/tmp/llamacpp/serve-native.sh" \\
        --system "vllm=/tmp/bench/vllm.sh" --json-out /tmp/mixed.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serving_table import free_port, start_server, stop, wait_until_healthy  # noqa: E402

from tercet.bench.serving import _completion_payload  # noqa: E402
from tercet.bench.streaming_client import sse_data  # noqa: E402
from tercet.bench.workload import load_tokenizer, synthetic_requests  # noqa: E402

STREAMS = 31
STREAM_PROMPT_TOKENS = 64
STREAM_OUTPUT_TOKENS = 4000
LONG_OUTPUT_TOKENS = 16
SETTLE_S = 1.0


async def _stream(client, url: str, payload: dict, arrivals: list[float], stop_at: float) -> None:
    """Append the time of each output chunk to ``arrivals`` until the stream ends or ``stop_at``."""
    try:
        async with client.stream("POST", url, json=payload) as response:
            async for line in response.aiter_lines():
                data = sse_data(line)
                if data is None or data == "[DONE]":
                    continue
                chunk = json.loads(data)
                if any(choice.get("text") for choice in chunk.get("choices", [])):
                    arrivals.append(time.perf_counter())
                if time.perf_counter() >= stop_at:
                    return
    except httpx.HTTPError as error:
        print(f"[mixed] a stream failed: {type(error).__name__} {error}", file=sys.stderr)


def _gaps_in(arrivals: list[float], start: float, end: float) -> list[float]:
    inside = [moment for moment in arrivals if start <= moment <= end]
    return [later - earlier for earlier, later in zip(inside, inside[1:])]


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else float("nan")


async def _phase(base_url: str, model: str, tokenizer, seconds: float, long_prompt: int | None, seed: int) -> dict:
    url = base_url + "/v1/completions"
    streams = synthetic_requests(tokenizer, STREAMS, STREAM_PROMPT_TOKENS, STREAM_OUTPUT_TOKENS, seed, "streams")
    longs = (synthetic_requests(tokenizer, int(seconds), long_prompt, LONG_OUTPUT_TOKENS, seed, "long")
             if long_prompt else [])
    limits = httpx.Limits(max_connections=STREAMS + len(longs) + 4)
    async with httpx.AsyncClient(timeout=httpx.Timeout(600.0), limits=limits) as client:
        began = time.perf_counter()
        window_start = None
        arrivals: list[list[float]] = [[] for _ in streams]
        stop_at = began + 600
        tasks = [asyncio.create_task(_stream(client, url, _completion_payload(model, request), arrivals[index],
                                             stop_at)) for index, request in enumerate(streams)]
        while not all(arrivals):  # every stream past its prefill
            await asyncio.sleep(0.05)
        window_start = time.perf_counter() + SETTLE_S
        window_end = window_start + seconds
        ttfts: list[float] = []

        async def long_request(request, send_at: float) -> None:
            await asyncio.sleep(max(0.0, send_at - time.perf_counter()))
            sent = time.perf_counter()
            first: list[float] = []
            await _stream(client, url, _completion_payload(model, request), first, sent + 600)
            if first:
                ttfts.append(first[0] - sent)

        long_tasks = [asyncio.create_task(long_request(request, window_start + index))
                      for index, request in enumerate(longs)]
        await asyncio.sleep(max(0.0, window_end - time.perf_counter()))
        await asyncio.gather(*long_tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    gaps = [gap for stream in arrivals for gap in _gaps_in(stream, window_start, window_end)]
    return {"itl_p50_ms": _percentile(gaps, 0.5) * 1e3, "itl_p99_ms": _percentile(gaps, 0.99) * 1e3,
            "gaps": len(gaps), "ttft_ms": [ttft * 1e3 for ttft in sorted(ttfts)],
            "stream_setup_s": window_start - SETTLE_S - began}


def _model_name(base_url: str) -> str:
    models = httpx.get(base_url + "/v1/models", timeout=30).json()["data"]
    return models[0]["id"]


# The load holds about 31 streams and up to 20 long prompts at once: far past the default pool
# (8,736 tokens), which would retract streams over and over. A tercet system gets a pool that holds
# it, as the other systems are started with room for it (vllm.sh's KV_GIB, llama-server's slots).
TERCET_POOL = ("cache.max_total_tokens=131072",)


def run_system(system: str, arguments: argparse.Namespace, tokenizer) -> dict:
    name = system.partition("=")[0]
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    log_path = arguments.json_out.with_name(f"mixed-{name}.log")
    print(f"[mixed] starting {name} (log {log_path})", file=sys.stderr)
    process = start_server(system, port, STREAMS + int(arguments.seconds) + 1, log_path, TERCET_POOL)
    try:
        wait_until_healthy(base_url, process)
        model = _model_name(base_url)
        unloaded = asyncio.run(_phase(base_url, model, tokenizer, arguments.seconds, None, seed=1))
        print(f"[mixed] {name} unloaded: {unloaded['itl_p50_ms']:.1f} / {unloaded['itl_p99_ms']:.1f} ms",
              file=sys.stderr)
        loaded = asyncio.run(_phase(base_url, model, tokenizer, arguments.seconds, arguments.long_prompt, seed=2))
        print(f"[mixed] {name} loaded: {loaded['itl_p50_ms']:.1f} / {loaded['itl_p99_ms']:.1f} ms, "
              f"TTFT {loaded['ttft_ms']}", file=sys.stderr)
        return {"unloaded": unloaded, "loaded": loaded}
    finally:
        stop(process)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--system", action="append", required=True)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--long-prompt", type=int, default=2048)
    parser.add_argument("--json-out", type=Path, required=True)
    arguments = parser.parse_args()
    tokenizer = load_tokenizer(None)
    results = {}
    for system in arguments.system:
        results[system.partition("=")[0]] = run_system(system, arguments, tokenizer)
        arguments.json_out.write_text(json.dumps(results, indent=2))
    print("| system | ITL p50 / p99 unloaded ms | ITL p50 / p99 loaded ms | loaded p99 / unloaded p50 | "
          "loaded p99 / unloaded p99 | long-prompt TTFT p50 / p99 ms |")
    print("|---|---|---|---|---|---|")
    for name, result in results.items():
        unloaded, loaded = result["unloaded"], result["loaded"]
        ttft = loaded["ttft_ms"]
        print(f"| {name} | {unloaded['itl_p50_ms']:.1f} / {unloaded['itl_p99_ms']:.1f} | "
              f"{loaded['itl_p50_ms']:.1f} / {loaded['itl_p99_ms']:.1f} | "
              f"{loaded['itl_p99_ms'] / unloaded['itl_p50_ms']:.2f}× | {loaded['itl_p99_ms'] / unloaded['itl_p99_ms']:.2f}× | "
              f"{_percentile(ttft, 0.5):.0f} / {_percentile(ttft, 0.99):.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
