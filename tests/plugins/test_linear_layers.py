"""Each built-in linear method against its own dequantized weights, and the misfits it refuses."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tercet.errors import ConfigError
from tercet.formats.gguf_blocks import quantize_blocks
from tercet.model.linear_method import LinearTarget
from tercet.plugin_host.manager import PluginRegistries, create_plugin_manager
from tercet.plugins.linear_layers.block_matmul import KernelBlockLinear, load_block_matmul
from tercet.plugins.linear_layers.methods import BlockLinearMethod, DenseLinearMethod, Int8LinearMethod
from tercet.plugins.linear_layers.quantized import Int8ChannelLinear, quantize_per_channel

CPU = torch.device("cpu")


def _target(dtype=torch.float32, **settings) -> LinearTarget:
    return LinearTarget("model.layers.0.mlp.down_proj", dtype, CPU, **settings)


@pytest.fixture(scope="module")
def weight():
    torch.manual_seed(0)
    return torch.randn(96, 128) * 0.05


@pytest.fixture(scope="module")
def inputs():
    torch.manual_seed(1)
    return torch.randn(5, 128)


def test_every_built_in_method_is_registered_as_a_plugin():
    registry = PluginRegistries.from_plugin_manager(create_plugin_manager()).linear_methods
    assert registry.names() == ["dense", "int8", "q4_0", "q4_1", "q8_0"]
    assert {registry.entries[name].plugin_name for name in registry.names()} == {
        "dense_linear", "int8_linear", "gguf_block_linear"
    }
    assert registry.get("q4_1")().weight_format == "q4_1"


@pytest.mark.parametrize("type_name", ["Q4_0", "Q4_1", "Q8_0"])
def test_a_block_layer_on_torchs_kernels_in_float32_equals_its_dequantized_weight(weight, inputs, type_name):
    block = quantize_blocks(weight, type_name)
    bias = torch.randn(96)
    layer = BlockLinearMethod(type_name).create(block, bias, _target(native_kernels=False))
    assert not isinstance(layer, KernelBlockLinear)
    expected = inputs @ block.dequantize().t() + bias
    # The int4 kernel in float32 accumulates in another order than the reference; nothing else differs.
    torch.testing.assert_close(layer(inputs), expected, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("type_name", ["Q4_0", "Q4_1", "Q8_0"])
def test_a_block_layer_in_float32_runs_on_the_block_kernel_where_it_runs(weight, inputs, type_name):
    block = quantize_blocks(weight, type_name)
    bias = torch.randn(96)
    layer = BlockLinearMethod(type_name).create(block, bias, _target())
    assert isinstance(layer, KernelBlockLinear) == (load_block_matmul() is not None)
    out = layer(inputs)
    expected = inputs @ block.dequantize().t() + bias
    # The block kernel quantizes x to int8 a block (tests/plugins/test_block_matmul.py bounds it exactly).
    relative = (out - expected).norm() / expected.norm()
    assert out.dtype == torch.float32 and relative < 0.01


@pytest.mark.parametrize("native_kernels", [True, False], ids=["block kernel where it runs", "torch's kernels"])
@pytest.mark.parametrize("type_name", ["Q4_0", "Q4_1", "Q8_0"])
def test_a_block_layer_in_bfloat16_stays_within_the_rounding_of_its_scales(weight, inputs, type_name, native_kernels):
    block = quantize_blocks(weight, type_name)
    layer = BlockLinearMethod(type_name).create(block, None, _target(torch.bfloat16, native_kernels=native_kernels))
    assert isinstance(layer, KernelBlockLinear) == (native_kernels and load_block_matmul() is not None)
    out = layer(inputs.bfloat16()).float()
    expected = inputs.bfloat16().float() @ block.dequantize().t()
    relative = (out - expected).norm() / expected.norm()
    assert out.dtype == torch.float32 and relative < 0.01


def test_q8_0_is_exact_through_the_split_into_two_four_bit_halves(inputs):
    # Codes at the extremes (-128, 127) and every value between.
    torch.manual_seed(2)
    weight = torch.randn(64, 128)
    block = quantize_blocks(weight, "Q8_0")
    codes = block.codes.clone()
    codes[0, :32] = -128
    codes[1, :32] = 127
    codes[2, :] = torch.arange(-128, 128).view(2, 128)[0]
    block = type(block)(block.type_name, codes, block.scales, block.mins)
    layer = BlockLinearMethod("Q8_0").create(block, None, _target(native_kernels=False))
    torch.testing.assert_close(layer(inputs), inputs @ block.dequantize().t(), atol=1e-4, rtol=1e-5)


def test_a_gguf_tensor_in_the_methods_own_format_is_used_as_shipped(weight):
    block = quantize_blocks(weight, "Q4_1")
    assert BlockLinearMethod("Q4_1").accepts_as_is(block)
    assert not BlockLinearMethod("Q4_0").accepts_as_is(block)
    assert not BlockLinearMethod("Q4_1").accepts_as_is(weight)


def test_int8_per_channel_equals_its_dequantized_weight(weight, inputs):
    layer = Int8LinearMethod().create(weight, None, _target(torch.bfloat16))
    assert isinstance(layer, Int8ChannelLinear) and layer.codes.dtype == torch.int8
    codes, scales = quantize_per_channel(weight)
    # Per-channel int8 keeps every weight within half a step of its row's scale.
    assert ((codes.float() * scales[:, None] - weight).abs() <= scales[:, None] / 2 + 1e-7).all()
    assert torch.equal(layer.codes, codes)
    dequantized = layer.dequantized()  # with the scales as the layer holds them (bfloat16)
    expected = inputs.bfloat16().float() @ dequantized.t()
    out = layer(inputs.bfloat16()).float()
    assert ((out - expected).norm() / expected.norm()) < 0.01


def test_per_channel_codes_use_the_full_range():
    codes, scales = quantize_per_channel(torch.tensor([[1.0, -2.0, 0.5], [0.0, 0.0, 0.0]]))
    assert codes[0].tolist() == [64, -127, 32]
    assert codes[1].tolist() == [0, 0, 0] and scales[1] > 0


def test_dense_keeps_the_weight_and_dequantizes_blocks(weight, inputs):
    layer = DenseLinearMethod().create(weight, None, _target())
    assert isinstance(layer, nn.Linear)
    torch.testing.assert_close(layer(inputs), inputs @ weight.t())
    block = quantize_blocks(weight, "Q4_1")
    from_block = DenseLinearMethod().create(block, None, _target())
    torch.testing.assert_close(from_block.weight, block.dequantize())


def test_a_weight_whose_width_is_not_a_multiple_of_the_block_is_refused():
    with pytest.raises(ConfigError, match=r"q4_1.*down_proj.*100 is not a multiple of the block size 32"):
        BlockLinearMethod("Q4_1").check(64, 100, _target())


def test_from_dense_from_rows_on_a_quantized_layer_runs_on_its_dense_copy(weight, inputs):
    block = quantize_blocks(weight, "Q4_1")
    target = _target(torch.bfloat16, dense_from_rows=4, native_kernels=False)
    layer = BlockLinearMethod("Q4_1").create(block, None, target)
    assert layer.dense is not None
    few, many = inputs[:3].bfloat16(), inputs.bfloat16()
    # Below the threshold the int4 kernel, from it the dense copy: both are the same weights.
    assert not torch.equal(layer(few), layer.dense(few))
    assert torch.equal(layer(many), layer.dense(many))
    expected = many.float() @ block.dequantize().t()
    assert ((layer(many).float() - expected).norm() / expected.norm()) < 0.01
    without_copy = BlockLinearMethod("Q4_1").create(block, None, _target(torch.bfloat16, native_kernels=False))
    assert without_copy.dense is None
