"""The paged_cpu kernel over an int8 or e4m3 cache (quantized_rows.h): what it stores and what it reads.

It stores each new token's row as tercet.model.kv_cache.quantize_rows does, bit for
bit (the row rotated, its scale and its values), whatever the activations' dtype; its
e4m3 rounding is torch's; and it attends over the rows as their values times their
scales, read in place: the output is attention over the dequantized cache (queries
rotated as the keys were, outputs rotated back), to float32's rounding.
"""

from __future__ import annotations

import pytest
import torch

from tercet.model.kv_cache import dequantize_rows, quantize_rows, rotate_rows, rotation_block, unrotated_rows
from tercet.plugins.paged_cpu_attention.backend import PagedCpuAttentionBackend
from tercet.plugins.paged_cpu_attention.build import load_kernel
from tercet.testing.attention_cases import CASE_LAYER, attention_case, copy_of

QUANTIZED = [torch.int8, torch.float8_e4m3fn]
SPANS = [(0, 21), (300, 1), (17, 40), (600, 3)]


def _bytes(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.contiguous().view(torch.uint8)


def _run(case):
    cache = copy_of(case.cache)
    out = case.run(PagedCpuAttentionBackend(case.layout, load_kernel(case.layout)), cache)
    return out, cache


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kv_dtype", QUANTIZED)
def test_new_rows_are_stored_as_quantize_rows_stores_them(dtype, kv_dtype):
    case = attention_case(3, SPANS, 3, 3, 64, 16, dtype, kv_dtype=kv_dtype)
    _, cache = _run(case)
    slots = case.batch.out_cache_loc
    for new, buffers, scales in ((case.k, cache.k_buffers, cache.k_scales), (case.v, cache.v_buffers, cache.v_scales)):
        stored, row_scales = quantize_rows(new, kv_dtype)
        assert torch.equal(_bytes(buffers[CASE_LAYER][slots]), _bytes(stored))
        assert torch.equal(scales[CASE_LAYER][slots], row_scales)


def test_e4m3_values_are_rounded_as_torch_rounds_them():
    # Rows whose largest magnitude is 448 have the scale 1: each other value is stored as it is, in e4m3.
    # An odd head size has no rotation (blocks of one).
    generator = torch.Generator().manual_seed(5)
    case = attention_case(5, [(0, 64)], 3, 1, 33, 16, torch.float32, kv_dtype=torch.float8_e4m3fn)
    magnitudes = torch.exp2(torch.empty(64, 3, 33).uniform_(-12, 8.8, generator=generator)).clamp(max=448)
    values = magnitudes * torch.where(torch.rand(64, 3, 33, generator=generator) < 0.5, -1.0, 1.0)
    ties = torch.tensor([2.0**-10, 3 * 2.0**-10, 1.0625, 1.1875, 17.0, 19.0, 232.0, 432.0, 440.0])
    values[:, 0, :ties.numel()] = ties
    values[..., -1] = 448.0
    k = values.clone()
    case = type(case)(case.layout, case.cache, case.table, case.batch, case.q, k, values.clone())
    _, cache = _run(case)
    stored = cache.k_buffers[CASE_LAYER][case.batch.out_cache_loc]
    assert torch.equal(cache.k_scales[CASE_LAYER][case.batch.out_cache_loc].float(), torch.ones(64, 3))
    assert torch.equal(_bytes(stored), _bytes(values.to(torch.float8_e4m3fn)))


def _attention_over(case, cache) -> torch.Tensor:
    """Each new token's attention over its sequence's dequantized keys and values, in float64: the
    queries rotated as the stored keys were, the outputs rotated back."""
    layout, batch = case.layout, case.batch
    sequences = batch.req_pool_indices.repeat_interleave(batch.extend_lens).tolist()
    keys = dequantize_rows(cache.k_buffers[CASE_LAYER], cache.k_scales[CASE_LAYER]).double()
    values = dequantize_rows(cache.v_buffers[CASE_LAYER], cache.v_scales[CASE_LAYER]).double()
    group = layout.num_heads // layout.num_kv_heads
    rows = []
    for row, (sequence, position) in enumerate(zip(sequences, batch.positions.tolist())):
        slots = case.table[sequence, :position + 1]
        k = keys[slots].repeat_interleave(group, dim=1)  # [keys, heads, dim]
        v = values[slots].repeat_interleave(group, dim=1)
        n = rotation_block(layout.head_dim)
        q = rotate_rows(case.q[row].float()).double() / n  # [heads, dim]
        weights = torch.softmax(torch.einsum("hd,khd->hk", q, k) * layout.scaling, dim=-1)
        rows.append((rotate_rows(torch.einsum("hk,khd->hd", weights, v).float()).double() / n).reshape(-1))
    return torch.stack(rows)


@pytest.mark.parametrize("kv_dtype", QUANTIZED)
@pytest.mark.parametrize(("num_kv_heads", "group", "head_dim"), [(3, 3, 64), (2, 1, 128), (1, 4, 40)])
def test_attention_reads_rows_as_their_values_times_their_scales(kv_dtype, num_kv_heads, group, head_dim):
    case = attention_case(9, SPANS, num_kv_heads, group, head_dim, 16, torch.float32, kv_dtype=kv_dtype)
    out, cache = _run(case)
    torch.testing.assert_close(out.double(), _attention_over(case, cache), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kv_dtype", QUANTIZED)
def test_a_bfloat16_step_over_a_quantized_cache_is_close_to_the_bfloat16_cache(kv_dtype):
    # The same step over the same keys and values, stored quantized and in bfloat16: the outputs differ
    # by the rounding of the stored rows alone.
    quantized = attention_case(12, SPANS, 3, 3, 64, 16, torch.bfloat16, kv_dtype=kv_dtype)
    plain = attention_case(12, SPANS, 3, 3, 64, 16, torch.bfloat16)
    for layer in range(plain.cache.num_layers):
        for buffers, scales, target in ((quantized.cache.k_buffers, quantized.cache.k_scales, plain.cache.k_buffers),
                                        (quantized.cache.v_buffers, quantized.cache.v_scales, plain.cache.v_buffers)):
            target[layer].copy_(unrotated_rows(buffers[layer], scales[layer]).to(torch.bfloat16))
    got, _ = _run(quantized)
    expected, _ = _run(plain)
    bound = 0.05 if kv_dtype == torch.int8 else 0.25
    assert (got.float() - expected.float()).abs().max() < bound
