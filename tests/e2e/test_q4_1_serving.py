"""The default server, on the GGUF's own Q4_1 blocks: what it reports, and the loglikelihoods it
serves on a small multiple-choice set against the same weights dequantized to float32.

The test prints the largest and mean difference of a choice's summed
log-probability from the reference (run with -s): measured here, 0.33 nats
at most and 0.10 on average over the 48 choices. The bound is 0.5 nats, and
the chosen answer must be the reference's for every question whose reference
margin exceeds it.
"""

import json
from pathlib import Path

import httpx
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

pytestmark = pytest.mark.real_model

QUESTIONS = json.loads((Path(__file__).parent / "data" / "multiple_choice.json").read_text())
MAX_CHOICE_DIFFERENCE = 0.5


@pytest.fixture(scope="module")
def q4_1_server(start_server):
    # No dense copy: every token, prompts included, goes through the int4 kernels.
    return start_server(None, ["scheduler.max_running_requests=4", "model.dense_from_rows=0"])


def test_the_server_reports_the_weights_it_serves(q4_1_server):
    info = httpx.get(q4_1_server.base_url + "/get_server_info", timeout=60).json()
    weights = info["ranks"][0]["weights"]
    assert info["config"]["model"]["quantization"] == "auto"
    assert weights["layers_by_method"] == {"q4_1": 120, "q8_0": 1}
    assert weights["checkpoint_formats"] == {"Q4_1": 210, "F32": 61, "Q8_0": 1}
    assert weights["dtype"] == "bfloat16"
    assert info["config"]["model"]["dense_from_rows"] == 0
    # Q4_1 keeps the weights near their shipped size (85 MB), far below float32's 540 MB.
    assert weights["weight_bytes"] < 160 * 2**20


def _served_choice_logprobs(base_url: str, prompt_ids: list[int], choice_ids: list[int]) -> float:
    reply = httpx.post(
        base_url + "/v1/completions",
        json={"model": "SmolLM2-135M-Instruct", "prompt": [prompt_ids + choice_ids], "echo": True,
              "logprobs": 0, "max_tokens": 0, "temperature": 0},
        timeout=120,
    )
    reply.raise_for_status()
    token_logprobs = reply.json()["choices"][0]["logprobs"]["token_logprobs"]
    return sum(token_logprobs[len(prompt_ids):])


def _reference_choice_logprobs(model, prompt_ids: list[int], choice_ids: list[int]) -> float:
    ids = prompt_ids + choice_ids
    with torch.no_grad():
        logprobs = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), dim=-1)
    positions = torch.arange(len(prompt_ids) - 1, len(ids) - 1)
    return logprobs[positions, torch.tensor(choice_ids)].sum().item()


def test_multiple_choice_loglikelihoods_match_the_dequantized_weights(q4_1_server, default_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(default_model_dir)
    model = AutoModelForCausalLM.from_pretrained(default_model_dir, dtype=torch.float32).eval()
    differences, disagreements = [], []
    for question in QUESTIONS:
        prompt_ids = tokenizer.encode(question["question"])
        served, reference = [], []
        for choice in question["choices"]:
            choice_ids = tokenizer.encode(question["question"] + choice)[len(prompt_ids):]
            served.append(_served_choice_logprobs(q4_1_server.base_url, prompt_ids, choice_ids))
            reference.append(_reference_choice_logprobs(model, prompt_ids, choice_ids))
        differences += [abs(s - r) for s, r in zip(served, reference)]
        ranked = sorted(reference, reverse=True)
        if ranked[0] - ranked[1] > MAX_CHOICE_DIFFERENCE and served.index(max(served)) != reference.index(max(reference)):
            disagreements.append(question["question"])
    print(f"choice loglikelihoods: largest difference {max(differences):.3f} nats, "
          f"mean {sum(differences) / len(differences):.3f}, over {len(differences)} choices")
    assert max(differences) <= MAX_CHOICE_DIFFERENCE, f"largest difference {max(differences):.3f} nats"
    assert not disagreements
