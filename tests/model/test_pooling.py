"""Pooling flattened hidden states, against the same arithmetic done sequence by sequence."""

import pytest
import torch
import torch.nn.functional as F

from tercet.formats.pooling_spec import Pooling
from tercet.model.pooling import pool_hidden_states

SEQ_LENS = [3, 1, 5]


def per_sequence(hidden, method):
    rows = hidden.split(SEQ_LENS)
    pick = {"mean": lambda r: r.mean(0), "max": lambda r: r.max(0).values, "cls": lambda r: r[0], "last": lambda r: r[-1]}
    return torch.stack([pick[method](r) for r in rows])


@pytest.mark.parametrize("method", ["mean", "max", "cls", "last"])
@pytest.mark.parametrize("normalize", [False, True])
def test_each_method_pools_each_sequence_alone(method, normalize):
    torch.manual_seed(0)
    hidden = torch.randn(sum(SEQ_LENS), 6, dtype=torch.bfloat16)
    expected = per_sequence(hidden.float(), method)
    if normalize:
        expected = F.normalize(expected, dim=1)
    pooled = pool_hidden_states(hidden, SEQ_LENS, Pooling(method, normalize, "test"))
    assert pooled.dtype == torch.float32
    assert torch.allclose(pooled, expected, atol=1e-6)
    if normalize:
        assert torch.allclose(pooled.norm(dim=1), torch.ones(len(SEQ_LENS)))
