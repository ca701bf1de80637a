"""The lean model's building blocks compute exactly what transformers' do."""

import pytest
import torch

from tercet.model.llama import RMSNorm


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("num_tokens", [1, 33])
def test_rms_norm_equals_transformers_bit_for_bit(dtype, num_tokens):
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    torch.manual_seed(0)
    hidden_size, eps = 576, 1e-5
    weight = (torch.rand(hidden_size) + 0.5).to(dtype)
    ours, theirs = RMSNorm(hidden_size, eps).to(dtype), LlamaRMSNorm(hidden_size, eps).to(dtype)
    with torch.no_grad():
        ours.weight.copy_(weight)
        theirs.weight.copy_(weight)
    x = (torch.randn(num_tokens, hidden_size) * 3).to(dtype)

    assert torch.equal(ours(x), theirs(x))
