"""The model's layers in one C call against the same layers called one by one from Python.

Both run the same C functions in the same order (the block kernel, paged_cpu's
attention, the fused norms, SiLU·mul and rotary), so the hidden states and the
KV cache they write must be equal bit for bit: on prompts over a cached prefix,
decode steps, and a batch mixing both.
"""

from __future__ import annotations

import pytest
import torch

from tercet.model.native_layers import NativeLayers
from tercet.plugins.linear_layers.block_matmul import load_block_matmul
from tercet.testing.native_steps import hidden_and_cache, rows_with_pages
from tercet.testing.runner_factory import model_runner_for

pytestmark = pytest.mark.skipif(load_block_matmul() is None, reason="the block kernel does not run on this CPU")
PAGE = 4


@pytest.fixture(scope="module")
def runner(tiny_llama_dir):
    return model_runner_for(tiny_llama_dir, dtype="bfloat16", quantization="q4_1", native_kernels=True,
                            max_total_tokens=256, page_size=PAGE, max_running_requests=4)


def test_the_default_cpu_model_runs_its_layers_in_one_call(runner):
    assert isinstance(runner.model.native_layers, NativeLayers)


@pytest.mark.parametrize("prefixes, new_lengths", [
    ([0, 0], [9, 17]),          # prompts
    ([12, 30, 5], [1, 1, 1]),   # decode steps
    ([20, 0, 7], [1, 11, 3]),   # decode rows beside prompt chunks over cached prefixes
])
def test_one_call_equals_the_layers_one_by_one(runner, prefixes, new_lengths):
    generator = torch.Generator().manual_seed(sum(prefixes) + sum(new_lengths))
    rows = rows_with_pages(runner, [prefix + new for prefix, new in zip(prefixes, new_lengths)], PAGE)
    try:
        tokens = [torch.randint(0, 1000, (new,), generator=generator).tolist() for new in new_lengths]
        # Fill the cached prefixes by a first step, then compare the step over them.
        if any(prefixes):
            warm = runner.build_batch(rows, [0] * len(rows),
                                      [torch.randint(0, 1000, (max(p, 1),), generator=generator).tolist()
                                       for p in prefixes])
            with torch.inference_mode():
                runner.attention_backend.prepare(warm, runner.req_to_token_pool.table)
                runner.model.hidden_states(warm)
        batch = runner.build_batch(rows, prefixes, tokens)
        one_call, one_call_cache = hidden_and_cache(runner, batch, one_call=True)
        by_layer, by_layer_cache = hidden_and_cache(runner, batch, one_call=False)
        assert torch.equal(one_call, by_layer)
        for mine, theirs in zip(one_call_cache, by_layer_cache):
            assert torch.equal(mine, theirs)
    finally:
        for row in rows:
            runner.req_to_token_pool.free(row)


def test_float32_runs_layer_by_layer(tiny_llama_dir):
    # float32 must equal transformers: it keeps torch's ops, and so no one call.
    runner = model_runner_for(tiny_llama_dir, dtype="float32", quantization="q4_1", native_kernels=True,
                              max_total_tokens=64, page_size=PAGE, max_running_requests=1)
    assert runner.model.native_layers is None
