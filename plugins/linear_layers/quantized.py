"""Linear layers over weights kept quantized: torch's weight-only kernels, on CPU and CUDA.

- :class:`Int4BlockLinear`: 4-bit codes in groups of 32 along the input, each
  group with a scale and a zero (``w = (q - 8) * scale + zero``). That is
  GGUF's Q4_0 (``d * (q - 8)``: zero 0) and Q4_1 (``d * q + m``: zero
  ``m + 8d``) exactly, so those files run straight from their blocks.
- :class:`Int8ChannelLinear`: int8 codes with one scale per output channel.
- :class:`Int8BlockLinear`: GGUF's Q8_0 (int8 codes, a scale per 32). torch
  has no int8 kernel with group scales, so on CPU each code is split into
  two 4-bit halves, ``q = 16 * hi + lo``, and both halves go through the
  int4 kernel as one matmul over twice the input width (``x`` repeated):
  ``hi`` groups get scale ``16d``, ``lo`` groups scale ``d`` and zero ``8d``.
  The codes are exact; the weights take the same byte per element.

The CPU int4 kernel wants its scales in the activations' dtype, so they
are rounded to bfloat16 when the model runs in bfloat16 (GGUF stores them
in float16): the dequantized reference differs from these layers by that
rounding, which the tests bound. The CUDA kernels take bfloat16 only.
"""

from __future__ import annotations

import torch
from torch import nn

from tercet.plugin_api.model import BLOCK_SIZE, BlockQuantized
from tercet.plugins.linear_layers.packed_bf16 import PackedLinear, can_pack

# Tiles of 16 along K that the CUDA int4 packing groups; 2 needs K % 32 == 0 only.
CUDA_INNER_K_TILES = 2
# Rows converted at a time at load: bounds the int16/int32/float copies that
# conversion makes (the LM head whole would take hundreds of MB, which the
# allocator then keeps). The CPU int4 packing works on blocks of 64 rows, so
# chunks of a multiple of 64 pack to the same bytes as the whole.
LOAD_CHUNK_ROWS = 64 * 64


