"""The model's layers in one C call against the same layers called one by one from Python.

Both run the same C functions in the same order (the block kernel, paged_cpu's
attention, the fused norms, SiLU·mul and rotary), so the hidden states and the
KV cache they write must be equal bit for bit: on prompts over a cached prefix,
decode steps, and a batch mixing both; over a bfloat16, int8 or e4m3 cache (the
quantized ones' row scales passed to the kernel from C as from Python). A float32 model's one call (steps of up
to 16 tokens) is within float32's rounding of its layers on torch's ops; with
GGUF block weights on the block kernel it takes steps of any length.
"""

from __future__ import annotations

import pytest
import torch

from tercet.model.native_layers import NativeLayers
from tercet.plugins.linear_layers import few_rows_f32
from tercet.plugins.linear_layers.block_matmul import load_block_matmul
from tercet.testing.native_steps import hidden_and_cache, rows_with_pages
from tercet.testing.runner_factory import model_runner_for

PAGE = 4


@pytest.fixture(scope="module", params=["auto", "int8", "fp8_e4m3"])
def runner(tiny_llama_dir, request):
    if load_block_matmul() is None:
        pytest.skip("the block kernel does not run on this CPU")
    return model_runner_for(tiny_llama_dir, dtype="bfloat16", quantization="q4_1", native_kernels=True,
                            max_total_tokens=256, page_size=PAGE, max_running_requests=4, kv_dtype=request.param)


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.view(torch.uint8) if tensor.element_size() == 1 else tensor  # torch compares no float8


def _step_over_cached_prefixes(runner, rows, prefixes, new_lengths, generator):
    """A step of random tokens over cached prefixes of random tokens (filled by a first step)."""
    tokens = [torch.randint(0, 1000, (new,), generator=generator).tolist() for new in new_lengths]
    if any(prefixes):
        warm = runner.build_batch(rows, [0] * len(rows),
                                  [torch.randint(0, 1000, (max(p, 1),), generator=generator).tolist() for p in prefixes])
        with torch.inference_mode():
            runner.attention_backend.prepare(warm, runner.req_to_token_pool.table)
            runner.model.hidden_states(warm)
    return runner.build_batch(rows, prefixes, tokens)


def test_the_default_cpu_model_runs_its_layers_in_one_call(runner):
    assert isinstance(runner.model.layer_runner, NativeLayers)


@pytest.mark.parametrize("prefixes, new_lengths", [
    ([0, 0], [9, 17]),          # prompts
    ([12, 30, 5], [1, 1, 1]),   # decode steps
    ([20, 0, 7], [1, 11, 3]),   # decode rows beside prompt chunks over cached prefixes
])
def test_one_call_equals_the_layers_one_by_one(runner, prefixes, new_lengths):
    generator = torch.Generator().manual_seed(sum(prefixes) + sum(new_lengths))
    rows = rows_with_pages(runner, [prefix + new for prefix, new in zip(prefixes, new_lengths)], PAGE)
    try:
        batch = _step_over_cached_prefixes(runner, rows, prefixes, new_lengths, generator)
        one_call, one_call_cache = hidden_and_cache(runner, batch, one_call=True)
        by_layer, by_layer_cache = hidden_and_cache(runner, batch, one_call=False)
        assert torch.equal(one_call, by_layer)
        for mine, theirs in zip(one_call_cache, by_layer_cache, strict=True):
            assert torch.equal(_bits(mine), _bits(theirs))
    finally:
        for row in rows:
            runner.req_to_token_pool.free(row)


@pytest.mark.parametrize("native_kernels", [True, False])
def test_float32_with_4_bit_layers_runs_in_one_call_on_the_block_kernel_only(tiny_llama_dir, native_kernels):
    # The block kernel's float32 function takes any number of rows; torch's int4 kernels (native_kernels
    # off, or where the block kernel does not run) are no C functions: no one call.
    runner = model_runner_for(tiny_llama_dir, dtype="float32", quantization="q4_1", native_kernels=native_kernels,
                              max_total_tokens=64, page_size=PAGE, max_running_requests=1)
    layers = runner.model.layer_runner
    if native_kernels and load_block_matmul() is not None:
        assert isinstance(layers, NativeLayers) and not layers.adds_adapters and layers.takes(4096)
    else:
        assert not isinstance(layers, NativeLayers)


@pytest.fixture(scope="module")
def float32_runner(tiny_llama_dir):
    if few_rows_f32.kernel_library() is None:
        pytest.skip("the few-rows float32 kernel does not run on this CPU")
    return model_runner_for(tiny_llama_dir, dtype="float32", native_kernels=True, max_total_tokens=256,
                            page_size=PAGE, max_running_requests=4)


def test_a_float32_model_runs_steps_of_up_to_16_tokens_in_one_call(float32_runner):
    layers = float32_runner.model.layer_runner
    assert isinstance(layers, NativeLayers) and not layers.adds_adapters
    assert layers.takes(16) and not layers.takes(17)


def test_float32_without_native_kernels_runs_layer_by_layer(tiny_llama_dir):
    runner = model_runner_for(tiny_llama_dir, dtype="float32", native_kernels=False, max_total_tokens=64,
                              page_size=PAGE, max_running_requests=1)
    assert not isinstance(runner.model.layer_runner, NativeLayers)


@pytest.mark.parametrize("prefixes, new_lengths", [
    ([12, 30, 5], [1, 1, 1]),   # decode steps
    ([20, 0], [5, 9]),          # a verify step of 5 rows beside a short prompt: 14 tokens
])
def test_float32_one_call_is_within_float32_rounding_of_the_layers_one_by_one(float32_runner, prefixes,
                                                                              new_lengths):
    runner = float32_runner
    generator = torch.Generator().manual_seed(sum(prefixes) + sum(new_lengths))
    rows = rows_with_pages(runner, [prefix + new for prefix, new in zip(prefixes, new_lengths)], PAGE)
    try:
        batch = _step_over_cached_prefixes(runner, rows, prefixes, new_lengths, generator)
        steps = runner.model.layer_runner.steps
        one_call, one_call_cache = hidden_and_cache(runner, batch, one_call=True)
        assert runner.model.layer_runner.steps == steps + 1
        by_layer, by_layer_cache = hidden_and_cache(runner, batch, one_call=False)
        # The norms, SiLU and rotary round as float32 does, in another order than torch's: a few
        # float32 roundings of each value apart after every layer.
        torch.testing.assert_close(one_call, by_layer, rtol=1e-5, atol=1e-5)
        for mine, theirs in zip(one_call_cache, by_layer_cache):
            torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-5)
    finally:
        for row in rows:
            runner.req_to_token_pool.free(row)


def test_a_float32_step_of_more_than_16_tokens_runs_layer_by_layer(float32_runner):
    runner = float32_runner
    rows = rows_with_pages(runner, [17], PAGE)
    try:
        batch = runner.build_batch(rows, [0], [list(range(100, 117))])
        steps = runner.model.layer_runner.steps
        hidden_and_cache(runner, batch, one_call=True)
        assert runner.model.layer_runner.steps == steps
    finally:
        runner.req_to_token_pool.free(rows[0])
