"""A tiny randomly initialised Llama with the default model's real tokenizer.

Tests need a model that loads in a second and runs a step in milliseconds, yet
tokenizes and chat-templates exactly as the served model does: two layers of
64 wide, random weights from a fixed seed, SmolLM2's tokenizer beside them.
"""

from __future__ import annotations

from pathlib import Path

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
# Random init gives near-uniform logits; scaling the output head makes greedy
# choices well separated, so float32 comparisons are not coin flips.
LM_HEAD_SCALE = 8.0


def write_tiny_llama(target: Path, tokenizer_dir: Path, seed: int = 0, vocab_size: int | None = None) -> Path:
    """Save the tiny Llama (float32 safetensors) and ``tokenizer_dir``'s tokenizer into ``target``
    (``vocab_size``: a vocabulary other than the tokenizer's, for a model that must not match it)."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size or len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **TINY_LLAMA_SHAPE,
    )
    model = LlamaForCausalLM(config).to(torch.float32)
    with torch.no_grad():
        model.lm_head.weight.mul_(LM_HEAD_SCALE)
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)
    return Path(target)


def write_tiny_default_llama() -> Path:
    """The tiny Llama with the default model's tokenizer, in a fresh temporary directory (for a
    benchmark's quick run, which checks that it runs rather than what it measures)."""
    import tempfile

    from tercet.formats.dequantized_reference import ensure_dequantized_default_model

    return write_tiny_llama(Path(tempfile.mkdtemp(prefix="tiny-llama-")), ensure_dequantized_default_model())
