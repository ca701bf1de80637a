"""Beyond max_running_requests + max_queued_requests, requests are refused with a 503 and Retry-After."""

import asyncio

import httpx

from tercet.testing import TINY_SETTINGS, num_running, num_waiting, wait_for_ranks

# Long enough that the first two are still running and waiting while the refused ones are sent.
MAX_NEW_TOKENS = 900


def test_requests_beyond_capacity_get_503_with_retry_after(start_server, tiny_llama_dir):
    server = start_server(
        tiny_llama_dir, TINY_SETTINGS + ["scheduler.max_running_requests=1", "scheduler.max_queued_requests=1"]
    )
    sampling_params = {"max_new_tokens": MAX_NEW_TOKENS, "temperature": 0, "ignore_eos": True}
    body = {"text": "Count", "sampling_params": sampling_params}

    async def send_beyond_capacity():
        async with httpx.AsyncClient(base_url=server.base_url, timeout=300) as client:
            first_two = [asyncio.create_task(client.post("/generate", json=body)) for _ in range(2)]
            # One runs, one waits: the server holds its maximum.
            await asyncio.to_thread(
                wait_for_ranks, server.base_url, lambda ranks: num_running(ranks) == 1 and num_waiting(ranks) == 1
            )
            # Refused on either API: the native one and the OpenAI one.
            third = await client.post("/generate", json=body)
            openai = await client.post("/v1/completions", json={"prompt": "Count", "max_tokens": 4})
            return third, openai, await asyncio.gather(*first_two)

    third, openai, first_two = asyncio.run(send_beyond_capacity())
    for refused in (third, openai):
        assert refused.status_code == 503
        assert refused.headers["retry-after"] == "1"
        assert "max_queued_requests" in refused.json()["error"]["message"]
    # The refusals cost the admitted requests nothing.
    assert [response.status_code for response in first_two] == [200, 200]
    assert all(response.json()["meta_info"]["completion_tokens"] == MAX_NEW_TOKENS for response in first_two)
