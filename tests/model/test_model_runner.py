"""The model runner's KV pool: its dtype ([cache] kv_dtype), its size in model.kv_cache_memory, what it reports,
and the settings it refuses at start-up."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tercet.errors import ConfigError
from tercet.formats.checkpoint import open_checkpoint
from tercet.model.llama import LlamaShape
from tercet.model.model_runner import kv_tokens_for_budget
from tercet.model.tensor_parallel import TensorParallel
from tercet.testing.runner_factory import installed_model_components, model_runner_for

MiB = 2**20


def test_int8_and_fp8_pools_hold_about_twice_the_tokens_of_bfloat16_in_the_same_memory(default_model_dir):
    shape = LlamaShape.from_config(open_checkpoint(default_model_dir).config)
    assert (shape.num_layers, shape.num_kv_heads, shape.head_dim) == (30, 3, 64)
    bfloat16 = kv_tokens_for_budget(192 * MiB, shape, torch.bfloat16, 16)
    assert bfloat16 == 8736  # the default kv_cache_memory's tokens (issue 45's figure)
    for dtype in (torch.int8, torch.float8_e4m3fn):
        quantized = kv_tokens_for_budget(192 * MiB, shape, dtype, 16)
        assert quantized >= 1.9 * bfloat16
        assert quantized == 16 * (192 * MiB // (16 * 2 * 30 * 3 * 66))  # 66 bytes a row: 64 values, a float16 scale
    assert kv_tokens_for_budget(192 * MiB, shape, torch.float32, 16) == bfloat16 // 2


@pytest.mark.parametrize(("name", "dtype"), [("int8", torch.int8), ("fp8_e4m3", torch.float8_e4m3fn)])
def test_a_quantized_pool_is_allocated_sized_and_reported(tiny_llama_dir, name, dtype):
    runner = model_runner_for(tiny_llama_dir, dtype="float32", page_size=8, kv_cache_memory="1MiB", kv_dtype=name)
    cache = runner.kv_cache
    assert (runner.kv_dtype, runner.dtype, cache.dtype) == (dtype, torch.float32, dtype)
    assert cache.quantized and cache.k_scales[0].shape == (cache.num_slots, cache.num_kv_heads)
    float32 = model_runner_for(tiny_llama_dir, dtype="float32", page_size=8, kv_cache_memory="1MiB")
    # float32 K/V take 4 bytes a value; a quantized row one a value and 2 for its scale.
    head_dim = cache.head_dim
    assert runner.max_total_tokens >= float32.max_total_tokens * 4 * head_dim / (head_dim + 2) - 8
    assert runner.kv_cache.num_bytes <= MiB + cache.bytes_per_token * 8
    info = runner.weights_info
    assert (info["kv_dtype"], info["max_total_tokens"], info["dtype"]) == (name, runner.max_total_tokens, "float32")
    assert float32.weights_info["kv_dtype"] == "float32"
    assert runner.attention_backend.layout.cache_dtype == dtype


def test_auto_keeps_the_activations_layout_and_a_named_float_dtype_is_passed_on(tiny_llama_dir):
    auto = model_runner_for(tiny_llama_dir, dtype="float32", max_total_tokens=64, page_size=8)
    assert auto.attention_backend.layout.kv_dtype is None and auto.kv_cache.dtype == torch.float32
    stored = model_runner_for(tiny_llama_dir, dtype="float32", max_total_tokens=64, page_size=8, kv_dtype="bfloat16",
                              components=installed_model_components("torch_native"))
    assert stored.kv_cache.dtype == torch.bfloat16 and stored.attention_backend.layout.cache_dtype == torch.bfloat16
    assert stored.kv_cache.k_scales is None


@pytest.mark.parametrize("backend", ["torch_native", "triton"])
@pytest.mark.parametrize("name", ["int8", "fp8_e4m3"])
def test_a_backend_that_cannot_read_a_quantized_cache_refuses_it_naming_the_setting(tiny_llama_dir, backend, name):
    with pytest.raises(ConfigError, match=f'attention.backend {backend} cannot read a quantized KV cache '
                                          f'\\(cache.kv_dtype = "{name}"\\) in place'):
        model_runner_for(tiny_llama_dir, dtype="float32", max_total_tokens=64, page_size=8, kv_dtype=name,
                         components=installed_model_components(backend))


def test_tensor_parallelism_refuses_a_quantized_cache_before_anything_is_loaded(tiny_llama_dir):
    # No process group exists: the refusal comes before the model is sharded or a collective runs.
    with pytest.raises(ConfigError, match=r'cache.kv_dtype = "int8" is not supported with tensor parallelism'):
        model_runner_for(tiny_llama_dir, dtype="float32", max_total_tokens=64, kv_dtype="int8",
                         tp=TensorParallel(rank=0, size=2))


def test_the_memory_refusal_names_the_kv_dtype(tiny_llama_dir):
    with pytest.raises(ConfigError, match="kv_cache_memory = 1.0 KiB holds no page .* K/V in fp8_e4m3"):
        model_runner_for(tiny_llama_dir, dtype="float32", page_size=64, kv_cache_memory="1KiB", kv_dtype="fp8_e4m3")


def test_the_layout_the_backend_was_built_for_is_the_models(tiny_llama_dir):
    runner = model_runner_for(tiny_llama_dir, dtype="float32", max_total_tokens=64, page_size=8, kv_dtype="int8")
    expected = dataclasses.replace(runner.model.attention_layout(), kv_dtype=torch.int8)
    assert runner.attention_backend.layout == expected


def _prompt_logprobs(runner, token_ids: list[int]) -> torch.Tensor:
    row = runner.req_to_token_pool.alloc()
    runner.req_to_token_pool.assign_pages(row, 0, runner.page_allocator.alloc(-(-len(token_ids) // 8)), 8)
    _, logits = runner.forward_with_prompt_logits(runner.build_batch([row], [0], [token_ids]), [0])
    return torch.log_softmax(logits[0].float(), dim=-1)


# The largest log-probability difference each cache dtype may make on the tiny Llama (e4m3 keeps 3 mantissa bits).
CLOSE_TO_FLOAT32 = {"bfloat16": 0.05, "int8": 0.05, "fp8_e4m3": 0.25}


@pytest.mark.parametrize("kv_dtype", CLOSE_TO_FLOAT32)
def test_float32_activations_over_another_cache_dtype_stay_close_to_the_float32_cache(tiny_llama_dir, kv_dtype):
    prompt = [(13 * index) % 700 + 30 for index in range(40)]
    exact = _prompt_logprobs(model_runner_for(tiny_llama_dir, dtype="float32", max_total_tokens=64, page_size=8),
                             prompt)
    stored = _prompt_logprobs(model_runner_for(tiny_llama_dir, dtype="float32", max_total_tokens=64, page_size=8,
                                               kv_dtype=kv_dtype), prompt)
    assert not torch.equal(stored, exact)  # the cache's dtype was what attention read
    torch.testing.assert_close(stored, exact, atol=CLOSE_TO_FLOAT32[kv_dtype], rtol=0)
