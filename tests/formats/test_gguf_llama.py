"""A llama GGUF as a Hugging Face Llama: config, tensor names, and the q/k row order."""

from __future__ import annotations

import json

import gguf
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, quants
from gguf_fixtures import (
    converter_permute,
    llama_metadata,
    random_llama_state_dict,
    tokenizer_metadata,
    write_gguf,
    write_llama_gguf,
)
from safetensors import safe_open

from tercet.formats.default_model import find_default_gguf
from tercet.formats.gguf_blocks import BlockQuantized, read_tensor
from tercet.formats.gguf_file import GgufError, GgufFile
from tercet.formats.gguf_llama import config_from_gguf, hf_name_of, unpermute_rows
from tercet.model.rotary import RopeSettings

CONFIG_FIELDS = (
    "model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "rms_norm_eps", "rope_parameters", "max_position_embeddings",
    "tie_word_embeddings", "bos_token_id", "eos_token_id", "pad_token_id", "hidden_act",
)
# Token ids come with the tokenizer metadata, not the model's.
TOKEN_ID_FIELDS = ("bos_token_id", "eos_token_id", "pad_token_id")
SHAPE_FIELDS = tuple(field for field in CONFIG_FIELDS if field not in TOKEN_ID_FIELDS)


@pytest.fixture(scope="module")
def tiny_config():
    from transformers import LlamaConfig

    # An epsilon GGUF's float32 holds exactly, so it survives the round trip.
    return LlamaConfig(
        vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=256, rms_norm_eps=float(np.float32(1e-5)),
        rope_parameters={"rope_type": "default", "rope_theta": 50000.0}, tie_word_embeddings=False,
        bos_token_id=1, eos_token_id=2, pad_token_id=2,
    )


def test_the_default_gguf_config_equals_the_converted_checkpoints(default_gguf, default_model_dir):
    expected = json.loads((default_model_dir / "config.json").read_text())
    config = config_from_gguf(default_gguf).to_dict()
    assert {field: config[field] for field in CONFIG_FIELDS} == {field: expected[field] for field in CONFIG_FIELDS}


def test_the_rotary_base_reaches_tercets_rope_settings(default_gguf):
    assert RopeSettings.from_config(config_from_gguf(default_gguf)) == RopeSettings(theta=100000.0)


@pytest.mark.parametrize(("gguf_name", "hf_name"), [
    ("token_embd.weight", "model.embed_tokens.weight"),
    ("output_norm.weight", "model.norm.weight"),
    ("output.weight", "lm_head.weight"),
    ("blk.0.attn_q.weight", "model.layers.0.self_attn.q_proj.weight"),
    ("blk.11.attn_k.weight", "model.layers.11.self_attn.k_proj.weight"),
    ("blk.3.attn_v.weight", "model.layers.3.self_attn.v_proj.weight"),
    ("blk.3.attn_output.weight", "model.layers.3.self_attn.o_proj.weight"),
    ("blk.29.ffn_gate.weight", "model.layers.29.mlp.gate_proj.weight"),
    ("blk.29.ffn_up.weight", "model.layers.29.mlp.up_proj.weight"),
    ("blk.29.ffn_down.weight", "model.layers.29.mlp.down_proj.weight"),
    ("blk.2.attn_norm.weight", "model.layers.2.input_layernorm.weight"),
    ("blk.2.ffn_norm.weight", "model.layers.2.post_attention_layernorm.weight"),
    ("blk.2.attn_q.bias", "model.layers.2.self_attn.q_proj.bias"),
    ("rope_freqs.weight", None),
    ("blk.0.ffn_gate_exps.weight", None),
    ("blk.x.attn_q.weight", None),
    ("token_embd.weight.extra", None),
])
def test_hf_name_of(gguf_name, hf_name):
    assert hf_name_of(gguf_name) == hf_name


