"""How a llama-architecture GGUF maps onto a Hugging Face Llama: its config and its tensor names.

Two things differ from a Hugging Face checkpoint besides the names. The
config lives in ``llama.*`` metadata keys. And the HF->GGUF converter
reorders the rows of q_proj and k_proj, because llama.cpp rotates adjacent
pairs of each head's dimensions where Hugging Face rotates the two halves:
:func:`unpermute_rows` gives the row order that undoes it.
"""

from __future__ import annotations

import dataclasses
import re

import torch

from tercet.formats.gguf_file import GgufError, GgufFile

# GGUF tensor name -> Hugging Face name, for tensors outside the layers.
_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
# Per-layer GGUF part -> Hugging Face part of "model.layers.{i}.{part}".
_LAYER_PARTS = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}
_LAYER_TENSOR = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)")


def hf_name_of(gguf_name: str) -> str | None:
    """The Hugging Face Llama name of a GGUF tensor; None for tensors it has no place for (e.g. rope_freqs)."""
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    match = _LAYER_TENSOR.fullmatch(gguf_name)
    if match is None or match.group(2) not in _LAYER_PARTS:
        return None
    layer, part, kind = match.groups()
    return f"model.layers.{layer}.{_LAYER_PARTS[part]}.{kind}"


def unpermute_rows(num_rows: int, num_heads: int) -> torch.Tensor:
    """Row index with ``hf_weight = gguf_weight[index]`` for attn_q (num_heads) or attn_k (num_kv_heads).

    The converter views each head's rows as (2 halves, head_dim / 2) and
    swaps the axes, so GGUF row ``h * head_dim + 2 * j + i`` holds HF row
    ``h * head_dim + i * head_dim / 2 + j``; reading the GGUF rows in the
    order (h, i, j) restores HF's.
    """
    if num_heads <= 0 or num_rows % (2 * num_heads):
        raise ValueError(f"{num_rows} rows cannot be split into {num_heads} heads of an even size")
    half_head_dim = num_rows // num_heads // 2
    gguf_rows = torch.arange(num_rows).view(num_heads, half_head_dim, 2)
    return gguf_rows.transpose(1, 2).reshape(num_rows)


@dataclasses.dataclass(frozen=True)
class GgufLlamaConfig:
    """A llama GGUF's model config, under transformers' ``LlamaConfig`` attribute names.

    Plain data rather than a ``LlamaConfig``: the scheduler reads these
    attributes only, and importing transformers for them would cost its
    process about 90 MiB."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_parameters: dict
    max_position_embeddings: int
    tie_word_embeddings: bool
    bos_token_id: int | None
    eos_token_id: int | None
    pad_token_id: int | None
    model_type: str = "llama"
    hidden_act: str = "silu"
    attention_bias: bool = False
    mlp_bias: bool = False

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def config_from_gguf(gguf: GgufFile) -> GgufLlamaConfig:
    """The model config from the file's ``llama.*`` and ``tokenizer.ggml.*`` metadata."""
    metadata = gguf.metadata
    architecture = metadata.get("general.architecture")
    if architecture != "llama":
        raise GgufError(
            f"{gguf.path}: general.architecture is {architecture!r}; tercet reads only 'llama' GGUF files"
        )

    def required(key: str):
        if key not in metadata:
            raise GgufError(f"{gguf.path}: lacks the metadata key {key!r} that a llama GGUF must have")
        return metadata[key]

    hidden_size = required("llama.embedding_length")
    num_heads = required("llama.attention.head_count")
    head_dim = _head_dim(gguf, hidden_size, num_heads)
    scaling = metadata.get("llama.rope.scaling.type", "none")
    if scaling != "none":
        # tercet's rotary knows no linear/yarn scaling, and silently ignoring
        # it would give wrong outputs past the original context.
        raise GgufError(f"{gguf.path}: rope scaling {scaling!r} is not supported")
    return GgufLlamaConfig(
        vocab_size=_vocab_size(gguf),
        hidden_size=hidden_size,
        intermediate_size=required("llama.feed_forward_length"),
        num_hidden_layers=required("llama.block_count"),
        num_attention_heads=num_heads,
        # GGUF omits head_count_kv when it equals head_count (no grouped-query attention).
        num_key_value_heads=metadata.get("llama.attention.head_count_kv", num_heads),
        head_dim=head_dim,
        rms_norm_eps=required("llama.attention.layer_norm_rms_epsilon"),
        # transformers 5 keeps the rotary base in rope_parameters (rope_theta is its legacy spelling).
        rope_parameters={"rope_type": "default", "rope_theta": float(metadata.get("llama.rope.freq_base", 10000.0))},
        max_position_embeddings=required("llama.context_length"),
        # A GGUF with no output.weight shares the embedding as the LM head.
        tie_word_embeddings="output.weight" not in gguf.tensors,
        bos_token_id=metadata.get("tokenizer.ggml.bos_token_id"),
        eos_token_id=metadata.get("tokenizer.ggml.eos_token_id"),
        pad_token_id=metadata.get("tokenizer.ggml.padding_token_id"),
    )


def _vocab_size(gguf: GgufFile) -> int:
    if "llama.vocab_size" in gguf.metadata:
        return gguf.metadata["llama.vocab_size"]
    tokens = gguf.metadata.get("tokenizer.ggml.tokens")
    if isinstance(tokens, list):
        return len(tokens)
    embedding = gguf.tensors.get("token_embd.weight")
    if embedding is None:
        raise GgufError(f"{gguf.path}: has neither llama.vocab_size, tokenizer.ggml.tokens nor token_embd.weight")
    return embedding.shape[0]


def _head_dim(gguf: GgufFile, hidden_size: int, num_heads: int) -> int:
    # As llama.cpp reads a llama GGUF: the head size is key_length, else
    # hidden / heads; rope.dimension_count may only restate it.
    head_dim = gguf.metadata.get("llama.attention.key_length") or hidden_size // num_heads
    rotary_dims = gguf.metadata.get("llama.rope.dimension_count")
    if rotary_dims is not None and rotary_dims != head_dim:
        raise GgufError(
            f"{gguf.path}: rotary covers {rotary_dims} of each head's {head_dim} dimensions; "
            "tercet's Llama rotates whole heads"
        )
    return head_dim
