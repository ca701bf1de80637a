"""Shared fixtures: a tiny randomly initialised Llama with the real tokenizer."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

TINY_LLAMA_SHAPE = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=1024,
    rms_norm_eps=1e-5,
    rope_theta=10000.0,
    tie_word_embeddings=False,
)


@pytest.fixture(scope="session")
def default_model_dir() -> Path:
    from tercet.model.dequantized_reference import ensure_dequantized_default_model

    return ensure_dequantized_default_model()


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory, default_model_dir) -> Path:
    """A 2-layer Llama with random weights (fixed seed), fp32, and SmolLM2's tokenizer."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(default_model_dir)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **TINY_LLAMA_SHAPE,
    )
    model = LlamaForCausalLM(config).to(torch.float32)
    # Random init gives near-uniform logits; scaling the output head makes
    # greedy choices well separated so fp32 comparisons are not coin flips.
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)
    target = tmp_path_factory.mktemp("tiny-llama")
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)
    return target


@pytest.fixture(autouse=True, scope="session")
def _quiet_tokenizers():
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    yield