def test_every_default_gguf_tensor_has_a_distinct_hf_name(default_gguf, default_model_dir):
    names = [hf_name_of(name) for name in default_gguf.tensors]
    with safe_open(str(default_model_dir / "model.safetensors"), "pt") as checkpoint:
        assert sorted(names) == sorted(checkpoint.keys())


@pytest.mark.parametrize(("num_heads", "head_dim"), [(9, 64), (3, 64), (4, 16), (1, 2)])
def test_unpermute_rows_undoes_the_converters_permutation(num_heads, head_dim):
    rows = num_heads * head_dim
    weight = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3)
    permuted = torch.from_numpy(converter_permute(weight, num_heads))
    index = unpermute_rows(rows, num_heads)
    assert sorted(index.tolist()) == list(range(rows))
    assert torch.equal(permuted[index], torch.from_numpy(weight))


def test_unpermute_rows_refuses_rows_that_do_not_split_into_heads():
    with pytest.raises(ValueError, match="cannot be split into 4 heads"):
        unpermute_rows(36, 4)


def _as_hf_weight(tensor, gguf_name: str, config) -> torch.Tensor:
    """A read GGUF tensor in HF's row order, as float."""
    num_heads = {".attn_q.": config.num_attention_heads, ".attn_k.": config.num_key_value_heads}
    for fragment, heads in num_heads.items():
        if fragment in gguf_name:
            index = unpermute_rows(tensor.shape[0], heads)
            tensor = tensor.rows(index) if isinstance(tensor, BlockQuantized) else tensor[index]
    return tensor.dequantize() if isinstance(tensor, BlockQuantized) else tensor


@pytest.mark.parametrize("gguf_name", ["blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.ffn_gate.weight",
                                       "token_embd.weight", "blk.0.attn_norm.weight"])
def test_default_gguf_tensors_equal_the_converted_checkpoint(default_gguf, default_model_dir, gguf_name):
    # model.safetensors was written from transformers' dequantization of this very file.
    ours = _as_hf_weight(read_tensor(default_gguf, gguf_name), gguf_name, config_from_gguf(default_gguf))
    with safe_open(str(default_model_dir / "model.safetensors"), "pt") as checkpoint:
        expected = checkpoint.get_tensor(hf_name_of(gguf_name))
    # Exact: the same float32 arithmetic in the same order, and a pure row permutation.
    assert torch.equal(ours, expected)


@pytest.mark.parametrize("tensor_type", ["Q4_1", "Q4_0", "Q8_0", "F32"])
def test_a_written_llama_gguf_round_trips_to_the_hf_weights(tmp_path, tiny_config, tensor_type):
    state_dict = random_llama_state_dict(tiny_config)
    path = write_llama_gguf(tmp_path / "tiny.gguf", state_dict, tiny_config, tensor_type=tensor_type,
                            copy_tokenizer_from=None)
    parsed = GgufFile(path)
    config = config_from_gguf(parsed).to_dict()
    assert {f: config[f] for f in SHAPE_FIELDS} == {f: tiny_config.to_dict()[f] for f in SHAPE_FIELDS}
    assert [config[f] for f in TOKEN_ID_FIELDS] == [None, None, None]  # no tokenizer metadata written
    embedding_type = "Q8_0" if tensor_type.startswith("Q4") else tensor_type
    assert parsed.tensors["token_embd.weight"].type_name == embedding_type
    assert parsed.tensors["blk.1.attn_q.weight"].type_name == tensor_type
    assert parsed.tensors["blk.1.ffn_norm.weight"].type_name == "F32"
    for gguf_name in parsed.tensors:
        hf_name = hf_name_of(gguf_name)
        ours = _as_hf_weight(read_tensor(parsed, gguf_name), gguf_name, tiny_config)
        source = state_dict[hf_name].numpy()
        qtype = GGMLQuantizationType[parsed.tensors[gguf_name].type_name]
        # What the reference quantizer makes of the HF weight itself, row order untouched.
        expected = source if qtype == GGMLQuantizationType.F32 else quants.dequantize(
            quants.quantize(source, qtype), qtype)
        assert torch.equal(ours, torch.from_numpy(expected)), gguf_name


