"""The fused CPU ops against the torch ops they replace, in bfloat16.

Rotary equals torch's bit for bit; RMSNorm and SiLU·mul stay within one
bfloat16 step (2**-7 relative) of torch's, since a float32 sum's order or
exp's last bit may differ; the residual add equals torch's bfloat16 add.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from tercet.model.fused_ops import cpu_fused_ops_for
from tercet.model.llama import RMSNorm
from tercet.model.rotary import RopeSettings, RotaryEmbedding, apply_rotary

CPU = torch.device("cpu")
ONE_STEP = dict(atol=1e-6, rtol=2**-7)


@pytest.fixture(scope="module")
def ops():
    fused = cpu_fused_ops_for(CPU, torch.bfloat16, allowed=True)
    if fused is None:
        pytest.skip("no C compiler here: the model runs torch's ops")
    return fused


def test_only_bfloat16_on_a_cpu_and_only_when_allowed():
    assert cpu_fused_ops_for(CPU, torch.float32, allowed=True) is None  # float32 must equal transformers
    assert cpu_fused_ops_for(CPU, torch.bfloat16, allowed=False) is None


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 20), width=st.sampled_from([64, 576, 96]), seed=st.integers(0, 2**16), add=st.booleans())
def test_rms_norm_and_its_residual_add(ops, rows, width, seed, add):
    generator = torch.Generator().manual_seed(seed)
    norm = RMSNorm(width, 1e-5).to(torch.bfloat16)
    norm.weight.data = (torch.rand(width, generator=generator) + 0.5).bfloat16()
    hidden = (torch.randn(rows, width, generator=generator) * 3).bfloat16()
    addend = torch.randn(rows, width, generator=generator).bfloat16() if add else None
    expected_hidden = hidden + addend if add else hidden.clone()
    expected = norm(expected_hidden)
    got = ops.rms_norm(hidden, norm.weight, norm.eps, addend=addend)
    assert torch.equal(hidden, expected_hidden)  # updated in place, as torch's bfloat16 add rounds
    torch.testing.assert_close(got, expected, **ONE_STEP)


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 20), width=st.sampled_from([16, 1536, 40]), seed=st.integers(0, 2**16))
def test_silu_mul(ops, rows, width, seed):
    gate_up = (torch.randn(rows, 2 * width, generator=torch.Generator().manual_seed(seed)) * 4).bfloat16()
    gate, up = gate_up.chunk(2, dim=-1)
    torch.testing.assert_close(ops.silu_mul(gate_up), F.silu(gate) * up, **ONE_STEP)


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 12), head_dim=st.sampled_from([64, 32]), q_heads=st.integers(1, 4),
       kv_heads=st.integers(1, 2), seed=st.integers(0, 2**16))
def test_rotary_equals_torch_bit_for_bit(ops, rows, head_dim, q_heads, kv_heads, seed):
    generator = torch.Generator().manual_seed(seed)
    rotary = RotaryEmbedding(RopeSettings(theta=10000.0), head_dim, 512, torch.bfloat16, CPU)
    qkv = torch.randn(rows, (q_heads + 2 * kv_heads) * head_dim, generator=generator).bfloat16()
    positions = torch.randint(0, 512, (rows,), generator=generator)
    heads = q_heads + kv_heads
    cos, signed_sin = rotary.cos_sin(positions)
    expected = apply_rotary(qkv[:, :heads * head_dim].reshape(rows, heads, head_dim), cos, signed_sin)
    untouched = qkv[:, heads * head_dim:].clone()
    ops.rotary_(qkv, heads, head_dim, positions, rotary.cos_table, rotary.signed_sin_table)
    assert torch.equal(qkv[:, :heads * head_dim].reshape(rows, heads, head_dim), expected)
    assert torch.equal(qkv[:, heads * head_dim:], untouched)  # v is not rotated