class _QuantizedLinear(nn.Module):
    def __init__(self, out_features: int, in_features: int, bias: torch.Tensor | None, dtype: torch.dtype):
        super().__init__()
        self.out_features, self.in_features = out_features, in_features
        self.bias = None if bias is None else nn.Parameter(bias.detach().to(dtype), requires_grad=False)
        self.dense: nn.Module | None = None
        self.dense_from_rows = 0

    def keep_dense_copy(self, weight: torch.Tensor, dtype: torch.dtype, device: torch.device, from_rows: int) -> None:
        """Run inputs of ``from_rows`` rows or more on ``weight`` widened to ``dtype``.

        torch's weight-only CPU kernels are GEMV-shaped: past a few rows dense
        bfloat16 wins (from 8 rows for the default model's layers, 4.3x at
        128; see benchmarks/linear_kernels.py), at 2 bytes a weight more."""
        layer = nn.Linear(self.in_features, self.out_features, bias=False, device="meta")
        layer.weight = nn.Parameter(weight.to(device, dtype), requires_grad=False)
        self.dense = PackedLinear(layer) if can_pack(device, dtype) else layer
        self.dense_from_rows = from_rows

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features)
        if self.dense is not None and rows.shape[0] >= self.dense_from_rows:
            out = self.dense(rows)
        else:
            out = self.matmul(rows if rows.is_contiguous() else rows.contiguous())
        if self.bias is not None:
            out = out + self.bias
        return out.view(*x.shape[:-1], self.out_features)

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def _scales_and_zeros(scales: torch.Tensor, zeros: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    # The kernels' layout: [K / group, N, 2], scale then zero.
    return torch.stack([scales.t(), zeros.t()], dim=-1).to(dtype).contiguous()


def _row_chunks(num_rows: int):
    return (slice(start, min(start + LOAD_CHUNK_ROWS, num_rows)) for start in range(0, num_rows, LOAD_CHUNK_ROWS))


def _pack_int4(codes_of, num_rows: int, device: torch.device) -> torch.Tensor:
    """Codes in 0..15 packed for the int4 kernel of ``device``; ``codes_of(rows)`` gives a slice of rows."""
    if device.type == "cuda":
        pairs = codes_of(slice(0, num_rows)).to(torch.uint8)
        packed = (pairs[:, 0::2] << 4) | pairs[:, 1::2]
        return torch._convert_weight_to_int4pack(packed.to(device), CUDA_INNER_K_TILES)
    return torch.cat([
        torch._convert_weight_to_int4pack_for_cpu(codes_of(rows).to(torch.int32).contiguous(), 1)
        for rows in _row_chunks(num_rows)
    ])


def dequantized_in_chunks(block: BlockQuantized, dtype: torch.dtype) -> torch.Tensor:
    """``block.dequantize()`` in ``dtype``, converted a chunk of rows at a time."""
    out = torch.empty(block.shape, dtype=dtype)
    for rows in _row_chunks(block.shape[0]):
        index = torch.arange(rows.start, rows.stop)
        out[rows] = block.rows(index).dequantize().to(dtype)
    return out


def _int4_matmul(x: torch.Tensor, packed: torch.Tensor, scales_and_zeros: torch.Tensor) -> torch.Tensor:
    if x.device.type == "cuda":
        return torch._weight_int4pack_mm(x, packed, BLOCK_SIZE, scales_and_zeros)
    return torch._weight_int4pack_mm_for_cpu(x, packed, BLOCK_SIZE, scales_and_zeros)


class Int4BlockLinear(_QuantizedLinear):
    """Q4_0 / Q4_1 blocks through torch's int4 weight-only kernel."""

    def __init__(self, block: BlockQuantized, bias: torch.Tensor | None, dtype: torch.dtype, device: torch.device):
        out_features, in_features = block.shape
        super().__init__(out_features, in_features, bias, dtype)
        scales = block.scales
        zeros = torch.zeros_like(scales) if block.mins is None else block.mins + 8 * scales
        self.packed = _pack_int4(lambda rows: block.codes[rows], out_features, device)
        self.scales_and_zeros = _scales_and_zeros(scales, zeros, dtype).to(device)

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        return _int4_matmul(x, self.packed, self.scales_and_zeros)


class Int8BlockLinear(_QuantizedLinear):
    """Q8_0 blocks: on CPU as two 4-bit halves through the int4 kernel (see the module's text)."""

    def __init__(self, block: BlockQuantized, bias: torch.Tensor | None, dtype: torch.dtype, device: torch.device):
        out_features, in_features = block.shape
        super().__init__(out_features, in_features, bias, dtype)
        self.on_cuda = device.type == "cuda"
        if self.on_cuda:
            # No grouped int8 kernel on CUDA either: keep the codes and scales,
            # and widen one layer's weight at a time in the forward.
            self.codes = block.codes.to(device)
            self.scales = block.scales.to(device, dtype)
            return
        scales = torch.cat([16 * block.scales, block.scales], dim=1)
        zeros = torch.cat([torch.zeros_like(block.scales), 8 * block.scales], dim=1)
        self.packed = _pack_int4(lambda rows: _split_into_halves(block.codes[rows]), out_features, device)
        self.scales_and_zeros = _scales_and_zeros(scales, zeros, dtype)

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        if self.on_cuda:
            num_blocks = self.in_features // BLOCK_SIZE
            weight = self.codes.view(self.out_features, num_blocks, BLOCK_SIZE).to(x.dtype) * self.scales[..., None]
            return torch.nn.functional.linear(x, weight.view(self.out_features, self.in_features))
        return _int4_matmul(torch.cat([x, x], dim=1), self.packed, self.scales_and_zeros)


def _split_into_halves(codes: torch.Tensor) -> torch.Tensor:
    """int8 codes ``[N, K]`` as 4-bit codes ``[N, 2K]``: ``q = 16 * (high - 8) + low``."""
    codes = codes.to(torch.int16)
    high = torch.div(codes, 16, rounding_mode="floor")  # -8..7
    return torch.cat([high + 8, codes - 16 * high], dim=1)


class Int8ChannelLinear(_QuantizedLinear):
    """int8 codes with one scale per output channel, made from a dense weight at load time."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, dtype: torch.dtype, device: torch.device):
        out_features, in_features = weight.shape
        super().__init__(out_features, in_features, bias, dtype)
        codes, scales = quantize_per_channel(weight)
        self.codes = codes.to(device)
        self.scales = scales.to(device, dtype)

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type == "cuda":
            # int8 codes are exact in bfloat16; the scale applies per output column.
            return torch.nn.functional.linear(x, self.codes.to(x.dtype)) * self.scales
        return torch._weight_int8pack_mm(x, self.codes, self.scales)

    def dequantized(self) -> torch.Tensor:
        return self.codes.float() * self.scales.float()[:, None]


def quantize_per_channel(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 codes and float32 scales (``amax / 127``) per row of ``weight``."""
    weight = weight.float()
    scales = weight.abs().amax(dim=1).clamp(min=torch.finfo(torch.float32).tiny) / 127
    codes = torch.round(weight / scales[:, None]).clamp(-127, 127).to(torch.int8)
    return codes, scales
