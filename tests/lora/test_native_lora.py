"""Steps with LoRA adapters in the model's one C call, against the same steps layer by layer through the torch backend.

The C runner adds each segment's delta after each projection with the torch
backend's bfloat16 roundings (the shrunk rows, each part's delta, the sum); only
the order of the float32 sums inside the two small products differs (and the C
runner multiplies bfloat16 pairs with VDPBF16PS where the CPU has it), so a value
may round to the neighbouring bfloat16 and move what follows by as much. On the
tiny model the two are equal bit for bit; the bound is one bfloat16 step of the
hidden states' scale there, and on the default model (30 layers deep, rank 16) a
row's relative L2 distance of 0.04, each under what an adapter changes (checked
too). And the steps must take the one call: a counter of the runner's adapter
steps moves, so a fallback fails the test.
"""

from __future__ import annotations

import pytest
import torch

from tercet.plugins.linear_layers.block_matmul import load_block_matmul
from tercet.plugins.torch_lora_backend import TorchLoraBackend
from tercet.testing.native_steps import hidden_and_cache, rows_with_pages
from tercet.testing.runner_factory import model_runner_for

pytestmark = pytest.mark.skipif(load_block_matmul() is None, reason="the block kernel does not run on this CPU")
PAGE = 4
# Largest |one call - layer by layer| allowed, relative to the largest |hidden| of the step: one
# bfloat16 step (8 significant bits).
RELATIVE_BOUND = 2.0**-7
# The default model (30 layers, rank 16): largest ||one call - layer by layer|| / ||layer by layer|| of a row.
DEFAULT_MODEL_ROW_BOUND = 0.04


@pytest.fixture(scope="module")
def runner(tiny_llama_dir, tiny_adapters):
    runner = model_runner_for(tiny_llama_dir, dtype="bfloat16", quantization="q4_1", native_kernels=True,
                              max_total_tokens=256, page_size=PAGE, max_running_requests=8)
    lora = runner.attach_lora(TorchLoraBackend(), max_rank=8)
    for name, path in tiny_adapters.items():
        lora.load(name, path)
    return runner


def _hidden(runner, batch, one_call: bool) -> torch.Tensor:
    return hidden_and_cache(runner, batch, one_call)[0].float()


def _step(runner, prefixes, new_lengths, adapters, seed, page=PAGE):
    generator = torch.Generator().manual_seed(seed)
    rows = rows_with_pages(runner, [prefix + new for prefix, new in zip(prefixes, new_lengths)], page)
    try:
        if any(prefixes):  # fill the cached prefixes first (with the base model: only the step compared matters)
            warm = runner.build_batch(rows, [0] * len(rows), [torch.randint(0, 1000, (max(p, 1),),
                                                                            generator=generator).tolist()
                                                              for p in prefixes])
            with torch.inference_mode():
                runner.attention_backend.prepare(warm, runner.req_to_token_pool.table)
                runner.model.hidden_states(warm)
        tokens = [torch.randint(0, 1000, (new,), generator=generator).tolist() for new in new_lengths]
        batch = runner.build_batch(rows, prefixes, tokens, adapters)
        before = runner.model.layer_runner.adapter_steps
        one_call = _hidden(runner, batch, one_call=True)
        assert runner.model.layer_runner.adapter_steps == before + 1, "the adapter step left the one call"
        by_layer = _hidden(runner, batch, one_call=False)
        base = _hidden(runner, runner.build_batch(rows, prefixes, tokens), one_call=True)
        return one_call, by_layer, base
    finally:
        for row in rows:
            runner.req_to_token_pool.free(row)


@pytest.mark.parametrize("prefixes, new_lengths, adapters", [
    ([0, 0, 0, 0], [9, 5, 7, 6], ["every", None, "attention", "mlp"]),         # prompts
    ([12, 30, 5, 9, 3], [1, 1, 1, 1, 1], ["every", "every", None, "mlp", "attention"]),  # decode steps
    ([20, 0, 7], [1, 11, 3], ["attention", "every", "every"]),                 # decode beside prompt chunks
])
def test_adapter_steps_in_one_call_equal_the_torch_backend_layer_by_layer(runner, prefixes, new_lengths, adapters):
    one_call, by_layer, base = _step(runner, prefixes, new_lengths, adapters, seed=sum(new_lengths))
    scale = by_layer.abs().max()
    # At most one value in a hundred may differ at all (on the tiny model none does).
    assert (one_call != by_layer).float().mean() <= 0.01
    assert (one_call - by_layer).abs().max() <= RELATIVE_BOUND * scale
    start = 0
    for length, adapter in zip(new_lengths, adapters):
        rows = slice(start, start + length)
        if adapter is None:  # the base rows of a mixed step are the base model's, bit for bit
            assert torch.equal(one_call[rows], base[rows])
        else:  # and an adapter moves its rows far more than the bound
            assert (one_call[rows] - base[rows]).abs().max() > 2 * RELATIVE_BOUND * scale
        start += length


def test_a_backend_the_runner_does_not_compute_like_runs_layer_by_layer(tiny_llama_dir, tiny_adapters):
    class Other(TorchLoraBackend):
        native_equivalent = False

    runner = model_runner_for(tiny_llama_dir, dtype="bfloat16", quantization="q4_1", native_kernels=True,
                              max_total_tokens=64, page_size=PAGE, max_running_requests=2)
    runner.attach_lora(Other(), max_rank=8).load("every", tiny_adapters["every"])
    batch = runner.build_batch(rows_with_pages(runner, [5], PAGE), [0], [[1, 2, 3, 4, 5]], ["every"])
    _hidden(runner, batch, one_call=True)
    assert runner.model.layer_runner.adapter_steps == 0


@pytest.mark.real_model
def test_the_default_model_with_rank_16_adapters_in_one_call_is_within_the_bound(default_model_dir, tmp_path):
    from tercet.testing.lora_adapters import write_peft_adapter

    runner = model_runner_for(default_model_dir, dtype="bfloat16", quantization="q4_1", native_kernels=True,
                              max_total_tokens=512, page_size=16, max_running_requests=16)
    lora = runner.attach_lora(TorchLoraBackend(), max_rank=16)
    for seed in range(2):
        lora.load(f"adapter{seed}", str(write_peft_adapter(default_model_dir, tmp_path / f"a{seed}", rank=16,
                                                             alpha=16, seed=seed)))
    adapters = ["adapter0"] * 3 + [None] + ["adapter1"] * 10  # blocks of 8 rows and a partial one
    one_call, by_layer, base = _step(runner, [9] * 14, [1] * 14, adapters, seed=7, page=16)
    # Over 30 layers a value rounded to the neighbouring bfloat16 moves what follows: the bound is
    # on each row's relative L2 distance (measured: at most 0.023), under what an adapter moves a row.
    distance = (one_call - by_layer).norm(dim=1) / by_layer.norm(dim=1)
    effect = (one_call - base).norm(dim=1) / base.norm(dim=1)
    assert distance.max() <= DEFAULT_MODEL_ROW_BOUND
    assert torch.equal(one_call[3], base[3])  # the base row of the step
    adapted = [index for index, name in enumerate(adapters) if name is not None]
    assert effect[adapted].min() > DEFAULT_MODEL_ROW_BOUND  # measured: at least 0.089
