"""Prefix caching and priority scheduling through a real server."""

import asyncio

import httpx
import openai

from tercet.testing import TINY_SETTINGS, num_running, wait_for_ranks

SHARED_PREFIX = " ".join(f"rule {index}: be kind." for index in range(20))


def test_cached_prompt_tokens_are_reported_and_outputs_do_not_change(start_server, tiny_server, tiny_llama_dir):
    uncached_server = start_server(tiny_llama_dir, TINY_SETTINGS + ["cache.prefix_cache=false"])
    answers = {}
    for name, server in (("cached", tiny_server), ("uncached", uncached_server)):
        client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0)
        answers[name] = [
            client.completions.create(model=tiny_llama_dir.name, prompt=SHARED_PREFIX + question, max_tokens=8, temperature=0)
            for question in (" Why?", " How so?", " Really?")
        ]
    cached = [answer.usage.prompt_tokens_details.cached_tokens for answer in answers["cached"]]
    assert cached[1] > 0 and cached[2] > 0
    assert all(answer.usage.prompt_tokens_details.cached_tokens == 0 for answer in answers["uncached"])
    assert [a.choices[0].text for a in answers["cached"]] == [a.choices[0].text for a in answers["uncached"]]
    native = httpx.post(tiny_server.base_url + "/generate",
                        json={"text": SHARED_PREFIX + " Why?", "sampling_params": {"max_new_tokens": 2}}).json()
    assert native["meta_info"]["cached_tokens"] >= cached[1]


def test_priority_preempts_a_running_low_priority_request(start_server, tiny_llama_dir):
    server = start_server(tiny_llama_dir, TINY_SETTINGS + ["scheduler.policy=priority", "scheduler.max_running_requests=1"])
    finished: list[str] = []

    async def send(client, name, priority, max_new_tokens):
        response = await client.post("/generate", json={
            "text": name, "priority": priority,
            "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0, "ignore_eos": True},
        })
        response.raise_for_status()
        finished.append(name)
        return response.json()

    async def scenario():
        async with httpx.AsyncClient(base_url=server.base_url, timeout=120) as client:
            low = asyncio.create_task(send(client, "low", 0, 900))
            await asyncio.to_thread(wait_for_ranks, server.base_url, lambda ranks: num_running(ranks) == 1)
            urgent = asyncio.create_task(send(client, "urgent", 10, 10))
            return await asyncio.gather(low, urgent)

    low, urgent = asyncio.run(scenario())
    assert finished == ["urgent", "low"]
    assert low["meta_info"]["completion_tokens"] == 900 and urgent["meta_info"]["completion_tokens"] == 10
    assert "retracted request" in server.log()


def test_priority_must_be_an_integer(tiny_server):
    response = httpx.post(tiny_server.base_url + "/generate", json={"text": "x", "priority": "high"})
    assert response.status_code == 400 and response.json()["error"]["param"] == "priority"
