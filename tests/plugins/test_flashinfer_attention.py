"""The flashinfer backend: listed unavailable (with the reason) off CUDA; on CUDA, the
attention contract against torch_native over the same random steps as the other backends.

Its plan's inputs (host offsets, each sequence's slots in order) are checked on
the CPU. FlashInfer's kernels take float16 and bfloat16 only. Tolerances (CUDA
only): float16 5e-3, bfloat16 3e-2 absolute, 2e-2 relative.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from device_lane import in_cuda_lane
from hypothesis import given, settings
from hypothesis import strategies as st

from tercet.plugin_api import AttentionLayout, ConfigError
from tercet.plugins import flashinfer_attention
from tercet.testing.attention_cases import attention_case, compare_backends

TOLERANCE = {torch.float16: dict(atol=5e-3, rtol=5e-3), torch.bfloat16: dict(atol=3e-2, rtol=2e-2)}


def test_registered_under_flashinfer_through_the_plugin_hook():
    names = []
    flashinfer_attention.register_attention_backends(lambda name, factory: names.append(name))
    assert names == ["flashinfer"]


@pytest.mark.skipif(in_cuda_lane(), reason="off CUDA only")
def test_off_cuda_it_is_unavailable_and_choosing_it_says_why():
    reason = flashinfer_attention.flashinfer_unavailable_reason()
    assert reason is not None and ("not installed" in reason or "CUDA" in reason)
    layout = AttentionLayout(2, 1, 64, num_layers=1, device=torch.device("cpu"), dtype=torch.float32)
    with pytest.raises(ConfigError, match="flashinfer is unavailable"):
        flashinfer_attention.create_flashinfer_backend(layout)


def test_its_plan_gets_host_offsets_and_every_sequences_slots_in_position_order():
    from tercet.plugins.flashinfer_attention.backend import host_indptr, sequence_slots

    # A decode row over 5 cached tokens, a prompt of 3 after a prefix of 2, a fresh prompt of 2.
    case = attention_case(0, [(5, 1), (2, 3), (0, 2)], 1, 1, 64, 4, torch.bfloat16, "cpu")
    batch, table = case.batch, case.table
    assert host_indptr(batch.host_extend_lens).tolist() == [0, 1, 4, 6]
    assert host_indptr(batch.host_seq_lens).tolist() == [0, 6, 11, 13]
    rows = batch.req_pool_indices.tolist()
    expected = [*table[rows[0], :6].tolist(), *table[rows[1], :5].tolist(), *table[rows[2], :2].tolist()]
    slots = sequence_slots(batch, table)
    assert slots.dtype == torch.int32 and slots.tolist() == expected


def test_float32_is_refused_with_the_dtypes_its_kernels_take():
    layout = AttentionLayout(2, 1, 64, num_layers=1, device=torch.device("cuda"), dtype=torch.float32)
    assert "float16 or bfloat16" in flashinfer_attention.layout_problem(layout)
    assert flashinfer_attention.layout_problem(dataclasses.replace(layout, dtype=torch.bfloat16)) is None


def test_a_cache_of_another_dtype_than_the_activations_is_refused_naming_the_setting():
    layout = AttentionLayout(2, 1, 64, num_layers=1, device=torch.device("cuda"), dtype=torch.bfloat16)
    for kv_dtype in (torch.float32, torch.int8):
        problem = flashinfer_attention.layout_problem(dataclasses.replace(layout, kv_dtype=kv_dtype))
        assert f"not {kv_dtype}" in problem and 'cache.kv_dtype = "auto"' in problem
    assert flashinfer_attention.layout_problem(dataclasses.replace(layout, kv_dtype=torch.bfloat16)) is None


@pytest.mark.cuda
@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    spans=st.lists(st.tuples(st.integers(0, 300), st.integers(1, 40)), min_size=1, max_size=4),
    decode_only=st.booleans(),
    num_kv_heads=st.sampled_from([1, 2]),
    group=st.sampled_from([1, 2, 4]),
    head_dim=st.sampled_from([64, 128]),
    page_size=st.sampled_from([1, 16]),
    dtype=st.sampled_from([torch.float16, torch.bfloat16]),
)
def test_on_cuda_it_attends_and_writes_as_torch_native_does(
    seed, spans, decode_only, num_kv_heads, group, head_dim, page_size, dtype
):
    from tercet.plugins.flashinfer_attention.backend import FlashInferAttentionBackend
    from tercet.plugins.torch_native_attention.backend import TorchNativeAttentionBackend

    if decode_only:
        spans = [(prefix + new - 1, 1) for prefix, new in spans]
    case = attention_case(seed, spans, num_kv_heads, group, head_dim, page_size, dtype, "cuda")
    compare_backends(case, FlashInferAttentionBackend(case.layout), TorchNativeAttentionBackend(case.layout),
                     **TOLERANCE[dtype])
