"""The built-in linear methods: dense, int8 per channel, and GGUF's Q4_0, Q4_1 and Q8_0 blocks.

Each accepts any checkpoint tensor: one already in its format is used as it
is (a Q4_1 GGUF under ``q4_1``); any other is converted once at load time
(dequantized for ``dense``, quantized for the others).

The block methods run on tercet's block kernel (:mod:`.block_matmul`) on a
CPU where it has vector code (AVX2, AVX-512, NEON), in bfloat16 or float32,
and on torch's weight-only kernels elsewhere or with ``model.native_kernels =
false`` (with a dense copy for large batches, ``model.dense_from_rows``).
"""

from __future__ import annotations

import torch
from torch import nn

from tercet.plugin_api import ConfigError, LinearMethod, LinearTarget
from tercet.plugin_api.model import BLOCK_SIZE, BlockQuantized, CheckpointWeight, quantize_blocks
from tercet.plugins.linear_layers import few_rows_f32
from tercet.plugins.linear_layers.block_matmul import FUNCTIONS, KernelBlockLinear, load_block_matmul
from tercet.plugins.linear_layers.packed_bf16 import PackedLinear, can_pack
from tercet.plugins.linear_layers.quantized import (
    Int4BlockLinear,
    Int8BlockLinear,
    Int8ChannelLinear,
    dequantized_in_chunks,
)


def dense_of(weight: CheckpointWeight) -> torch.Tensor:
    return weight.dequantize() if isinstance(weight, BlockQuantized) else weight


class DenseLinearMethod(LinearMethod):
    """Full-precision weights in the model's dtype (oneDNN-packed for bfloat16 on CPU)."""

    weight_format = "dense"

    def check(self, out_features: int, in_features: int, target: LinearTarget) -> None:
        pass

    def accepts_as_is(self, weight: CheckpointWeight) -> bool:
        return not isinstance(weight, BlockQuantized)

    def create(self, weight: CheckpointWeight, bias: torch.Tensor | None, target: LinearTarget) -> nn.Module:
        dense = dense_of(weight)
        layer = nn.Linear(dense.shape[1], dense.shape[0], bias=bias is not None, device="meta")
        layer.weight = nn.Parameter(dense.to(target.device, target.dtype), requires_grad=False)
        if bias is not None:
            layer.bias = nn.Parameter(bias.to(target.device, target.dtype), requires_grad=False)
        if can_pack(target.device, target.dtype):
            return PackedLinear(layer)
        if few_rows_f32.can_use(target.device, target.dtype):
            layer.__class__ = few_rows_f32.FewRowsLinear
            layer.uses_kernel = target.native_kernels
        return layer


class Int8LinearMethod(LinearMethod):
    """Weight-only int8 with a scale per output channel, quantized from the checkpoint at load time."""

    weight_format = "int8"

    def check(self, out_features: int, in_features: int, target: LinearTarget) -> None:
        pass

    def create(self, weight: CheckpointWeight, bias: torch.Tensor | None, target: LinearTarget) -> nn.Module:
        layer = Int8ChannelLinear(dense_of(weight), bias, target.dtype, target.device)
        _keep_dense_copy(layer, layer.dequantized, target)
        return layer


class BlockLinearMethod(LinearMethod):
    """GGUF's block formats, run from their codes; ``type_name`` is "Q4_0", "Q4_1" or "Q8_0"."""

    def __init__(self, type_name: str):
        self.type_name = type_name
        self.weight_format = type_name.lower()

    def check(self, out_features: int, in_features: int, target: LinearTarget) -> None:
        if in_features % BLOCK_SIZE:
            raise ConfigError(
                f"quantization {self.weight_format!r} does not fit {target.name}: its input dimension "
                f"{in_features} is not a multiple of the block size {BLOCK_SIZE}"
            )
        if self.type_name.startswith("Q4") and target.device.type == "cuda" and out_features % 8:
            raise ConfigError(
                f"quantization {self.weight_format!r} on CUDA needs output dimensions that are multiples "
                f"of 8; {target.name} has {out_features}"
            )

    def accepts_as_is(self, weight: CheckpointWeight) -> bool:
        return isinstance(weight, BlockQuantized) and weight.type_name == self.type_name

    def create(self, weight: CheckpointWeight, bias: torch.Tensor | None, target: LinearTarget) -> nn.Module:
        self.check(weight.shape[0], weight.shape[1], target)
        if not self.accepts_as_is(weight):
            weight = quantize_blocks(dense_of(weight).float(), self.type_name)
        kernel = _block_kernel_for(target)
        if kernel is not None:
            return KernelBlockLinear(weight, bias, kernel, target.dtype)
        layer_type = Int8BlockLinear if self.type_name == "Q8_0" else Int4BlockLinear
        layer = layer_type(weight, bias, target.dtype, target.device)
        _keep_dense_copy(layer, lambda: dequantized_in_chunks(weight, target.dtype), target)
        return layer


def _block_kernel_for(target: LinearTarget):
    """The block kernel where it serves ``target`` (CPU, bfloat16 or float32, allowed, vectorized here), else None."""
    if not target.native_kernels or target.device.type != "cpu" or target.dtype not in FUNCTIONS:
        return None
    return load_block_matmul()


def _keep_dense_copy(layer, dequantized, target: LinearTarget) -> None:
    # Only where the quantized kernels lose at large batches: torch's CPU ones.
    if target.dense_from_rows > 0 and target.device.type == "cpu":
        layer.keep_dense_copy(dequantized(), target.dtype, target.device, target.dense_from_rows)
