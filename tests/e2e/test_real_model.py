"""The real default model (SmolLM2-135M-Instruct), served with no --model."""

import openai
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

pytestmark = pytest.mark.real_model

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def real_server(start_server, default_model_dir):
    # The float32 dense path: the same weights as transformers runs, dequantized.
    settings = ["cache.max_total_tokens=8192", "scheduler.max_running_requests=4", "model.quantization=none", "model.dtype=float32"]
    return start_server(None, settings)


@pytest.fixture(scope="module")
def client(real_server):
    return openai.OpenAI(base_url=real_server.base_url + "/v1", api_key="unused", max_retries=0)


def test_answers_the_capital_of_france(client):
    reply = client.chat.completions.create(model="SmolLM2-135M-Instruct", messages=QUESTION, temperature=0, max_tokens=40)
    assert "Paris" in reply.choices[0].message.content
    assert reply.choices[0].finish_reason == "stop"


def test_chat_greedy_matches_transformers(client, default_model_dir, real_server):
    import httpx

    tokenizer = AutoTokenizer.from_pretrained(default_model_dir)
    prompts = [QUESTION, [{"role": "user", "content": "Write a haiku about the sea."}]]
    for messages in prompts:
        input_ids = list(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)["input_ids"])
        served = httpx.post(
            real_server.base_url + "/generate",
            json={"input_ids": input_ids, "sampling_params": {"max_new_tokens": 24, "temperature": 0}},
            timeout=120,
        ).json()
        model = AutoModelForCausalLM.from_pretrained(default_model_dir, dtype=torch.float32)
        expected = model.generate(torch.tensor([input_ids]), max_new_tokens=24, do_sample=False)[0, len(input_ids):].tolist()
        assert served["output_ids"] == expected
