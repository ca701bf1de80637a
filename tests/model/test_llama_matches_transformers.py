"""Greedy output of the lean model over the paged cache equals transformers, token for token."""

from __future__ import annotations

import pytest
import torch

from tercet.errors import ConfigError
from tercet.model.model_runner import ModelRunner
from tercet.testing.runner_factory import model_runner_for
from tercet.testing.paged_greedy import PagedGreedyDriver

PAGE_SIZE = 4


def transformers_greedy(model_dir, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    outputs = []
    for prompt in prompts:
        input_ids = torch.tensor([prompt])
        generated = model.generate(
            input_ids,
            attention_mask=torch.ones_like(input_ids),
            do_sample=False,
            max_new_tokens=max_new_tokens,
            pad_token_id=model.config.eos_token_id,
        )
        outputs.append(generated[0, len(prompt) :].tolist())
    return outputs


def assert_same_greedy(ours: list[int], reference: list[int]) -> None:
    # transformers stops at EOS; up to there the tokens must be identical.
    assert reference, "reference generated nothing"
    assert ours[: len(reference)] == reference


@pytest.fixture(scope="module")
def tokenizer(tiny_llama_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_llama_dir)


def tiny_runner(model_dir, max_total_tokens: int = 512) -> ModelRunner:
    return model_runner_for(
        model_dir, dtype="float32", device="cpu", max_total_tokens=max_total_tokens, page_size=PAGE_SIZE,
        max_running_requests=8,
    )


def test_mixed_batches_match_transformers_greedy(tiny_llama_dir, tokenizer):
    texts = [
        "The capital of France is",
        "Once upon a time, in a land far away, there lived a small dragon who",
        "def fibonacci(n):",
        "Paging keeps memory in fixed size blocks so that many sequences of different lengths share one pool",
    ]
    prompts = [tokenizer(text)["input_ids"] for text in texts]
    num_new = 10
    driver = PagedGreedyDriver(tiny_runner(tiny_llama_dir))
    a, b = driver.start(prompts[0]), driver.start(prompts[1])
    driver.step(None, a, b)  # two prefills of different lengths
    for _ in range(3):
        driver.step(None, a, b)  # decodes
    c = driver.start(prompts[2])
    driver.step(None, a, b, c)  # decodes next to a new prompt's prefill
    d = driver.start(prompts[3])
    driver.step({1: 7}, c, d, a)  # the long prompt's first chunk
    driver.step({1: 6}, d, b, c)  # its second chunk, continuing a cached prefix
    while any(len(s.output_ids) < num_new for s in (a, b, c, d)):
        driver.step(None, *[s for s in (a, b, c, d) if len(s.output_ids) < num_new])

    reference = transformers_greedy(tiny_llama_dir, prompts, num_new)
    for sequence, expected in zip((a, b, c, d), reference):
        assert_same_greedy(sequence.output_ids, expected)


def test_runner_reports_model_facts(tiny_llama_dir, tokenizer):
    runner = tiny_runner(tiny_llama_dir, max_total_tokens=30)
    assert runner.vocab_size == len(tokenizer)
    assert runner.eos_token_ids == {tokenizer.eos_token_id}
    assert runner.page_size == PAGE_SIZE
    assert runner.page_allocator.num_total == 8  # ceil(30 / 4)
    assert runner.kv_cache.k_buffers[0].shape == (32, 2, 16)
    assert runner.req_to_token_pool.table.shape == (8, 32)  # the pool caps the context
    assert runner.dtype == torch.float32 and runner.device.type == "cpu"


def test_missing_weights_are_named(tmp_path, tiny_llama_dir):
    import shutil

    from safetensors.torch import load_file, save_file

    for path in tiny_llama_dir.iterdir():
        if path.is_file():
            shutil.copy(path, tmp_path / path.name)
    state_dict = load_file(tmp_path / "model.safetensors")
    del state_dict["model.layers.1.self_attn.k_proj.weight"]
    save_file(state_dict, tmp_path / "model.safetensors")
    with pytest.raises(ConfigError, match=r"model.layers.1.self_attn.qkv_proj \(no k_proj.weight\)"):
        tiny_runner(tmp_path)


@pytest.mark.real_model
def test_default_model_chat_greedy_matches_transformers(default_model_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(default_model_dir)
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
    runner = model_runner_for(
        default_model_dir, dtype="float32", device="cpu", max_total_tokens=256, page_size=16, max_running_requests=2
    )
    driver = PagedGreedyDriver(runner)
    sequence = driver.start(prompt)
    while len(sequence.output_ids) < 12:
        driver.step(None, sequence)
    assert_same_greedy(sequence.output_ids, transformers_greedy(default_model_dir, [prompt], 12)[0])



def test_llama3_rope_and_qkv_bias_match_transformers(tmp_path):
    """Positions past the original context exercise llama3 scaling; biases exercise their loading."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(1)
    config = LlamaConfig(
        vocab_size=300,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=1,
        max_position_embeddings=256,
        attention_bias=True,
        mlp_bias=True,
        tie_word_embeddings=True,
        rope_theta=500000.0,
        rope_scaling={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 32,
        },
    )
    reference = LlamaForCausalLM(config).eval()
    reference.save_pretrained(tmp_path)
    prompt = torch.randint(0, 300, (90,), generator=torch.Generator().manual_seed(0)).tolist()

    driver = PagedGreedyDriver(tiny_runner(tmp_path))
    sequence = driver.start(prompt)
    driver.step({0: 50}, sequence)  # the first chunk fills the cache; the second reads it
    driver.reserve(sequence, len(prompt))
    batch = driver.runner.build_batch([sequence.row], [50], [prompt[50:]])
    logits = driver.runner.forward(batch)
    with torch.no_grad():
        expected = reference(torch.tensor([prompt])).logits[0, -1]
    torch.testing.assert_close(logits[0], expected, atol=1e-4, rtol=1e-4)
