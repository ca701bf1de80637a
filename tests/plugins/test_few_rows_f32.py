import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tercet.plugin_api import LinearTarget
from tercet.plugins.linear_layers.few_rows_f32 import MAX_ROWS, FewRowsLinear, can_use
from tercet.plugins.linear_layers.methods import DenseLinearMethod


def _few_rows(linear: nn.Linear) -> FewRowsLinear:
    layer = FewRowsLinear(linear.in_features, linear.out_features, bias=linear.bias is not None)
    layer.load_state_dict(linear.state_dict())
    return layer


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("rows", [1, 2, 5, MAX_ROWS, MAX_ROWS + 1, 40])
def test_matches_f_linear_to_float32_rounding(bias, rows):
    torch.manual_seed(0)
    linear = nn.Linear(96, 200, bias=bias)
    x = torch.randn(rows, 96)
    with torch.inference_mode():
        got, expected = _few_rows(linear)(x), linear(x)
    assert got.shape == expected.shape and got.is_contiguous()
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    if rows > MAX_ROWS:
        assert torch.equal(got, expected)  # F.linear itself past MAX_ROWS


def test_keeps_leading_dimensions_and_an_empty_input():
    torch.manual_seed(0)
    layer = _few_rows(nn.Linear(32, 48))
    x = torch.randn(2, 3, 32)
    with torch.inference_mode():
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-5)
        assert layer(torch.randn(0, 32)).shape == (0, 48)


def test_the_dense_method_uses_it_for_float32_on_cpu_only():
    assert can_use(torch.device("cpu"), torch.float32)
    assert not can_use(torch.device("cpu"), torch.bfloat16)
    assert not can_use(torch.device("cuda"), torch.float32)
    weight = torch.randn(16, 32)
    made = DenseLinearMethod().create(weight, None, LinearTarget("layer", torch.float32, torch.device("cpu")))
    assert isinstance(made, FewRowsLinear)
    assert torch.equal(made.weight, weight)
