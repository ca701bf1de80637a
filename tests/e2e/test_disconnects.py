"""A client that goes away gets its request aborted and its KV pages returned.

The server runs without the prefix cache, so the KV pages in use are exactly
those of the running requests: once every request is gone, ``kv_used_tokens``
is back at the idle baseline.
"""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

from tercet.testing import TINY_SETTINGS, num_running, num_waiting, wait_for_ranks

# Long enough that no request here can finish on its own before its client leaves.
LONG = 900
GENERATE_BODY = {"text": "Count", "sampling_params": {"max_new_tokens": LONG, "temperature": 0, "ignore_eos": True}}
# How soon after the client leaves the request must be gone.
ABORT_DEADLINE = 1.0
SOAK_DISCONNECTS = 1000
SOAK_CONCURRENCY = 20
SOAK_TIME_LIMIT = 180.0


@pytest.fixture(scope="module")
def server(start_server, tiny_llama_dir):
    return start_server(tiny_llama_dir, TINY_SETTINGS + ["cache.prefix_cache=false"])


def server_info(server) -> dict:
    return httpx.get(server.base_url + "/get_server_info", timeout=30).json()


def kv_used(ranks) -> int:
    return sum(rank["kv_used_tokens"] for rank in ranks)


def idle(baseline: int):
    return lambda ranks: num_running(ranks) == 0 and num_waiting(ranks) == 0 and kv_used(ranks) == baseline


@pytest.fixture
def baseline(server) -> int:
    """kv_used_tokens with nothing running (no prefix cache: nothing held)."""
    ranks = wait_for_ranks(server.base_url, lambda ranks: num_running(ranks) == 0 and num_waiting(ranks) == 0)
    return kv_used(ranks)


def assert_back_to_idle_within(server, baseline: int, deadline: float, since: float) -> float:
    """Wait (until ``since + deadline``) for the pool to be idle; the seconds it took."""
    remaining = max(0.0, since + deadline - time.monotonic())
    try:
        wait_for_ranks(server.base_url, idle(baseline), timeout=remaining)
    except TimeoutError as error:
        raise AssertionError(f"not idle {deadline} s after the client left: {error}") from None
    info = server_info(server)
    assert sum(info["requests_in_flight_per_rank"]) == 0, info
    return time.monotonic() - since


@pytest.mark.parametrize("path", ["/generate", "/v1/completions"])
def test_streaming_client_closing_mid_stream_aborts_its_request(server, baseline, path):
    if path == "/generate":
        body = dict(GENERATE_BODY, stream=True)
    else:
        model = server_info(server)["served_model_name"]
        body = {"model": model, "prompt": "Count", "max_tokens": LONG, "temperature": 0, "ignore_eos": True, "stream": True}
    with httpx.Client(base_url=server.base_url, timeout=60) as client:
        with client.stream("POST", path, json=body) as response:
            assert response.status_code == 200
            chunks = response.iter_raw()
            first = next(chunks)
            assert first.startswith(b"data: ")
            # The request is mid-stream: running and holding pages.
            ranks = wait_for_ranks(server.base_url, lambda ranks: num_running(ranks) == 1, timeout=10)
            assert kv_used(ranks) > baseline
        # Leaving the block closes the response before it was read to the end.
    closed_at = time.monotonic()
    took = assert_back_to_idle_within(server, baseline, ABORT_DEADLINE, closed_at)
    print(f"\n{path} stream: idle {took * 1000:.0f} ms after the client closed")


# Three prompts, two completions each: six requests, all running at once (TINY_SETTINGS has 8 places).
BATCH = ["Count", "Say", "Once upon a time"]


def test_a_client_leaving_a_streamed_batch_aborts_every_prompts_requests(server, baseline):
    model = server_info(server)["served_model_name"]
    body = {"model": model, "prompt": BATCH, "n": 2, "max_tokens": LONG, "temperature": 0, "ignore_eos": True,
            "stream": True}
    with httpx.Client(base_url=server.base_url, timeout=60) as client:
        with client.stream("POST", "/v1/completions", json=body) as response:
            assert response.status_code == 200
            chunks = response.iter_raw()  # kept: a dropped iterator would close the response at once
            assert next(chunks).startswith(b"data: ")
            ranks = wait_for_ranks(server.base_url, lambda ranks: num_running(ranks) == 6, timeout=10)
            assert kv_used(ranks) > baseline
    closed_at = time.monotonic()
    took = assert_back_to_idle_within(server, baseline, ABORT_DEADLINE, closed_at)
    print(f"\nbatch stream: idle {took * 1000:.0f} ms after the client closed")