def test_the_default_tokenizer_comes_along(tmp_path, tiny_config):
    from transformers import LlamaConfig

    # The real vocabulary size, so the copied tokenizer fits the embedding.
    config = LlamaConfig(**{**tiny_config.to_dict(), "vocab_size": 49152})
    path = write_llama_gguf(tmp_path / "tok.gguf", random_llama_state_dict(config), config)
    parsed = GgufFile(path)
    source = tokenizer_metadata(find_default_gguf())
    for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type",
                "tokenizer.chat_template", "tokenizer.ggml.eos_token_id"):
        assert parsed.metadata[key] == source[key][0], key
    assert len(parsed.metadata["tokenizer.ggml.tokens"]) == config_from_gguf(parsed).vocab_size == 49152
    ids = config_from_gguf(parsed).to_dict()
    assert [ids[f] for f in TOKEN_ID_FIELDS] == [1, 2, 2]


def test_a_tied_gguf_has_no_output_weight_and_says_it_is_tied(tmp_path, tiny_config):
    from transformers import LlamaConfig

    tied = LlamaConfig(**{**tiny_config.to_dict(), "tie_word_embeddings": True})
    path = write_llama_gguf(tmp_path / "tied.gguf", random_llama_state_dict(tied), tied, copy_tokenizer_from=None)
    parsed = GgufFile(path)
    assert "output.weight" not in parsed.tensors
    assert config_from_gguf(parsed).tie_word_embeddings is True


def test_another_architecture_is_named_in_the_error(tmp_path):
    path = write_gguf(tmp_path / "qwen.gguf", "qwen2", {}, {})
    with pytest.raises(GgufError, match=r"qwen\.gguf: general.architecture is 'qwen2'; tercet reads only 'llama'"):
        config_from_gguf(GgufFile(path))


def test_a_missing_llama_key_is_named_in_the_error(tmp_path, tiny_config):
    metadata = llama_metadata(tiny_config)
    del metadata["llama.block_count"]
    path = write_gguf(tmp_path / "partial.gguf", "llama", metadata, {})
    with pytest.raises(GgufError, match="partial.gguf: lacks the metadata key 'llama.block_count'"):
        config_from_gguf(GgufFile(path))


def test_defaults_for_keys_a_gguf_may_leave_out(tmp_path, tiny_config):
    metadata = llama_metadata(tiny_config)
    for key in ("llama.vocab_size", "llama.attention.head_count_kv", "llama.rope.dimension_count",
                "llama.rope.freq_base"):
        del metadata[key]
    tokens = (["a", "b", "c"], gguf.GGUFValueType.ARRAY)
    path = write_gguf(tmp_path / "lean.gguf", "llama", {**metadata, "tokenizer.ggml.tokens": tokens}, {})
    config = config_from_gguf(GgufFile(path))
    assert config.vocab_size == 3  # from the token list
    assert config.num_key_value_heads == config.num_attention_heads == 4
    assert config.head_dim == 64 // 4
    assert config.rope_parameters["rope_theta"] == 10000.0


def test_rope_scaling_and_partial_rotary_are_refused(tmp_path, tiny_config):
    metadata = llama_metadata(tiny_config)
    scaled = {**metadata, "llama.rope.scaling.type": ("yarn", gguf.GGUFValueType.STRING)}
    with pytest.raises(GgufError, match="rope scaling 'yarn' is not supported"):
        config_from_gguf(GgufFile(write_gguf(tmp_path / "yarn.gguf", "llama", scaled, {})))
    partial = {**metadata, "llama.rope.dimension_count": (8, gguf.GGUFValueType.UINT32)}
    with pytest.raises(GgufError, match="rotary covers 8 of each head's 16 dimensions"):
        config_from_gguf(GgufFile(write_gguf(tmp_path / "partial.gguf", "llama", partial, {})))
