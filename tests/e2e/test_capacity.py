"""Beyond max_running_requests + max_queued_requests, requests are refused with a 503."""

import asyncio

import httpx

from running_server import TINY_SETTINGS, num_running, num_waiting, wait_for_ranks


def test_requests_beyond_capacity_get_503(start_server, tiny_llama_dir):
    server = start_server(
        tiny_llama_dir, TINY_SETTINGS + ["scheduler.max_running_requests=1", "scheduler.max_queued_requests=1"]
    )
    body = {"text": "Count", "sampling_params": {"max_new_tokens": 900, "temperature": 0, "ignore_eos": True}}

    async def send_three():
        async with httpx.AsyncClient(base_url=server.base_url, timeout=300) as client:
            first_two = [asyncio.create_task(client.post("/generate", json=body)) for _ in range(2)]
            # One runs, one waits: the server holds its maximum.
            await asyncio.to_thread(
                wait_for_ranks, server.base_url, lambda ranks: num_running(ranks) == 1 and num_waiting(ranks) == 1
            )
            third = await client.post("/generate", json=body)
            return third, await asyncio.gather(*first_two)

    third, first_two = asyncio.run(send_three())
    assert third.status_code == 503
    assert "max_queued_requests" in third.json()["error"]["message"]
    assert [response.status_code for response in first_two] == [200, 200]
    assert all(response.json()["meta_info"]["completion_tokens"] == 900 for response in first_two)
