"""Write small GGUF files for tests, with the ``gguf`` package as an independent writer and quantizer.

Imported by the GGUF tests as ``from gguf_fixtures import ...``: pytest puts
this (package-less) directory on sys.path, as tests/scheduler does for its
containment_helpers.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import gguf
import numpy as np
import torch
from gguf import GGMLQuantizationType, quants

from tercet.formats.default_model import find_default_gguf

_USE_DEFAULT_GGUF = object()
# The tensor write_gguf_with_tensor_type gives the unsupported type.
UNSUPPORTED_TENSOR_NAME = "blk.0.ffn_up.weight"

_HF_TO_GGUF_PARTS = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
}
_HF_TO_GGUF_GLOBALS = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}


def write_llama_gguf(
    path,
    state_dict: dict[str, torch.Tensor],
    config,
    tensor_type: str = "Q4_1",
    copy_tokenizer_from=_USE_DEFAULT_GGUF,
    alignment: int | None = None,
) -> Path:
    """A llama GGUF of ``state_dict`` (HF names, float32), laid out as the HF->GGUF converter does.

    2-D weights are quantized to ``tensor_type`` (the embedding to Q8_0 when
    that is a Q4 type, as llama.cpp's Q4 presets do), norms stay F32, q/k rows
    are permuted for llama.cpp's rotary, output.weight is left out when tied,
    and the tokenizer.* metadata is copied from ``copy_tokenizer_from``
    (the default model's GGUF unless None).
    """
    if copy_tokenizer_from is _USE_DEFAULT_GGUF:
        copy_tokenizer_from = find_default_gguf()
    tensors = gguf_tensors_of(state_dict, config, tensor_type)
    return write_gguf(path, "llama", llama_metadata(config), tensors, copy_tokenizer_from, alignment)


def write_gguf_with_tensor_type(path, type_name: str = "Q5_K") -> Path:
    """A tiny llama GGUF whose UNSUPPORTED_TENSOR_NAME has type ``type_name`` (random bytes of the right size)."""
    from transformers import LlamaConfig

    # 256 columns: a multiple of every block size, K-quants' 256 included.
    config = LlamaConfig(
        vocab_size=64, hidden_size=256, intermediate_size=256, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=128,
        tie_word_embeddings=True,
    )
    tensors = gguf_tensors_of(random_llama_state_dict(config), config, "Q8_0")
    quant_type = GGMLQuantizationType[type_name]
    block_size, block_bytes = gguf.GGML_QUANT_SIZES[quant_type]
    rows, columns = config.intermediate_size, config.hidden_size
    raw = np.random.default_rng(0).integers(0, 256, (rows, columns // block_size * block_bytes), dtype=np.uint8)
    tensors[UNSUPPORTED_TENSOR_NAME] = (raw, quant_type)
    return write_gguf(path, "llama", llama_metadata(config), tensors, copy_tokenizer_from=None)


def truncated_copy(src, dst, keep_fraction: float) -> Path:
    """A copy of ``src`` holding only its first ``keep_fraction`` of bytes."""
    data = Path(src).read_bytes()
    Path(dst).write_bytes(data[: int(len(data) * keep_fraction)])
    return Path(dst)


def random_llama_state_dict(config, seed: int = 0) -> dict[str, torch.Tensor]:
    """float32 HF-named weights for ``config``; norms near 1, weights small, as in a real model."""
    generator = torch.Generator().manual_seed(seed)
    hidden, inter = config.hidden_size, config.intermediate_size
    head_dim = config.head_dim
    q_rows, kv_rows = config.num_attention_heads * head_dim, config.num_key_value_heads * head_dim

    def weight(*shape):
        return torch.randn(*shape, generator=generator) * 0.05

    def norm():
        return 1.0 + torch.randn(hidden, generator=generator) * 0.1

    state = {"model.embed_tokens.weight": weight(config.vocab_size, hidden), "model.norm.weight": norm()}
    for i in range(config.num_hidden_layers):
        prefix = f"model.layers.{i}."
        state |= {
            prefix + "self_attn.q_proj.weight": weight(q_rows, hidden),
            prefix + "self_attn.k_proj.weight": weight(kv_rows, hidden),
            prefix + "self_attn.v_proj.weight": weight(kv_rows, hidden),
            prefix + "self_attn.o_proj.weight": weight(hidden, q_rows),
            prefix + "mlp.gate_proj.weight": weight(inter, hidden),
            prefix + "mlp.up_proj.weight": weight(inter, hidden),
            prefix + "mlp.down_proj.weight": weight(hidden, inter),
            prefix + "input_layernorm.weight": norm(),
            prefix + "post_attention_layernorm.weight": norm(),
        }
    if not config.tie_word_embeddings:
        state["lm_head.weight"] = weight(config.vocab_size, hidden)
    return state


def converter_permute(weight: np.ndarray, num_heads: int) -> np.ndarray:
    """The HF->GGUF converter's q/k row permutation, written out independently of tercet's inverse."""
    rows = weight.shape[0]
    return (
        weight.reshape(num_heads, 2, rows // num_heads // 2, *weight.shape[1:])
        .swapaxes(1, 2)
        .reshape(weight.shape)
    )


def gguf_name_of(hf_name: str) -> str:
    if hf_name in _HF_TO_GGUF_GLOBALS:
        return _HF_TO_GGUF_GLOBALS[hf_name]
    _, _, layer, rest = hf_name.split(".", 3)
    part, kind = rest.rsplit(".", 1)
    return f"blk.{layer}.{_HF_TO_GGUF_PARTS[part]}.{kind}"


def gguf_tensors_of(state_dict, config, tensor_type: str) -> dict[str, tuple[np.ndarray, GGMLQuantizationType]]:
    """GGUF name -> (data as the writer takes it, its type), permuted and quantized like the converter."""
    weight_type = GGMLQuantizationType[tensor_type]
    embedding_type = GGMLQuantizationType.Q8_0 if tensor_type.startswith("Q4") else weight_type
    tensors = {}
    for hf_name, tensor in state_dict.items():
        if hf_name == "lm_head.weight" and config.tie_word_embeddings:
            continue
        name = gguf_name_of(hf_name)
        array = tensor.detach().to(torch.float32).numpy()
        if ".attn_q." in name:
            array = converter_permute(array, config.num_attention_heads)
        elif ".attn_k." in name:
            array = converter_permute(array, config.num_key_value_heads)
        if array.ndim == 1:
            tensors[name] = (array, GGMLQuantizationType.F32)
            continue
        qtype = embedding_type if name == "token_embd.weight" else weight_type
        tensors[name] = (quantize_for_writer(array, qtype), qtype)
    return tensors


def quantize_for_writer(array: np.ndarray, qtype: GGMLQuantizationType) -> np.ndarray:
    if qtype == GGMLQuantizationType.F32:
        return np.ascontiguousarray(array, dtype=np.float32)
    if qtype == GGMLQuantizationType.F16:
        return array.astype(np.float16)
    return quants.quantize(np.ascontiguousarray(array, dtype=np.float32), qtype)


def llama_metadata(config) -> dict[str, tuple[object, gguf.GGUFValueType]]:
    u32, f32 = gguf.GGUFValueType.UINT32, gguf.GGUFValueType.FLOAT32
    return {
        "llama.vocab_size": (config.vocab_size, u32),
        "llama.context_length": (config.max_position_embeddings, u32),
        "llama.embedding_length": (config.hidden_size, u32),
        "llama.block_count": (config.num_hidden_layers, u32),
        "llama.feed_forward_length": (config.intermediate_size, u32),
        "llama.attention.head_count": (config.num_attention_heads, u32),
        "llama.attention.head_count_kv": (config.num_key_value_heads, u32),
        "llama.rope.freq_base": (float(config.rope_parameters["rope_theta"]), f32),
        "llama.attention.layer_norm_rms_epsilon": (float(config.rms_norm_eps), f32),
        "llama.rope.dimension_count": (config.head_dim, u32),
    }


def write_gguf(path, architecture: str, metadata, tensors, copy_tokenizer_from=None, alignment=None) -> Path:
    """Write a GGUF with ``metadata`` (key -> (value, GGUFValueType)) and ``tensors`` (name -> (data, type))."""
    writer = gguf.GGUFWriter(str(path), architecture)
    if alignment is not None:
        writer.add_custom_alignment(alignment)
    for key, (value, value_type) in metadata.items():
        writer.add_key_value(key, value, value_type)
    if copy_tokenizer_from is not None:
        for key, (value, value_type, item_type) in tokenizer_metadata(copy_tokenizer_from).items():
            writer.add_key_value(key, value, value_type, sub_type=item_type)
    for name, (data, qtype) in tensors.items():
        writer.add_tensor(name, data, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return Path(path)


@lru_cache(maxsize=4)
def tokenizer_metadata(source) -> dict[str, tuple[object, gguf.GGUFValueType, gguf.GGUFValueType | None]]:
    """The tokenizer.* entries of ``source`` with their value types, read by gguf's own reader."""
    # Cached: gguf's reader takes about two seconds over the default model's vocabulary.
    reader = gguf.GGUFReader(str(source))
    entries = {}
    for key, field in reader.fields.items():
        if key.startswith("tokenizer."):
            item_type = field.types[1] if len(field.types) > 1 else None
            entries[key] = (field.contents(), field.types[0], item_type)
    return entries
