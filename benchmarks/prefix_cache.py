"""Prefix cache on versus off: 32 requests sharing a 512-token system prompt.

Starts a real server twice on the default model (once with ``cache.prefix_cache``
on, once off), sends the same 32 concurrent requests (a shared 512-token system
prompt plus a short distinct question each, one output token so the time is
prefill), and prints each run's wall time, the cached prompt tokens reported
in usage, and the ratio. Both runs happen in one invocation, on one machine,
so the ratio is meaningful even where absolute times are noisy.

    python benchmarks/prefix_cache.py [--requests 32] [--system-tokens 512]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

import httpx

from tercet.testing import RunningServer


def build_prompts(tokenizer, num_requests: int, system_tokens: int) -> list[list[int]]:
    words = "the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxing matches".split()
    system: list[int] = []
    index = 0
    while len(system) < system_tokens:
        system += tokenizer.encode(" " + words[index % len(words)])
        index += 1
    system = system[:system_tokens]
    return [system + tokenizer.encode(f" Question {i}: what is {i} plus {i * 7}?") for i in range(num_requests)]


async def send_all(base_url: str, prompts: list[list[int]]) -> tuple[float, list[dict]]:
    async with httpx.AsyncClient(base_url=base_url, timeout=600) as client:
        started = time.perf_counter()
        responses = await asyncio.gather(*[
            client.post("/generate", json={"input_ids": prompt, "sampling_params": {"max_new_tokens": 1, "temperature": 0}})
            for prompt in prompts
        ])
        elapsed = time.perf_counter() - started
    for response in responses:
        response.raise_for_status()
    return elapsed, [response.json() for response in responses]


def run(prefix_cache: bool, prompts, log_dir: Path) -> tuple[float, int, list]:
    settings = [f"cache.prefix_cache={str(prefix_cache).lower()}", "cache.max_total_tokens=32768",
                "scheduler.max_running_requests=32"]
    server = RunningServer(None, log_dir / f"server-prefix-cache-{prefix_cache}.log", settings).wait_until_healthy()
    try:
        # Warm-up with an unrelated prompt: first-call costs, nothing the workload could reuse.
        asyncio.run(send_all(server.base_url, [list(range(1000, 1064))]))
        elapsed, answers = asyncio.run(send_all(server.base_url, prompts))
    finally:
        server.stop()
    cached = sum(answer["meta_info"].get("cached_tokens", 0) for answer in answers)
    return elapsed, cached, [answer["output_ids"] for answer in answers]


def main() -> None:
    from transformers import AutoTokenizer

    from tercet.formats.dequantized_reference import ensure_dequantized_default_model

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--system-tokens", type=int, default=512)
    parser.add_argument("--log-dir", type=Path, default=Path("/tmp"))
    arguments = parser.parse_args()

    tokenizer = AutoTokenizer.from_pretrained(ensure_dequantized_default_model())
    prompts = build_prompts(tokenizer, arguments.requests, arguments.system_tokens)
    total_prompt_tokens = sum(len(prompt) for prompt in prompts)
    results = {}
    for prefix_cache in (False, True):
        results[prefix_cache] = run(prefix_cache, prompts, arguments.log_dir)
        elapsed, cached, _ = results[prefix_cache]
        print(f"prefix_cache={str(prefix_cache).lower():5}  {arguments.requests} requests, {total_prompt_tokens} prompt tokens: "
              f"{elapsed:.2f} s, {total_prompt_tokens / elapsed:.0f} prompt tok/s, cached prompt tokens {cached}")
    off, on = results[False][0], results[True][0]
    print(f"prefill time ratio off/on: {off / on:.2f}x  (same outputs: {results[False][2] == results[True][2]})")


if __name__ == "__main__":
    main()
