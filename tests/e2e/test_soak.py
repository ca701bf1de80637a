"""A bounded soak: hundreds of concurrent streaming clients for a while.

Every client loops until the time is up: a greedy streamed completion of one
of a few prompts, checked against that prompt's reference output. The queue
is smaller than the crowd, so some requests are refused with 503 and the
client retries after ``Retry-After``. At the end every admitted request must
have completed correctly, nothing may be left running or holding KV pages,
and the server's memory (main process and children) must not keep growing.

CI runs the short version; for the figures in the notes run e.g.
``TERCET_SOAK_SECONDS=180 TERCET_SOAK_CLIENTS=300 pytest -s -m soak``.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import threading
import time

import httpx
import psutil
import pytest

from tercet.testing import TINY_SETTINGS, num_running, num_waiting, wait_for_ranks

pytestmark = pytest.mark.soak

SOAK_SECONDS = float(os.environ.get("TERCET_SOAK_SECONDS", "20"))
SOAK_CLIENTS = int(os.environ.get("TERCET_SOAK_CLIENTS", "200"))
PROMPTS = ["Count", "Once upon a time", "The capital of France is", "def main():", "Hello", "1, 2, 3,"]
MAX_TOKENS_CHOICES = (8, 16, 32)
SETTINGS = TINY_SETTINGS + [
    "scheduler.max_running_requests=32",
    "scheduler.max_queued_requests=64",
    "cache.max_total_tokens=8192",
    # No prefix cache: with nothing running, the KV pages in use are back at the idle baseline.
    "cache.prefix_cache=false",
]
# Growth allowed between the first and second half's peak memory: allocator
# noise, not a leak proportional to the requests served.
MEMORY_SLACK_BYTES = 64 * 1024 * 1024


class MemorySampler:
    """Samples the resident memory of a process and its children on a thread."""

    def __init__(self, pid: int, interval: float = 0.25):
        self.process = psutil.Process(pid)
        self.interval = interval
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _total_rss(self) -> int:
        total = self.process.memory_info().rss
        for child in self.process.children(recursive=True):
            try:
                total += child.memory_info().rss
            except psutil.NoSuchProcess:
                pass
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.monotonic(), self._total_rss()))
            self._stop.wait(self.interval)

    def __enter__(self) -> "MemorySampler":
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._stop.set()
        self._thread.join()

    def peak_between(self, start: float, end: float) -> int:
        return max(rss for at, rss in self.samples if start <= at <= end)


async def streamed_completion(client: httpx.AsyncClient, model: str, prompt: str, max_tokens: int):
    """(status, text, finish_reason, retry_after or the stream's lines) of one streamed greedy completion."""
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
            "stream": True}
    async with client.stream("POST", "/v1/completions", json=body) as response:
        if response.status_code != 200:
            await response.aread()
            return response.status_code, None, None, response.headers.get("Retry-After")
        text, finish_reason, done = [], None, False
        lines = []
        async for line in response.aiter_lines():
            lines.append(line)
            if line == "data: [DONE]":
                done = True
            elif line.startswith("data: "):
                chunk = json.loads(line[len("data: "):])
                assert "error" not in chunk, chunk
                text.append(chunk["choices"][0]["text"])
                finish_reason = chunk["choices"][0]["finish_reason"] or finish_reason
            elif line:
                raise AssertionError(f"a line that is not an event: {line!r}")
        # A stream that ends without [DONE] was cut short.
        return 200, "".join(text), finish_reason if done else "no [DONE]", lines


@pytest.fixture(scope="module")
def soak_server(start_server, tiny_llama_dir):
    return start_server(tiny_llama_dir, SETTINGS)


def test_soak_many_streaming_clients(soak_server):
    base_url = soak_server.base_url
    model = httpx.get(base_url + "/v1/models", timeout=10).json()["data"][0]["id"]

    async def soak() -> dict:
        limits = httpx.Limits(max_connections=SOAK_CLIENTS + 10, max_keepalive_connections=SOAK_CLIENTS + 10)
        async with httpx.AsyncClient(base_url=base_url, timeout=120, limits=limits) as client:
            # References, one request at a time: the longest output for each prompt.
            references = {}
            for prompt in PROMPTS:
                status, text, _, _ = await streamed_completion(client, model, prompt, max(MAX_TOKENS_CHOICES))
                assert status == 200
                references[prompt] = text
            counts = {"completed": 0, "refused": 0, "wrong": []}
            deadline = time.monotonic() + SOAK_SECONDS

            async def one_client(index: int) -> None:
                rng = random.Random(index)
                while time.monotonic() < deadline:
                    prompt, max_tokens = rng.choice(PROMPTS), rng.choice(MAX_TOKENS_CHOICES)
                    status, text, finish_reason, retry_after_or_lines = await streamed_completion(
                        client, model, prompt, max_tokens
                    )
                    if status == 503:
                        assert retry_after_or_lines is not None
                        counts["refused"] += 1
                        await asyncio.sleep(float(retry_after_or_lines) * rng.random())
                        continue
                    assert status == 200
                    # Greedy: a shorter completion is a prefix of the longest one.
                    if finish_reason != "length" or not references[prompt].startswith(text) or not text:
                        counts["wrong"].append((prompt, max_tokens, text, finish_reason, retry_after_or_lines))
                    counts["completed"] += 1

            await asyncio.gather(*(one_client(index) for index in range(SOAK_CLIENTS)))
            return counts

    with MemorySampler(soak_server.process.pid) as memory:
        started = time.monotonic()
        counts = asyncio.run(soak())
        ended = time.monotonic()
    ranks = wait_for_ranks(base_url, lambda ranks: num_running(ranks) == 0 and num_waiting(ranks) == 0, timeout=30)
    info = httpx.get(base_url + "/get_server_info", timeout=30).json()

    middle = (started + ended) / 2
    first_half_peak, second_half_peak = memory.peak_between(started, middle), memory.peak_between(middle, ended)
    mib = 1024 * 1024
    print(
        f"\nsoak: {SOAK_CLIENTS} clients for {ended - started:.0f} s: {counts['completed']} completed, "
        f"{counts['refused']} refused with 503, {len(counts['wrong'])} wrong; server memory (with children) "
        f"peak {max(rss for _, rss in memory.samples) / mib:.0f} MiB, first half {first_half_peak / mib:.0f} MiB, "
        f"second half {second_half_peak / mib:.0f} MiB"
    )
    assert counts["wrong"] == [], f"{len(counts['wrong'])} wrong, the first: {counts['wrong'][:3]}"
    # The server kept serving throughout, not just at the start (a loose floor: CI machines are slow and shared).
    assert counts["completed"] >= SOAK_CLIENTS // 4
    assert sum(info["requests_in_flight_per_rank"]) == 0
    assert all(rank["kv_used_tokens"] == 0 for rank in ranks), ranks
    assert second_half_peak <= first_half_peak + MEMORY_SLACK_BYTES
    assert httpx.get(base_url + "/health", timeout=10).status_code == 200
