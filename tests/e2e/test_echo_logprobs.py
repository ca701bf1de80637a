"""``echo`` + ``logprobs`` on /v1/completions (lm-eval's loglikelihood request) returns the
prompt's log-probabilities as a transformers forward computes them (float32, log_softmax)."""

import openai
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

TOLERANCE = 1e-3
PROMPTS = [
    "The capital of France is Paris. The capital of Germany is Berlin.",
    "def add(a, b):\n    return a + b\n",
    "Once upon a time, in a kingdom by the sea, there lived a king who had three daughters.",
]


def transformers_prompt_logprobs(model_dir, input_ids: list[int]) -> tuple[list[float], list[int], list[float]]:
    """Per prompt position j >= 1: log P(token j | tokens < j), the most likely token
    there, and by how much it beats the second."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    with torch.no_grad():
        logits = model(torch.tensor([input_ids])).logits[0].float()
    logprobs = torch.log_softmax(logits, dim=-1)[:-1]
    targets = torch.tensor(input_ids[1:])
    chosen = logprobs.gather(1, targets[:, None])[:, 0]
    top2 = logprobs.topk(2, dim=-1)
    margins = top2.values[:, 0] - top2.values[:, 1]
    return chosen.tolist(), top2.indices[:, 0].tolist(), margins.tolist()


def check_echo_logprobs(base_url: str, model_dir, max_tokens: int) -> None:
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    client = openai.OpenAI(base_url=base_url + "/v1", api_key="unused", max_retries=0)
    model_name = client.models.list().data[0].id
    for prompt in PROMPTS:
        input_ids = tokenizer.encode(prompt)
        # lm-eval sends token ids, echo, logprobs=1 and max_tokens 0 or 1, greedy.
        reply = client.completions.create(
            model=model_name, prompt=[input_ids], echo=True, logprobs=1, max_tokens=max_tokens, temperature=0
        )
        logprobs = reply.choices[0].logprobs
        num_prompt = len(input_ids)
        assert len(logprobs.token_logprobs) == num_prompt + max_tokens
        assert logprobs.token_logprobs[0] is None and logprobs.top_logprobs[0] is None
        assert reply.choices[0].text.startswith(prompt)
        expected, best, margins = transformers_prompt_logprobs(model_dir, input_ids)
        served = logprobs.token_logprobs[1:num_prompt]
        assert max(abs(s - e) for s, e in zip(served, expected)) < TOLERANCE, prompt
        # lm-eval's is_greedy: the token's logprob is the largest of its top_logprobs.
        for position, (token_logprob, top) in enumerate(zip(served, logprobs.top_logprobs[1:num_prompt]), start=1):
            if margins[position - 1] < TOLERANCE:
                continue  # a near tie: either answer is right
            is_greedy = token_logprob == max(top.values())
            assert is_greedy == (best[position - 1] == input_ids[position]), (prompt, position)


@pytest.mark.parametrize("max_tokens", [0, 1])
def test_tiny_model_echo_logprobs_match_transformers(tiny_server, tiny_llama_dir, max_tokens):
    check_echo_logprobs(tiny_server.base_url, tiny_llama_dir, max_tokens)


@pytest.fixture(scope="module")
def real_server(start_server, default_model_dir):
    settings = ["cache.max_total_tokens=8192", "scheduler.max_running_requests=4", "model.quantization=none", "model.dtype=float32"]
    return start_server(None, settings)


@pytest.mark.real_model
@pytest.mark.parametrize("max_tokens", [0, 1])
def test_real_model_echo_logprobs_match_transformers(real_server, default_model_dir, max_tokens):
    check_echo_logprobs(real_server.base_url, default_model_dir, max_tokens)
