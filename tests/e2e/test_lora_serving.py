"""LoRA adapters through a real server: PEFT's own output, mixed batches, the cache, run-time loads."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tercet.testing import TINY_SETTINGS, num_running, wait_for_ranks
from tercet.testing.lora_adapters import peft_greedy

PROMPTS = [[1, 504, 3458, 282, 4649, 314, 1178, 30], [1, 9124, 2492, 253, 655, 28, 281, 253, 1789, 30, 2]]
NUM_NEW = 8


@pytest.fixture(scope="module")
def server(start_server, tiny_llama_dir, tiny_adapters):
    adapters = ",".join(f"{name}={path}" for name, path in tiny_adapters.items())
    running = start_server(tiny_llama_dir, TINY_SETTINGS + [f"lora.adapters={adapters}", "lora.max_rank=8"])
    yield running
    running.stop()


def generate(server, input_ids, adapter=None, max_new_tokens=NUM_NEW, field="lora_name"):
    body = {"input_ids": input_ids,
            "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0, "ignore_eos": True}}
    if adapter is not None:
        body[field] = adapter
    return httpx.post(server.base_url + "/generate", json=body, timeout=300)


def test_greedy_output_equals_peft_with_each_adapter(server, tiny_llama_dir, tiny_adapters):
    for name, path in tiny_adapters.items():
        expected = peft_greedy(tiny_llama_dir, path, PROMPTS[:1], NUM_NEW)[0]
        answer = generate(server, PROMPTS[0], name, field="lora_path" if name == "mlp" else "lora_name")
        assert answer.status_code == 200, answer.text
        assert answer.json()["output_ids"][:len(expected)] == expected, name


def test_a_concurrent_mix_of_three_adapters_and_the_base_gives_each_what_it_gets_alone(server):
    cases = [(adapter, PROMPTS[index % 2]) for index, adapter in enumerate([None, "every", "attention", "mlp"] * 2)]
    alone = [generate(server, prompt, adapter).json()["output_ids"] for adapter, prompt in cases]
    with ThreadPoolExecutor(len(cases)) as pool:
        together = list(pool.map(lambda case: generate(server, case[1], case[0]).json()["output_ids"], cases))
    assert together == alone
    assert len({tuple(output) for output in alone[:4]}) == 4


def test_the_openai_routes_take_an_adapter_as_the_model(server):
    models = httpx.get(server.base_url + "/v1/models").json()["data"]
    base = models[0]["id"]
    assert [(model["id"], model.get("parent")) for model in models[1:]] == [
        ("every", base), ("attention", base), ("mlp", base)]
    assert httpx.get(server.base_url + "/v1/models/attention").json()["parent"] == base
    body = {"prompt": PROMPTS[1], "max_tokens": NUM_NEW, "temperature": 0}
    answers = {model: httpx.post(server.base_url + "/v1/completions", json={**body, "model": model}, timeout=300)
               for model in (base, "attention")}
    assert answers["attention"].json()["model"] == "attention"
    assert answers["attention"].json()["choices"][0]["text"] != answers[base].json()["choices"][0]["text"]
    chat = httpx.post(server.base_url + "/v1/chat/completions", timeout=300, json={
        "model": "mlp", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4})
    assert chat.status_code == 200 and chat.json()["model"] == "mlp"


def test_the_messages_and_responses_routes_take_an_adapter_as_the_model(server):
    base = httpx.get(server.base_url + "/v1/models").json()["data"][0]["id"]
    messages = [{"role": "user", "content": "Say something about the sea"}]
    texts = {}
    for model in (base, "every"):
        common = {"model": model, "temperature": 0, "max_tokens": NUM_NEW}
        chat = httpx.post(server.base_url + "/v1/chat/completions", timeout=300, json={**common, "messages": messages})
        anthropic = httpx.post(server.base_url + "/v1/messages", timeout=300, json={**common, "messages": messages})
        responses = httpx.post(server.base_url + "/v1/responses", timeout=300, json={
            "model": model, "temperature": 0, "max_output_tokens": NUM_NEW, "input": messages})
        for answer in (chat, anthropic, responses):
            assert answer.status_code == 200, answer.text
            assert answer.json()["model"] == model
        texts[model] = (chat.json()["choices"][0]["message"]["content"], anthropic.json()["content"][0]["text"],
                        responses.json()["output"][0]["content"][0]["text"])
        assert len(set(texts[model])) == 1, texts[model]  # the same generation through each protocol
    assert texts["every"] != texts[base]
    unknown = httpx.post(server.base_url + "/v1/messages", timeout=300, json={"model": "nope", "messages": messages,
                                                                              "max_tokens": 2})
    assert unknown.status_code == 404 and "every" in unknown.text


@pytest.mark.parametrize("route, body", [
    ("/v1/completions", {"model": "nope", "prompt": "Hi", "max_tokens": 2}),
    ("/v1/chat/completions", {"model": "nope", "messages": [{"role": "user", "content": "Hi"}], "stream": True}),
    ("/generate", {"text": "Hi", "lora_path": "nope"}),
])
def test_an_unknown_adapter_is_a_404_naming_the_loaded_ones(server, route, body):
    answer = httpx.post(server.base_url + route, json=body, timeout=60)
    assert answer.status_code == 404
    assert "no LoRA adapter named 'nope' is loaded (loaded: every, attention, mlp)" in answer.text


def test_the_same_prompt_under_two_adapters_shares_no_cached_tokens(server):
    prompt = list(range(300, 340))
    cached = [generate(server, prompt, adapter).json()["meta_info"]["cached_tokens"]
              for adapter in ("every", "attention", None, "attention")]
    assert cached[:3] == [0, 0, 0] and cached[3] > 0


def test_load_use_unload_and_reload_at_run_time(server, tiny_adapters):
    url = server.base_url
    loaded = httpx.post(url + "/load_lora_adapter", json={"lora_name": "extra", "lora_path": tiny_adapters["every"]})
    assert loaded.status_code == 200 and loaded.json()["rank"] == 4
    first = generate(server, PROMPTS[0], "extra").json()["output_ids"]
    assert first == generate(server, PROMPTS[0], "every").json()["output_ids"]
    assert "extra" in httpx.get(url + "/get_server_info").json()["lora_adapters"]
    assert httpx.post(url + "/unload_lora_adapter", json={"lora_name": "extra"}).status_code == 200
    assert generate(server, PROMPTS[0], "extra").status_code == 404
    assert httpx.post(url + "/load_lora_adapter", json={"lora_name": "extra", "lora_path": tiny_adapters["every"]}
                      ).status_code == 200
    assert generate(server, PROMPTS[0], "extra").json()["output_ids"] == first
    assert httpx.post(url + "/unload_lora_adapter", json={"lora_name": "extra"}).status_code == 200


def test_an_adapter_in_use_is_not_unloaded_409(server):
    url = server.base_url
    with ThreadPoolExecutor(1) as pool:
        busy = pool.submit(generate, server, PROMPTS[0], "mlp", 400)
        wait_for_ranks(url, lambda ranks: num_running(ranks) >= 1, timeout=120)
        refused = httpx.post(url + "/unload_lora_adapter", json={"lora_name": "mlp"})
        assert refused.status_code == 409 and "in use" in refused.text
        assert busy.result().status_code == 200
    assert "mlp" in [model["id"] for model in httpx.get(url + "/v1/models").json()["data"]]


@pytest.mark.parametrize("lora_path, named", [
    ("missing", "no adapter_config.json there"),
    ("every", "is already loaded"),
])
def test_a_bad_run_time_load_is_refused_and_loads_nothing(server, tiny_adapters, tmp_path, lora_path, named):
    path = tiny_adapters.get(lora_path, str(tmp_path / lora_path))
    name = "every" if lora_path == "every" else "bad"
    refused = httpx.post(server.base_url + "/load_lora_adapter", json={"lora_name": name, "lora_path": path})
    assert refused.status_code == 400 and named in refused.text
    names = [model["id"] for model in httpx.get(server.base_url + "/v1/models").json()["data"][1:]]
    assert names == ["every", "attention", "mlp"]


def test_a_server_without_lora_refuses_adapters(tiny_server):
    answer = httpx.post(tiny_server.base_url + "/generate", json={"text": "Hi", "lora_name": "every"}, timeout=60)
    assert answer.status_code == 404 and "serves none" in answer.text
    refused = httpx.post(tiny_server.base_url + "/load_lora_adapter", json={"lora_name": "a", "lora_path": "/x"})
    assert refused.status_code == 400 and "[lora] enabled" in refused.text


def test_a_tensor_parallel_server_serves_adapters_sharded_with_the_same_output(server, start_server, tiny_llama_dir,
                                                                             tiny_adapters):
    settings = TINY_SETTINGS + [f"lora.adapters=every={tiny_adapters['every']}", "parallel.tp_size=2"]
    sharded = start_server(tiny_llama_dir, settings)
    try:
        for adapter in ("every", None):
            expected = generate(server, PROMPTS[1], adapter).json()["output_ids"]
            assert generate(sharded, PROMPTS[1], adapter).json()["output_ids"] == expected, adapter
    finally:
        sharded.stop()
