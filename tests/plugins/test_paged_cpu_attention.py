"""The paged_cpu backend against torch_native: the same attention and the same cache writes.

Random decode batches, and steps with prompt tokens over cached prefixes
(sequence lengths across several splits of the kernel,
GQA ratios, head sizes, page sizes, float32 and bfloat16, q/k/v as strided
views of one projection as the model hands them over) run through both
backends on copies of one cache. float32 agrees to 1e-5, bfloat16 to the
rounding of its output (one bfloat16 step, 2**-7 relative).
"""

from __future__ import annotations

import logging

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tercet.plugin_api import AttentionLayout, ConfigError
from tercet.native import build as native_build
from tercet.native.cpu import runnable_levels
from tercet.plugin_api.model import ForwardBatch
from tercet.plugins.paged_cpu_attention import create_paged_cpu_backend
from tercet.plugins.paged_cpu_attention.backend import PagedCpuAttentionBackend
from tercet.plugins.paged_cpu_attention.build import load_kernel, takes_bf16_dot_products
from tercet.plugins.torch_native_attention.backend import TorchNativeAttentionBackend
from tercet.testing.attention_cases import assert_same_cache, attention_case, copy_of

CPU = torch.device("cpu")
TOLERANCE = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.bfloat16: dict(atol=2e-2, rtol=2**-7)}


def decode_case(seed, seq_lens, num_kv_heads, group, head_dim, page_size, dtype):
    case = attention_case(seed, [(length - 1, 1) for length in seq_lens], num_kv_heads, group, head_dim, page_size,
                          dtype)
    return case.layout, case.cache, case.table, case.batch, case.q, case.k, case.v


def run(backend, cache, table, batch, q, k, v, layer_id=1):
    backend.prepare(batch, table)
    return backend.forward(q, k, v, layer_id, batch, cache)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    seq_lens=st.lists(st.integers(1, 700), min_size=1, max_size=5),
    num_kv_heads=st.sampled_from([1, 2, 3]),
    group=st.sampled_from([1, 2, 3, 4]),
    head_dim=st.sampled_from([64, 128, 40]),  # 40: the portable path, not a multiple of 16
    page_size=st.sampled_from([1, 4, 16]),
    dtype=st.sampled_from([torch.float32, torch.bfloat16]),
)
def test_decode_attends_and_writes_as_torch_native_does(seed, seq_lens, num_kv_heads, group, head_dim, page_size,
                                                        dtype):
    layout, cache, table, batch, q, k, v = decode_case(seed, seq_lens, num_kv_heads, group, head_dim, page_size, dtype)
    reference_cache, kernel_cache = copy_of(cache), copy_of(cache)
    expected = run(TorchNativeAttentionBackend(layout), reference_cache, table, batch, q, k, v)
    got = run(PagedCpuAttentionBackend(layout, load_kernel(layout)), kernel_cache, table, batch, q, k, v)
    torch.testing.assert_close(got, expected, **TOLERANCE[dtype])
    assert_same_cache(kernel_cache, reference_cache)


