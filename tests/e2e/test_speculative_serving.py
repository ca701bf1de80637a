"""Speculative decoding through a real server: the same answers as without it, and its figures."""

from __future__ import annotations

import asyncio
import math

import httpx
import pytest

from tercet.testing import TINY_SETTINGS

QUOTED = "the river carried small boats past the old mill while farmers counted sheep near the bridge"
REQUESTS = [
    {"text": QUOTED + " and then " + QUOTED, "sampling_params": {"max_new_tokens": 24, "temperature": 0}},
    {"text": QUOTED, "sampling_params": {"max_new_tokens": 20, "temperature": 0, "speculative": False}},
    {"text": "1 2 3 1 2 3 1 2", "return_logprob": True, "top_logprobs_num": 2,
     "sampling_params": {"max_new_tokens": 16, "temperature": 0, "ignore_eos": True}},
    {"text": QUOTED[:40], "sampling_params": {"max_new_tokens": 12, "temperature": 0.8, "top_k": 8, "seed": 3, "n": 2}},
    {"text": "a b a b a b", "sampling_params": {"max_new_tokens": 16, "temperature": 0, "stop": [" the"]}},
    {"text": "Number:", "sampling_params": {"max_new_tokens": 8, "temperature": 0, "regex": "[0-9]{3}-[0-9]{2}"}},
]


async def send_all(base_url: str) -> list:
    async with httpx.AsyncClient(base_url=base_url, timeout=300) as client:
        responses = await asyncio.gather(*[client.post("/generate", json=request) for request in REQUESTS])
    for response in responses:
        response.raise_for_status()
    return [response.json() for response in responses]


def comparable(answer):
    """What must agree: all but the request id and the cached tokens (which depend on what ran
    first), log-probabilities apart (compared within 1e-4)."""
    if isinstance(answer, list):
        return [comparable(choice) for choice in answer]
    meta = {key: value for key, value in answer["meta_info"].items() if key not in ("id", "cached_tokens")}
    logprobs = meta.pop("output_token_logprobs", [])
    meta.pop("output_top_logprobs", None)
    return answer["text"], answer["output_ids"], meta, [entry[1] for entry in logprobs], [entry[0] for entry in logprobs]


def assert_same_answers(seen, expected):
    for got, want in zip(map(comparable, seen), map(comparable, expected)):
        if isinstance(want, list):
            assert [choice[:4] for choice in got] == [choice[:4] for choice in want]
            continue
        assert got[:4] == want[:4]
        assert got[4] == pytest.approx(want[4], abs=1e-4)


def test_mixed_batches_with_ngram_answer_as_without_speculation(start_server, tiny_server, tiny_llama_dir):
    speculating = start_server(tiny_llama_dir, TINY_SETTINGS + ["speculative.proposer=ngram", "speculative.max_batch=8",
                                                                "speculative.ngram_min=1"])
    expected = asyncio.run(send_all(tiny_server.base_url))
    # Twice: the second time the prompts come from the prefix cache.
    for _ in range(2):
        assert_same_answers(asyncio.run(send_all(speculating.base_url)), expected)
    assert expected[5]["text"][:3].isdigit()  # the constrained request kept its regex
    figures = httpx.get(speculating.base_url + "/get_server_info").json()["ranks"][0]["speculation"]
    assert figures["proposer"] == "ngram" and figures["verifications"] > 0 and figures["draft_tokens"] > 0
    assert 0 <= figures["acceptance_rate"] <= 1
    metrics = httpx.get(speculating.base_url + "/metrics").text
    assert 'tercet:spec_decode_num_draft_tokens_total{dp_rank="0",model_name=' in metrics
    assert httpx.get(tiny_server.base_url + "/get_server_info").json()["ranks"][0]["speculation"] == {}


