"""GGUF checkpoints through the model runner: served from their blocks, equal to their dequantized
weights, reported as they are; and the bad ones refused with an error that names the problem."""

from __future__ import annotations

import pytest
import torch
from gguf_fixtures import (
    random_llama_state_dict,
    truncated_copy,
    write_gguf_with_tensor_type,
    write_llama_gguf,
)
from transformers import LlamaConfig

from tercet.errors import ConfigError
from tercet.formats.default_model import find_default_gguf
from tercet.model.model_runner import ModelRunner
from tercet.testing.runner_factory import model_runner_for

PROMPT = [1, 17, 300, 9000, 42, 7, 123, 5555]


def _config(**overrides) -> LlamaConfig:
    shape = dict(
        vocab_size=49152, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=256, tie_word_embeddings=True,
        bos_token_id=1, eos_token_id=2,
    )
    return LlamaConfig(**{**shape, **overrides})


def _runner(path, **options) -> ModelRunner:
    return model_runner_for(path, device="cpu", max_total_tokens=256, page_size=16, max_running_requests=2, **options)


def _logits(runner: ModelRunner) -> torch.Tensor:
    row = runner.req_to_token_pool.alloc()
    runner.req_to_token_pool.assign_pages(row, 0, runner.page_allocator.alloc(1), 16)
    _, full = runner.forward_with_prompt_logits(runner.build_batch([row], [0], [PROMPT]), [0])
    return full[0]


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    config = _config()
    path = tmp_path_factory.mktemp("gguf") / "tiny.Q4_1.gguf"
    return write_llama_gguf(path, random_llama_state_dict(config), config, "Q4_1")


def test_a_q4_1_gguf_is_served_from_its_blocks_and_equals_its_dequantized_weights(tiny_gguf):
    # torch's int4 kernels keep float32 activations (the block kernel, the default where it runs, quantizes
    # them to int8 a block: tests/plugins/test_block_matmul.py bounds it).
    native = _runner(tiny_gguf, dtype="float32", native_kernels=False)
    dequantized = _runner(tiny_gguf, dtype="float32", quantization="none")
    assert native.load_report.layers_by_method == {"q4_1": 8, "q8_0": 1}
    assert dequantized.load_report.layers_by_method == {"dense": 9}
    assert native.weights_info["checkpoint_formats"] == {"Q8_0": 1, "Q4_1": 14, "F32": 5}
    torch.testing.assert_close(_logits(native), _logits(dequantized), atol=1e-4, rtol=1e-4)


def test_quantized_weights_run_in_bfloat16_unless_asked_otherwise(tiny_gguf):
    assert _runner(tiny_gguf).dtype == torch.bfloat16
    assert _runner(tiny_gguf, quantization="none").dtype == torch.float32
    runner = _runner(tiny_gguf, quantization="int8")
    assert runner.dtype == torch.bfloat16 and runner.load_report.layers_by_method == {"int8": 9}


def test_the_kv_pool_is_sized_from_its_memory_budget(tiny_gguf):
    runner = model_runner_for(tiny_gguf, device="cpu", page_size=16, max_running_requests=2, kv_cache_memory="1MiB")
    # bfloat16 KV: 2 (K and V) x 2 layers x 2 heads x 16 x 2 bytes = 256 bytes a token.
    assert runner.max_total_tokens == 2**20 // 256
    assert runner.kv_cache.num_bytes <= 2**20
    with pytest.raises(ConfigError, match="kv_cache_memory = 1.0 KiB holds no page"):
        model_runner_for(tiny_gguf, device="cpu", kv_cache_memory="1KiB")


def test_an_unsupported_block_type_is_named_with_the_supported_ones(tmp_path):
    path = write_gguf_with_tensor_type(tmp_path / "k_quant.gguf", "Q5_K")
    with pytest.raises(ConfigError, match=r"Q5_K.*F32.*Q4_0.*Q4_1.*Q8_0"):
        _runner(path)


@pytest.mark.parametrize("keep_fraction", [0.0001, 0.3, 0.999])
def test_a_truncated_gguf_is_refused(tmp_path, tiny_gguf, keep_fraction):
    path = truncated_copy(tiny_gguf, tmp_path / "cut.gguf", keep_fraction)
    with pytest.raises(ConfigError, match="truncated|ends|too short|not a GGUF"):
        _runner(path)


def test_a_file_that_is_not_a_gguf_is_refused(tmp_path):
    path = tmp_path / "noise.gguf"
    path.write_bytes(b"not a gguf at all, just text" * 10)
    with pytest.raises(ConfigError, match="GGUF"):
        _runner(path)


def test_a_method_whose_blocks_do_not_fit_the_model_is_refused_before_loading(tmp_path, tiny_llama_dir):
    from transformers import LlamaForCausalLM

    config = _config(hidden_size=48, head_dim=12, vocab_size=1000)
    model = LlamaForCausalLM(config)
    model.save_pretrained(tmp_path)
    with pytest.raises(ConfigError, match=r"q4_1.*input dimension 48 is not a multiple of the block size 32"):
        _runner(tmp_path, quantization="q4_1")
    # int8 has no blocks: the same checkpoint serves.
    assert _runner(tmp_path, quantization="int8").load_report.layers_by_method == {"int8": 9}


def test_an_unknown_quantization_lists_the_choices(tiny_gguf):
    with pytest.raises(ConfigError, match="q5_k.*auto, none, dense, int8, q4_0, q4_1, q8_0"):
        _runner(tiny_gguf, quantization="q5_k")


def test_the_default_gguf_names_its_formats_without_loading():
    from tercet.formats.weight_formats import describe_weights

    text = describe_weights(find_default_gguf(), "auto")
    assert "210 tensors stored as Q4_1 -> q4_1" in text and "1 tensors stored as Q8_0 -> q8_0" in text
