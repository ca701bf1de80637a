"""GGUF tensors as torch tensors: plain floats, or 32-element quantization blocks kept unpacked.

A block-quantized weight ``[N, K]`` is held as one small integer code per
element plus a float32 scale (and, for Q4_1, a minimum) per 32-element block
of a row. That keeps the file's numbers exactly, costs one byte per element
instead of four, and lets a row permutation or concatenation (q/k/v fusion,
the rotary un-permutation) act on codes and scales alike without ever
dequantizing.

The block layouts (ggml's, little-endian):
  Q4_0  18 bytes: float16 d, 16 bytes of nibbles; x = d * (q - 8)
  Q4_1  20 bytes: float16 d, float16 m, 16 bytes of nibbles; x = d * q + m
  Q8_0  34 bytes: float16 d, 32 int8; x = d * q
In a nibble byte ``j`` the low nibble is element ``j`` and the high nibble is
element ``j + 16`` of the block.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from tercet.errors import ConfigError
from tercet.formats.gguf_file import GgufError, GgufFile

SUPPORTED_TENSOR_TYPES = ("F32", "F16", "BF16", "Q4_0", "Q4_1", "Q8_0")
BLOCK_SIZE = 32
BLOCK_TYPES = ("Q4_0", "Q4_1", "Q8_0")
_BLOCK_BYTES = {"Q4_0": 18, "Q4_1": 20, "Q8_0": 34}
_FLOAT_DTYPES = {"F32": np.float32, "F16": np.float16}
# Rows quantized at once: bounds quantize_blocks' float temporaries to a few
# tens of megabytes whatever the weight's size.
_QUANTIZE_CHUNK_ELEMENTS = 1 << 22


# eq=False: a generated __eq__ would compare tensors elementwise and fail on
# truth-testing; two BlockQuantized are the same only if they are one object.
@dataclass(frozen=True, eq=False)
class BlockQuantized:
    type_name: str  # "Q4_0" | "Q4_1" | "Q8_0"
    codes: torch.Tensor  # [N, K]: uint8 in 0..15 for Q4_*, int8 for Q8_0
    scales: torch.Tensor  # float32 [N, K // 32], each block's d
    mins: torch.Tensor | None  # float32 [N, K // 32], each block's m (Q4_1 only)

    def __post_init__(self):
        if self.type_name not in BLOCK_TYPES:
            raise ValueError(f"block type {self.type_name!r} is not one of {', '.join(BLOCK_TYPES)}")
        if self.codes.dim() != 2 or self.codes.shape[1] % BLOCK_SIZE:
            raise ValueError(f"codes must be [N, K] with K a multiple of {BLOCK_SIZE}, not {tuple(self.codes.shape)}")
        block_shape = (self.codes.shape[0], self.codes.shape[1] // BLOCK_SIZE)
        if tuple(self.scales.shape) != block_shape:
            raise ValueError(f"scales are {tuple(self.scales.shape)}, expected {block_shape}")
        if (self.mins is not None) != (self.type_name == "Q4_1"):
            raise ValueError(f"{self.type_name} {'needs' if self.type_name == 'Q4_1' else 'has no'} mins")
        if self.mins is not None and tuple(self.mins.shape) != block_shape:
            raise ValueError(f"mins are {tuple(self.mins.shape)}, expected {block_shape}")

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.codes.shape)

    def dequantize(self) -> torch.Tensor:
        """float32 ``[N, K]``, the same floats as ggml's reference dequantization."""
        rows, columns = self.shape
        values = self.codes.to(torch.float32).view(rows, columns // BLOCK_SIZE, BLOCK_SIZE)
        if self.type_name == "Q4_0":
            values.sub_(8.0)  # exact: small integers
        # Multiply, then add, as two roundings: the reference does not fuse them.
        values.mul_(self.scales.unsqueeze(-1))
        if self.mins is not None:
            values.add_(self.mins.unsqueeze(-1))
        return values.view(rows, columns)

    def rows(self, index: torch.Tensor) -> BlockQuantized:
        """These rows, selected or reordered by ``index`` along N."""
        return BlockQuantized(
            self.type_name,
            _select_rows(self.codes, index),
            self.scales[index],
            None if self.mins is None else self.mins[index],
        )

    @staticmethod
    def concat(parts: list[BlockQuantized]) -> BlockQuantized:
        """The parts stacked along N; they must share a type and a row length."""
        if not parts:
            raise ValueError("concat needs at least one part")
        first = parts[0]
        for part in parts[1:]:
            if part.type_name != first.type_name or part.shape[1] != first.shape[1]:
                raise ValueError(
                    f"cannot concatenate {part.type_name} {part.shape} onto {first.type_name} {first.shape}"
                )
        return BlockQuantized(
            first.type_name,
            torch.cat([part.codes for part in parts]),
            torch.cat([part.scales for part in parts]),
            None if first.mins is None else torch.cat([part.mins for part in parts]),
        )


def _select_rows(codes: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``codes[index]``, moved 8 bytes at a time: torch indexes one-byte elements one by one (the
    q and k rows of the default model took 1 s of every start that way, against 10 ms)."""
    if not codes.is_contiguous():
        codes = codes.contiguous()
    return torch.index_select(codes.view(torch.int64), 0, index).view(codes.dtype)


def read_tensor(gguf: GgufFile, name: str) -> torch.Tensor | BlockQuantized:
    """A tensor of the file as a torch tensor (F32/F16/BF16, copied) or a :class:`BlockQuantized`."""
    raw = gguf.tensor_bytes(name)
    tensor = gguf.tensors[name]
    if tensor.type_name in _FLOAT_DTYPES:
        array = raw.view(_FLOAT_DTYPES[tensor.type_name]).reshape(tensor.shape)
        return torch.from_numpy(np.array(array))
    if tensor.type_name == "BF16":
        # numpy has no bfloat16: carry the bits as int16 and reinterpret them in torch.
        bits = np.array(raw.view(np.int16).reshape(tensor.shape))
        return torch.from_numpy(bits).view(torch.bfloat16)
    if tensor.type_name in BLOCK_TYPES:
        if len(tensor.shape) != 2:
            raise GgufError(
                f"{gguf.path}: tensor {name!r} is {tensor.type_name} with shape {tensor.shape}; "
                "tercet reads block-quantized tensors only as 2-D weights"
            )
        return _unpack_blocks(raw, tensor.type_name, *tensor.shape)
    raise GgufError(
        f"{gguf.path}: tensor {name!r} has type {tensor.type_name}, which tercet cannot read; "
        f"supported: {', '.join(SUPPORTED_TENSOR_TYPES)}"
    )


def _unpack_blocks(raw: np.ndarray, type_name: str, rows: int, columns: int) -> BlockQuantized:
    num_blocks = columns // BLOCK_SIZE
    blocks = raw.reshape(rows, num_blocks, _BLOCK_BYTES[type_name])
    scales = _float16_field(blocks, 0)
    mins = _float16_field(blocks, 2) if type_name == "Q4_1" else None
    if type_name == "Q8_0":
        codes = np.array(blocks[:, :, 2:].view(np.int8)).reshape(rows, columns)
    else:
        nibbles = blocks[:, :, -BLOCK_SIZE // 2 :]
        codes = np.empty((rows, num_blocks, BLOCK_SIZE), dtype=np.uint8)
        # Written straight into their halves of each block: no temporaries.
        np.bitwise_and(nibbles, 0x0F, out=codes[:, :, : BLOCK_SIZE // 2])
        np.right_shift(nibbles, 4, out=codes[:, :, BLOCK_SIZE // 2 :])
        codes = codes.reshape(rows, columns)
    return BlockQuantized(type_name, torch.from_numpy(codes), scales, mins)


def _float16_field(blocks: np.ndarray, byte_offset: int) -> torch.Tensor:
    """The float16 at ``byte_offset`` of every block, as float32 ``[rows, blocks]``."""
    halves = np.array(blocks[:, :, byte_offset : byte_offset + 2]).view(np.float16)[:, :, 0]
    return torch.from_numpy(halves.astype(np.float32))


def quantize_blocks(weight: torch.Tensor, type_name: str) -> BlockQuantized:
    """Quantize a float ``[N, K]`` weight with ggml's reference rounding, d (and m) stored as float16."""
    if type_name not in BLOCK_TYPES:
        raise ConfigError(f"cannot quantize to {type_name!r}; supported: {', '.join(BLOCK_TYPES)}")
    if weight.dim() != 2 or weight.shape[1] % BLOCK_SIZE:
        raise ConfigError(
            f"cannot quantize a weight of shape {tuple(weight.shape)} to {type_name}: it must be [N, K] "
            f"with K a multiple of the block size {BLOCK_SIZE}"
        )
    rows, columns = weight.shape
    num_blocks = columns // BLOCK_SIZE
    codes = torch.empty((rows, columns), dtype=torch.int8 if type_name == "Q8_0" else torch.uint8)
    scales = torch.empty((rows, num_blocks), dtype=torch.float32)
    mins = torch.empty((rows, num_blocks), dtype=torch.float32) if type_name == "Q4_1" else None
    chunk_rows = max(1, _QUANTIZE_CHUNK_ELEMENTS // max(columns, 1))
    for start in range(0, rows, chunk_rows):
        stop = min(rows, start + chunk_rows)
        blocks = weight[start:stop].detach().to("cpu", torch.float32).reshape(stop - start, num_blocks, BLOCK_SIZE)
        chunk_codes, chunk_scales, chunk_mins = _QUANTIZERS[type_name](blocks)
        codes[start:stop] = chunk_codes.reshape(stop - start, columns)
        scales[start:stop] = chunk_scales
        if mins is not None:
            mins[start:stop] = chunk_mins
    return BlockQuantized(type_name, codes, scales, mins)


def _as_stored(values: torch.Tensor) -> torch.Tensor:
    """Rounded to float16, as the file stores a block's d and m, and back to float32."""
    return values.to(torch.float16).to(torch.float32)


def _reciprocal_or_zero(d: torch.Tensor) -> torch.Tensor:
    # An all-zero block has d == 0; the reference then scales by 0, not inf.
    return torch.where(d == 0, torch.zeros_like(d), 1.0 / d)


def _round_half_away_from_zero(x: torch.Tensor) -> torch.Tensor:
    """C's roundf, exactly (torch.round rounds halves to even): x - trunc(x) is exact in floats."""
    whole = x.trunc()
    return whole + torch.where((x - whole).abs() >= 0.5, x.sign(), torch.zeros_like(x))


def _quantize_q8_0(blocks: torch.Tensor):
    d = blocks.abs().amax(dim=-1) / 127
    # Codes come from the unrounded d, as in the reference; only the stored d is float16.
    codes = _round_half_away_from_zero(blocks * _reciprocal_or_zero(d).unsqueeze(-1))
    return codes.clamp_(-127, 127).to(torch.int8), _as_stored(d), None


def _quantize_q4_0(blocks: torch.Tensor):
    # The signed value of largest magnitude (the first, on ties) maps to code 0, i.e. -8 * d.
    extreme = blocks.gather(-1, blocks.abs().argmax(dim=-1, keepdim=True)).squeeze(-1)
    d = extreme / -8
    scaled = blocks * _reciprocal_or_zero(d).unsqueeze(-1)
    # + 8.5 then truncation is the reference's rounding (values are >= 0 here, so trunc is floor).
    codes = (scaled + 8.5).trunc_().clamp_(max=15)
    return codes.to(torch.uint8), _as_stored(d), None


def _quantize_q4_1(blocks: torch.Tensor):
    low = blocks.amin(dim=-1)
    high = blocks.amax(dim=-1)
    d = (high - low) / 15
    scaled = (blocks - low.unsqueeze(-1)) * _reciprocal_or_zero(d).unsqueeze(-1)
    codes = (scaled + 0.5).trunc_().clamp_(max=15)
    return codes.to(torch.uint8), _as_stored(d), _as_stored(low)


_QUANTIZERS = {"Q8_0": _quantize_q8_0, "Q4_0": _quantize_q4_0, "Q4_1": _quantize_q4_1}