@pytest.mark.real_model
def test_the_default_model_in_float32_copies_faster_with_the_same_greedy_answer(start_server, default_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    import torch

    tokenizer = AutoTokenizer.from_pretrained(default_model_dir)
    message = f"Repeat this sentence exactly: {QUOTED}."
    text = tokenizer.apply_chat_template([{"role": "user", "content": message}], add_generation_prompt=True, tokenize=False)
    input_ids = tokenizer.encode(text, add_special_tokens=False)
    server = start_server(None, ["cache.max_total_tokens=4096", "scheduler.max_running_requests=4",
                                 "model.quantization=none", "model.dtype=float32", "speculative.proposer=ngram"])
    served = httpx.post(server.base_url + "/generate", timeout=300, json={
        "input_ids": input_ids, "sampling_params": {"max_new_tokens": 32, "temperature": 0}}).json()
    model = AutoModelForCausalLM.from_pretrained(default_model_dir, dtype=torch.float32)
    expected = model.generate(torch.tensor([input_ids]), max_new_tokens=32, do_sample=False)[0, len(input_ids):]
    assert served["output_ids"] == expected.tolist()[: len(served["output_ids"])]
    assert len(served["output_ids"]) == 32 or served["output_ids"][-1] in tokenizer.all_special_ids
    figures = httpx.get(server.base_url + "/get_server_info").json()["ranks"][0]["speculation"]
    # The answer quotes its prompt: most drafts are accepted, several tokens a verification.
    assert figures["acceptance_rate"] > 0.5 and figures["mean_accepted_length"] > 1.5
    assert not math.isnan(figures["acceptance_rate"])


@pytest.mark.parametrize("proposer", ["self_quantized", "draft_model"])
def test_mixed_batches_drafted_by_a_model_answer_as_without_speculation(start_server, tiny_server, tiny_llama_dir,
                                                                        proposer):
    # draft_model: the tiny model drafting for itself; self_quantized: its own weights in 4 bits.
    speculating = start_server(tiny_llama_dir, TINY_SETTINGS + [f"speculative.proposer={proposer}",
                                                                f"speculative.draft_model={tiny_llama_dir}",
                                                                "speculative.max_batch=8"])
    expected = asyncio.run(send_all(tiny_server.base_url))
    # Twice: the second time the prompts come from the prefix cache.
    for _ in range(2):
        assert_same_answers(asyncio.run(send_all(speculating.base_url)), expected)
    figures = httpx.get(speculating.base_url + "/get_server_info").json()["ranks"][0]["speculation"]
    assert figures["proposer"] == proposer and figures["accepted_tokens"] > 0


def chat_prompt_ids(model_dir, messages: list[str]) -> list[list[int]]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    texts = [tokenizer.apply_chat_template([{"role": "user", "content": message}], add_generation_prompt=True,
                                           tokenize=False) for message in messages]
    return [tokenizer.encode(text, add_special_tokens=False) for text in texts]


@pytest.mark.real_model
def test_the_default_model_in_float32_drafting_with_its_own_q4_1_blocks_answers_as_without(start_server,
                                                                                         default_model_dir):
    prompts = chat_prompt_ids(default_model_dir, ["Name three colours of the rainbow.",
                                                  f"Repeat this sentence exactly: {QUOTED}.",
                                                  "What is the capital of France?"])
    server = start_server(None, ["cache.max_total_tokens=4096", "scheduler.max_running_requests=8",
                                 "model.quantization=none", "model.dtype=float32",
                                 "speculative.proposer=self_quantized", "speculative.max_batch=8"])
    info = httpx.get(server.base_url + "/get_server_info").json()
    assert info["ranks"][0]["speculation"]["proposer"] == "self_quantized"

    async def answers():
        # Each prompt twice in one batch: speculating, and not (the reference, greedy as without speculation).
        async with httpx.AsyncClient(base_url=server.base_url, timeout=300) as client:
            responses = await asyncio.gather(*[
                client.post("/generate", json={"input_ids": ids, "sampling_params": {
                    "max_new_tokens": 32, "temperature": 0, "speculative": speculative}})
                for ids in prompts for speculative in (True, False)])
        return [response.json()["output_ids"] for response in responses]

    for _ in range(2):  # the second time from the prefix cache
        outputs = asyncio.run(answers())
        assert outputs[0::2] == outputs[1::2]
    figures = httpx.get(server.base_url + "/get_server_info").json()["ranks"][0]["speculation"]
    # The Q4_1 blocks agree with the float32 weights on most greedy tokens.
    assert figures["verifications"] > 0 and figures["acceptance_rate"] > 0.6
