"""Greedy output of a served model equals transformers `generate`, token for token (float32)."""

import json
import threading
import time

import httpx
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

# (prompt, max_new_tokens): the first, long one is decoding while the others arrive.
CASES = [
    ("In a distant galaxy, a small robot named Pip woke up", 160),
    ("The quick brown fox", 20),
    ("1, 2, 3,", 12),
    ("Once upon a time, in a kingdom by the sea, there lived a king who had three daughters. The youngest", 28),
    ("Paris is the capital of", 16),
]


def transformers_greedy(model_dir, input_ids, max_new_tokens):
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    generated = model.generate(
        torch.tensor([input_ids]), max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=None, pad_token_id=0
    )
    return generated[0, len(input_ids):].tolist()


def generate_body(input_ids, max_new_tokens, stream=False):
    return {
        "input_ids": input_ids,
        "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0, "ignore_eos": True},
        "stream": stream,
    }


def test_requests_joining_a_running_batch_match_transformers(tiny_server, tiny_llama_dir):
    tokenizer = AutoTokenizer.from_pretrained(tiny_llama_dir)
    input_ids = [tokenizer.encode(prompt) for prompt, _ in CASES]
    results: dict[int, dict] = {}
    first_is_decoding = threading.Event()

    def stream_first():
        with httpx.stream("POST", tiny_server.base_url + "/generate",
                          json=generate_body(input_ids[0], CASES[0][1], stream=True), timeout=120) as response:
            last = None
            for line in response.iter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    last = json.loads(line[len("data: "):])
                    if len(last["output_ids"]) >= 2:
                        first_is_decoding.set()
            results[0] = last

    def send(index):
        response = httpx.post(tiny_server.base_url + "/generate",
                              json=generate_body(input_ids[index], CASES[index][1]), timeout=120)
        response.raise_for_status()
        results[index] = response.json()

    threads = [threading.Thread(target=stream_first)]
    threads[0].start()
    assert first_is_decoding.wait(60)
    for index in range(1, len(CASES)):
        threads.append(threading.Thread(target=send, args=(index,)))
        threads[-1].start()
        time.sleep(0.02)
    for thread in threads:
        thread.join()

    assert len(results[0]["output_ids"]) == CASES[0][1]
    for index, (prompt, max_new_tokens) in enumerate(CASES):
        assert results[index]["output_ids"] == transformers_greedy(tiny_llama_dir, input_ids[index], max_new_tokens), prompt
        meta = results[index]["meta_info"]
        assert meta["prompt_tokens"] == len(input_ids[index])
        assert meta["completion_tokens"] == max_new_tokens
        assert meta["finish_reason"]["type"] == "length"
