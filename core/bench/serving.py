"""``tercet bench``: load an OpenAI-compatible server and time every request.

A run checks the server is there (``GET /v1/models``, which also names the
model when none is given), builds the prompts, sends the warm-up requests
(not measured), then the measured ones, and returns every outcome with the
wall time of the measured part. Every request asks for exactly
``output_len`` tokens (``max_tokens`` with ``ignore_eos``, greedy), streamed
with a final usage chunk; one that delivers fewer is a failure. A server that
refuses the ``ignore_eos`` extension (``transformers serve`` answers 422) can
be measured with ``ignore_eos=False``: requests may then stop at EOS, and
what they delivered is what is counted.

Latencies are measured from the moment a request is actually sent, so with a
concurrency cap the time a due request waits for a slot is not in its TTFT.
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import asdict, dataclass, replace
from typing import TextIO

import httpx

from tercet.bench import BenchError
from tercet.bench.arrivals import at_fixed_concurrency, at_poisson_rate
from tercet.bench.progress import Progress
from tercet.bench.streaming_client import (
    RequestOutcome,
    describe_http_error,
    stream_completion,
)
from tercet.bench.workload import BenchRequest, load_tokenizer, synthetic_requests

CONNECT_TIMEOUT_S = 10.0
# Also the longest wait for the next chunk of a stream: generous, so a loaded
# server is measured as slow rather than counted as failed.
READ_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class BenchConfig:
    base_url: str
    num_prompts: int
    input_len: int
    output_len: int
    concurrency: int | None = None  # requests in flight; with request_rate, a cap
    request_rate: float | None = None  # Poisson arrivals per second; None: by concurrency alone
    model: str | None = None  # None: the first model the server lists
    api_key: str | None = None
    seed: int = 0
    warmup: int = 0
    tokenizer: str | None = None  # None: the default model's tokenizer
    ignore_eos: bool = True  # False for servers that reject the extension; outputs may then end early

    def __post_init__(self):
        if self.concurrency is None and self.request_rate is None:
            raise ValueError("a benchmark needs a concurrency, a request rate, or both")

    def as_dict(self) -> dict:
        """The configuration to print with the results; the API key is left out."""
        described = asdict(self)
        del described["api_key"]
        return described


@dataclass(frozen=True)
class BenchRun:
    config: BenchConfig  # with the model and tokenizer that were used
    outcomes: tuple[RequestOutcome, ...]
    duration_s: float  # wall time of the measured requests


def run_serving_benchmark(config: BenchConfig, progress_stream: TextIO | None = None) -> BenchRun:
    base_url = normalized_base_url(config.base_url)
    # Checking the server first fails fast, before the slow tokenizer load.
    model = asyncio.run(find_model(base_url, config.model, _headers(config)))
    tokenizer = load_tokenizer(config.tokenizer)
    config = replace(config, base_url=base_url, model=model, tokenizer=tokenizer.name_or_path)
    requests = synthetic_requests(tokenizer, config.num_prompts, config.input_len, config.output_len, config.seed)
    warmups = synthetic_requests(
        tokenizer, config.warmup, config.input_len, config.output_len, config.seed, kind="warmup"
    )
    stream = progress_stream if progress_stream is not None else sys.stderr
    outcomes, duration = asyncio.run(_send_all(config, requests, warmups, stream))
    return BenchRun(config, tuple(outcomes), duration)


def normalized_base_url(base_url: str) -> str:
    """The server's root URL; a trailing ``/`` or ``/v1`` (as OpenAI clients take it) is dropped."""
    base_url = base_url.rstrip("/")
    return base_url.removesuffix("/v1")


async def find_model(base_url: str, model: str | None, headers: dict) -> str:
    """``model`` if given, else the first id the server lists; either way, the server must answer."""
    url = base_url + "/v1/models"
    async with httpx.AsyncClient(timeout=httpx.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)) as client:
        try:
            response = await client.get(url, headers=headers)
        except httpx.InvalidURL as error:
            raise BenchError(f"bad --base-url {base_url!r}: {error}") from None
        except httpx.HTTPError as error:
            raise BenchError(f"cannot reach the server at {base_url}: {describe_http_error(error)}") from None
    if response.status_code in (401, 403):
        # Every request would be refused the same way.
        raise BenchError(f"GET {url} answered HTTP {response.status_code}; check --api-key")
    if model is not None:
        return model
    if response.status_code != 200:
        raise BenchError(f"GET {url} answered HTTP {response.status_code}; pass --model NAME")
    try:
        return response.json()["data"][0]["id"]
    except (ValueError, LookupError, TypeError):
        raise BenchError(f"GET {url} listed no model; pass --model NAME") from None


def judged(outcome: RequestOutcome, output_len: int, ignore_eos: bool = True) -> RequestOutcome:
    """A stream that ended well but delivered fewer tokens than asked is still a failure,
    unless EOS was allowed to end it."""
    if ignore_eos and outcome.is_success and outcome.output_tokens < output_len:
        return outcome.failed(f"{outcome.output_tokens} of {output_len} output tokens")
    return outcome


async def _send_all(
    config: BenchConfig, requests: list[BenchRequest], warmups: list[BenchRequest], progress_stream: TextIO
) -> tuple[list[RequestOutcome], float]:
    url = config.base_url + "/v1/completions"
    headers = _headers(config)
    limits = httpx.Limits(max_connections=config.concurrency, max_keepalive_connections=config.concurrency)
    timeout = httpx.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:

        async def send(request: BenchRequest) -> RequestOutcome:
            payload = _completion_payload(config.model, request, config.ignore_eos)
            outcome = await stream_completion(client, url, payload, headers, request.prompt_len)
            return judged(outcome, request.output_len, config.ignore_eos)

        if warmups:
            await at_fixed_concurrency(send, warmups, config.concurrency or len(warmups))
        progress = Progress(len(requests), progress_stream)

        async def send_and_count(request: BenchRequest) -> RequestOutcome:
            outcome = await send(request)
            progress.note(outcome.is_success)
            return outcome

        reporter = asyncio.create_task(progress.print_periodically())
        start = time.perf_counter()
        try:
            if config.request_rate is None:
                outcomes = await at_fixed_concurrency(send_and_count, requests, config.concurrency)
            else:
                outcomes = await at_poisson_rate(
                    send_and_count, requests, config.request_rate, config.seed, config.concurrency
                )
        finally:
            reporter.cancel()
            progress.finish()
        return outcomes, time.perf_counter() - start


def _completion_payload(model: str, request: BenchRequest, ignore_eos: bool = True) -> dict:
    payload = {
        "model": model,
        "prompt": request.prompt,
        "max_tokens": request.output_len,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if ignore_eos:
        payload["ignore_eos"] = True  # an extension SGLang, vLLM, llama.cpp and tercet accept
    return payload


def _headers(config: BenchConfig) -> dict:
    return {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