def test_abort_request_with_a_batchs_rid_aborts_all_its_prompts(server, baseline):
    body = {"text": BATCH, "rid": "batch-to-abort", "stream": True,
            "sampling_params": {"max_new_tokens": LONG, "temperature": 0, "ignore_eos": True}}
    with httpx.Client(base_url=server.base_url, timeout=60) as client:
        with client.stream("POST", "/generate", json=body) as response:
            assert response.status_code == 200
            lines = response.iter_lines()
            assert next(lines).startswith("data: ")
            wait_for_ranks(server.base_url, lambda ranks: num_running(ranks) == 3, timeout=10)
            aborted = client.post("/abort_request", json={"rid": "batch-to-abort"}).json()
            assert aborted == {"ok": True, "aborted": True}
            events = [json.loads(line.removeprefix("data: ")) for line in lines if line.startswith("data: {")]
    # The stream ended on its own: every prompt's completion finished, aborted.
    finishes = {e["index"]: e["meta_info"]["finish_reason"] for e in events if e["meta_info"]["finish_reason"]}
    assert sorted(finishes) == [0, 1, 2] and {finish["type"] for finish in finishes.values()} == {"abort"}
    assert_back_to_idle_within(server, baseline, ABORT_DEADLINE, time.monotonic())


def test_non_streaming_client_timing_out_aborts_its_request(server, baseline):
    async def post_and_give_up():
        timeout = httpx.Timeout(60, read=2.0)
        async with httpx.AsyncClient(base_url=server.base_url, timeout=timeout) as client:
            post = asyncio.create_task(client.post("/generate", json=GENERATE_BODY))
            ranks = await asyncio.to_thread(wait_for_ranks, server.base_url, lambda r: num_running(r) == 1, 10)
            assert kv_used(ranks) > baseline
            # Hold generation so the request cannot finish before the client gives
            # up, however fast the model runs; aborts are still handled while paused.
            assert (await client.post("/pause_generation")).json()["is_paused"] is True
            with pytest.raises(httpx.ReadTimeout):
                await post
        # The client gave up and its connection is closed.
        return time.monotonic()

    try:
        closed_at = asyncio.run(post_and_give_up())
        took = assert_back_to_idle_within(server, baseline, ABORT_DEADLINE, closed_at)
    finally:
        assert httpx.post(server.base_url + "/continue_generation", timeout=30).status_code == 200
    print(f"\nnon-streaming: idle {took * 1000:.0f} ms after the client timed out")


def test_many_disconnects_leave_no_request_and_no_page_behind(server, baseline):
    model = server_info(server)["served_model_name"]
    requests = [
        ("/generate", dict(GENERATE_BODY, stream=True)),
        ("/v1/completions", {"model": model, "prompt": "Count", "max_tokens": LONG, "ignore_eos": True, "stream": True}),
    ]
    statuses: dict[int, int] = {}

    async def one(client: httpx.AsyncClient, index: int) -> None:
        path, body = requests[index % 2]
        async with client.stream("POST", path, json=body) as response:
            statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
            if response.status_code == 200:
                async for _ in response.aiter_raw():
                    break  # leave after the first chunk

    async def soak() -> None:
        queue = iter(range(SOAK_DISCONNECTS))

        async def worker():
            # A fresh connection for each request: closing an unread stream closes it anyway.
            async with httpx.AsyncClient(base_url=server.base_url, timeout=60,
                                         limits=httpx.Limits(max_keepalive_connections=0)) as client:
                for index in queue:
                    await one(client, index)

        await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(SOAK_CONCURRENCY))), SOAK_TIME_LIMIT)

    started = time.monotonic()
    asyncio.run(soak())
    ended = time.monotonic()
    took = assert_back_to_idle_within(server, baseline, 10.0, ended)
    print(
        f"\n{SOAK_DISCONNECTS} disconnects at concurrency {SOAK_CONCURRENCY}: {ended - started:.1f} s "
        f"({SOAK_DISCONNECTS / (ended - started):.0f}/s), statuses {statuses}; "
        f"pool back to baseline ({baseline} tokens) {took * 1000:.0f} ms after the last client left"
    )
    assert statuses == {200: SOAK_DISCONNECTS}
    # The server still serves a whole request afterwards.
    answer = httpx.post(server.base_url + "/generate", timeout=60, json={
        "text": "Count", "sampling_params": {"max_new_tokens": 8, "temperature": 0, "ignore_eos": True}})
    assert answer.status_code == 200
    assert answer.json()["meta_info"]["completion_tokens"] == 8
