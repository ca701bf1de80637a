"""The triton backend against torch_native: the same attention and the same cache writes.

On the CPU the kernels run in Triton's interpreter (TRITON_INTERPRET=1, which
tests/conftest.py sets before anything imports triton); in the cuda lane
(TERCET_TEST_DEVICE=cuda) they are compiled for the GPU. Random steps mix
prefill, chunks over cached prefixes and decode rows; others are decode only
(the split kernel), with sequences long enough for several splits; GQA
ratios 1, 2 and 4, head sizes 64 and 128, pages of 1, 4 and 16 tokens,
float32 and bfloat16. The interpreter is slow, so shapes stay small.

Tolerances: float32 agrees to 1e-5 (the interpreter's products run in
float32, as torch_native's do); bfloat16 to the rounding of its output, one
bfloat16 step (2**-7 relative, 2e-2 absolute). On a GPU the bfloat16 matrix
products take bfloat16 operands (the softmax weights rounded once more), so
the cuda lane allows 3e-2 absolute, 2e-2 relative.
"""

from __future__ import annotations

import pytest
import torch
from device_lane import device_name, in_cuda_lane
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("triton")

from tercet.plugin_api import AttentionLayout, ConfigError
from tercet.plugins import triton_attention
from tercet.plugins.torch_native_attention.backend import TorchNativeAttentionBackend
from tercet.plugins.triton_attention.backend import TritonAttentionBackend
from tercet.testing.attention_cases import attention_case, compare_backends

DEVICE = torch.device(device_name())
BFLOAT16 = dict(atol=3e-2, rtol=2e-2) if in_cuda_lane() else dict(atol=2e-2, rtol=2**-7)
TOLERANCE = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.bfloat16: BFLOAT16}

shapes = dict(
    seed=st.integers(0, 2**16),
    num_kv_heads=st.sampled_from([1, 2]),
    group=st.sampled_from([1, 2, 4]),
    head_dim=st.sampled_from([64, 128]),
    page_size=st.sampled_from([1, 4, 16]),
    dtype=st.sampled_from([torch.float32, torch.bfloat16]),
)


def check_against_torch_native(seed, spans, num_kv_heads, group, head_dim, page_size, dtype):
    case = attention_case(seed, spans, num_kv_heads, group, head_dim, page_size, dtype, DEVICE)
    compare_backends(case, TritonAttentionBackend(case.layout), TorchNativeAttentionBackend(case.layout),
                     **TOLERANCE[dtype])


@settings(max_examples=20, deadline=None)
@given(
    # (cached prefix, new tokens): prefill (no prefix), chunks over a prefix, decode rows (one new token).
    spans=st.lists(st.tuples(st.integers(0, 150), st.integers(1, 40)), min_size=1, max_size=3),
    **shapes,
)
def test_steps_with_prompt_tokens_attend_and_write_as_torch_native_does(
    seed, spans, num_kv_heads, group, head_dim, page_size, dtype
):
    check_against_torch_native(seed, spans, num_kv_heads, group, head_dim, page_size, dtype)


@settings(max_examples=20, deadline=None)
@given(seq_lens=st.lists(st.integers(1, 300), min_size=1, max_size=4), **shapes)
def test_decode_steps_attend_and_write_as_torch_native_does(
    seed, seq_lens, num_kv_heads, group, head_dim, page_size, dtype
):
    spans = [(length - 1, 1) for length in seq_lens]
    check_against_torch_native(seed, spans, num_kv_heads, group, head_dim, page_size, dtype)


def test_a_decode_split_with_no_keys_adds_nothing():
    # One key and several splits: every split but the first is empty, and must weigh nothing.
    check_against_torch_native(5, [(0, 1), (200, 1)], 2, 2, 64, 4, torch.float32)


def test_registered_under_triton_through_the_plugin_hook():
    names = []
    triton_attention.register_attention_backends(lambda name, factory: names.append((name, factory)))
    assert names == [("triton", triton_attention.create_triton_backend)]


@pytest.mark.skipif(in_cuda_lane(), reason="the interpreter's absence only matters on a CPU")
def test_a_cpu_without_the_interpreter_is_a_config_error_that_says_so(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    layout = AttentionLayout(2, 1, 64, num_layers=1, device=torch.device("cpu"), dtype=torch.float32)
    with pytest.raises(ConfigError, match="TRITON_INTERPRET=1"):
        triton_attention.create_triton_backend(layout)
    assert "TRITON_INTERPRET=1" in triton_attention.triton_unavailable_reason()


def test_without_triton_it_is_listed_unavailable_and_choosing_it_says_why(monkeypatch):
    real_find_spec = triton_attention.importlib.util.find_spec
    monkeypatch.setattr(triton_attention.importlib.util, "find_spec",
                        lambda name: None if name == "triton" else real_find_spec(name))
    assert triton_attention.triton_unavailable_reason() == triton_attention.NOT_INSTALLED
    layout = AttentionLayout(2, 1, 64, num_layers=1, device=DEVICE, dtype=torch.float32)
    with pytest.raises(ConfigError, match=r"pip install 'tercet\[triton\]'"):
        triton_attention.create_triton_backend(layout)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_on_cuda_long_sequences_and_wide_batches_match_torch_native(dtype):
    # Sizes a GPU serves: 64 sequences decoding over up to 4,000 keys, and prompts of 1,000 tokens over a prefix.
    generator = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, 4000, (64,), generator=generator).tolist()
    check_against_torch_native(1, [(length - 1, 1) for length in lengths], 8, 4, 128, 16, dtype)
    check_against_torch_native(2, [(0, 1000), (3000, 700), (500, 1), (17, 333)], 8, 4, 128, 16, dtype)