@pytest.mark.parametrize("head_dim,group", [(64, 3), (128, 1), (64, 8)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_every_vector_level_gives_the_same_bits(head_dim, group, dtype):
    """AVX2's path is AVX-512's in two 8-lane halves: the same operations lane for lane, the same bits. A
    bfloat16 cache on AVX512-BF16's dot products has the bits of the other levels with them, and agrees
    with the float32 arithmetic's to the output's rounding."""
    levels = [level for level in runnable_levels() if level.name != "portable"]
    if len(levels) < 2:
        pytest.skip(f"this CPU runs one vector level of the kernel only ({', '.join(level.name for level in levels)})")
    layout, cache, table, batch, q, k, v = decode_case(9, [1, 15, 16, 17, 100, 700], 2, group, head_dim, 16, dtype)
    outputs = {level: run(PagedCpuAttentionBackend(layout, load_kernel(layout, level=level)), copy_of(cache),
                          table, batch, q, k, v) for level in levels}
    on_dots = [level for level in levels if dtype == torch.bfloat16 and takes_bf16_dot_products(level)]
    families = [[level for level in levels if level not in on_dots], on_dots]
    for family in families:
        for level in family[1:]:
            assert torch.equal(outputs[level], outputs[family[0]]), f"level {level.name} differs from {family[0].name}"
    if all(families):
        torch.testing.assert_close(outputs[on_dots[0]], outputs[families[0][0]], **TOLERANCE[dtype])


def test_a_sequence_gets_the_same_output_whatever_its_batch_mates():
    layout, cache, table, batch, q, k, v = decode_case(3, [600, 5, 300], 3, 3, 64, 4, torch.bfloat16)
    backend = PagedCpuAttentionBackend(layout, load_kernel(layout))
    together = run(backend, copy_of(cache), table, batch, q, k, v)
    rows = batch.req_pool_indices.tolist()
    alone = ForwardBatch.build([rows[0]], [599], [[7]], table, CPU)
    by_itself = run(backend, copy_of(cache), table, alone, q[:1], k[:1], v[:1])
    assert torch.equal(together[:1], by_itself)


def test_a_head_gets_the_same_output_whether_its_item_holds_one_kv_head_or_all():
    # Alone, a one-split sequence is worked one KV head at a time (too few splits to share out
    # otherwise); among many splits, an item takes every KV head of its split at once.
    layout, cache, table, batch, q, k, v = decode_case(5, [40, 600, 300, 90, 260, 700, 10, 500], 4, 2, 64, 16,
                                                       torch.bfloat16)
    backend = PagedCpuAttentionBackend(layout, load_kernel(layout))
    together = run(backend, copy_of(cache), table, batch, q, k, v)
    rows = batch.req_pool_indices.tolist()
    alone = ForwardBatch.build([rows[0]], [39], [[7]], table, CPU)
    assert torch.equal(together[:1], run(backend, copy_of(cache), table, alone, q[:1], k[:1], v[:1]))


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    spans=st.lists(st.tuples(st.integers(0, 300), st.integers(1, 40)), min_size=1, max_size=4),  # (prefix, new)
    num_kv_heads=st.sampled_from([1, 3]),
    group=st.sampled_from([1, 3]),
    head_dim=st.sampled_from([64, 40]),
    page_size=st.sampled_from([1, 16]),
    dtype=st.sampled_from([torch.float32, torch.bfloat16]),
)
def test_steps_with_prompt_tokens_attend_and_write_as_torch_native_does(
    seed, spans, num_kv_heads, group, head_dim, page_size, dtype
):
    # Prefill, chunks over a cached prefix and decode rows in one step, each new token a kernel row.
    layout, cache, table, decode, _, _, _ = decode_case(
        seed, [prefix + new for prefix, new in spans], num_kv_heads, group, head_dim, page_size, dtype
    )
    tokens = [[7] * new for _, new in spans]
    batch = ForwardBatch.build(decode.req_pool_indices.tolist(), [prefix for prefix, _ in spans], tokens, table, CPU)
    fused = torch.randn(batch.num_tokens, num_kv_heads * (group + 2), head_dim,
                        generator=torch.Generator().manual_seed(seed)).to(dtype)
    q, k, v = fused.split([num_kv_heads * group, num_kv_heads, num_kv_heads], dim=1)
    reference_cache, kernel_cache = copy_of(cache), copy_of(cache)
    expected = run(TorchNativeAttentionBackend(layout), reference_cache, table, batch, q, k, v)
    got = run(PagedCpuAttentionBackend(layout, load_kernel(layout)), kernel_cache, table, batch, q, k, v)
    torch.testing.assert_close(got, expected, **TOLERANCE[dtype])
    assert_same_cache(kernel_cache, reference_cache)


def test_without_a_compiler_or_kernels_built_at_install_the_backend_is_torch_native_and_says_why(
    monkeypatch, caplog, tmp_path
):
    monkeypatch.setattr(native_build, "PREBUILT_DIR", tmp_path)  # as if installed without a compiler
    monkeypatch.setenv("CC", "no-such-compiler")
    monkeypatch.setenv("PATH", "")
    layout = AttentionLayout(2, 1, 64, num_layers=1, device=CPU, dtype=torch.float32)
    with caplog.at_level(logging.WARNING):
        backend = create_paged_cpu_backend(layout)
    assert isinstance(backend, TorchNativeAttentionBackend)
    assert "paged_cpu runs as torch_native: no C compiler found" in caplog.text


def test_a_quantized_cache_without_the_kernel_is_refused_naming_the_setting(monkeypatch, tmp_path):
    # torch_native would read the int8 bytes as numbers: no fallback for a quantized cache.
    monkeypatch.setattr(native_build, "PREBUILT_DIR", tmp_path)
    monkeypatch.setenv("CC", "no-such-compiler")
    monkeypatch.setenv("PATH", "")
    layout = AttentionLayout(2, 1, 64, num_layers=1, device=CPU, dtype=torch.float32, kv_dtype=torch.int8)
    with pytest.raises(ConfigError, match=r"cache.kv_dtype \(int8\) needs the paged_cpu kernel: no C compiler"):
        create_paged_cpu_backend(layout)


PROMPTS = {"short": [5, 6, 7], "long": list(range(20, 45)), "shares-a-prefix": list(range(20, 40)) + [9, 9]}


def greedy_tokens(tercet_scheduler, settings):
    from tercet.plugin_api import SamplingParams

    harness = tercet_scheduler(settings=["model.dtype=float32", *settings])
    greedy = SamplingParams(max_new_tokens=8, temperature=0.0, ignore_eos=True)
    harness.submit("long", PROMPTS["long"], greedy)
    first = harness.run_until_finished()
    # Prefill and decode of several sequences in one batch, one of them from the prefix cache.
    harness.submit("short", PROMPTS["short"], greedy)
    harness.submit("shares-a-prefix", PROMPTS["shares-a-prefix"], greedy)
    return {**first, **harness.run_until_finished()}


def test_a_scheduler_on_the_tiny_llama_decodes_as_with_torch_native(tercet_scheduler):
    ours = greedy_tokens(tercet_scheduler, ["attention.backend=paged_cpu"])
    assert ours == greedy_tokens(tercet_scheduler, ["attention.backend=torch_native"])
    assert {rid: len(tokens) for rid, tokens in ours.items()} == {rid: 8 for rid in PROMPTS}
