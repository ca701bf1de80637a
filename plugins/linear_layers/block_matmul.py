"""GGUF block weights multiplied as stored: the layout of :file:`block_matmul.c` and its layer.

The kernel reads each weight's codes and float16 scales from units of 16
output columns by one block of 32 inputs (the C file explains the layout
and the arithmetic). :func:`pack_units` lays a :class:`BlockQuantized`
weight out in those units once, at load time (the C file's packer writes the
codes, so that the layout is defined in one place); :class:`KernelBlockLinear` then multiplies
bfloat16 or float32 activations by it at every batch size, so no dense copy of the
weight is kept and nothing is repacked for torch's int4 kernel. The
activations are quantized to int8 a block of 32 (as llama.cpp's q8_0 / q8_1
are) and meet the codes in VNNI's byte dot product (or, from 48 rows on a CPU
with AMX, in AMX's tile product, to the same bits): each input moves by at
most max |x| / 254 of its block.

The kernel is built at the instruction-set level in use (:func:`level_in_use`)
and used where that level has vector code for it (x86's AVX2, AVX-512 VNNI and AMX,
aarch64's NEON, dotprod and i8mm; every level computes the same bits) and the model
computes in bfloat16 or float32; at the portable level the linear methods keep torch's
kernels (see :func:`load_block_matmul`).

float32 rows take the bfloat16 path's steps (a bfloat16 row widened to float32
gives the same quantized blocks) and keep its float32 sums unrounded: they are
what a bfloat16 call would round to its output. With torch's int4 kernel a
float32 model's activations stay float32 through the products (its output
equals the dequantized weights' to about 1e-4); here they are quantized to int8
a block, as in bfloat16.
"""

from __future__ import annotations

import ctypes
import functools
import logging
from pathlib import Path

import torch
from torch import nn

from tercet.plugin_api import IsaLevel, NativeBuildError, NativeMatmul, NativeSource, level_in_use, load_native_library
from tercet.plugin_api.model import BLOCK_SIZE, BlockQuantized

logger = logging.getLogger(__name__)

SOURCE = NativeSource(__package__, "block_matmul.c", "block_matmul")
# The kernel's test build: the portable C path on any CPU.
PORTABLE_SOURCE = NativeSource(__package__, "block_matmul.c", "block_matmul_portable",
                               (*SOURCE.flags, "-DTERCET_PORTABLE"))
COLUMNS = 16
KIND_CODES = {"Q4_0": 0, "Q4_1": 0, "Q8_0": 1}
# What the kernel's nonzero returns mean.
KERNEL_FAILURES = {1: MemoryError("the block matmul kernel could not allocate its scratch memory"),
                   2: ValueError("the block matmul kernel was handed shapes that do not fit its layout")}


# Each activation dtype the kernel takes: its function's name (the ``_on`` variant adds the choice of
# integer sums, 1: AMX where there is AMX, 0: VNNI, for tests and benchmarks) and its NativeMatmul name.
FUNCTIONS = {torch.bfloat16: ("tercet_block_matmul", "bfloat16"), torch.float32: ("tercet_block_matmul_f32", "float32")}


def _bind(library: ctypes.CDLL) -> ctypes.CDLL:
    arguments = [
        ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p,
        ctypes.c_int, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64,
    ]
    for name, _ in FUNCTIONS.values():
        for function, extra in ((getattr(library, name), []), (getattr(library, f"{name}_on"), [ctypes.c_int])):
            function.restype = ctypes.c_int
            function.argtypes = [*arguments, *extra]
    library.tercet_block_matmul_amx.restype = ctypes.c_int
    library.tercet_block_pack.restype = None
    return library


def load_kernel(source: NativeSource = SOURCE, cache_dir: Path | None = None,
                level: IsaLevel | None = None) -> ctypes.CDLL:
    """The kernel's library at ``level`` (default: the level in use), built first if this machine has no
    copy yet (raises NativeBuildError)."""
    return _bind(load_native_library(source, cache_dir, level=level))


def load_block_matmul() -> ctypes.CDLL | None:
    """The kernel's library where the level in use has vector code for it, else None (the log says why,
    once per process and level)."""
    return _load_at(level_in_use())


@functools.cache
def _load_at(level: IsaLevel) -> ctypes.CDLL | None:
    try:
        library = load_native_library(SOURCE, level=level)
    except NativeBuildError as error:
        logger.warning("GGUF block weights run on torch's kernels: %s", error)
        return None
    if not library.tercet_block_matmul_vectorized():
        logger.info("GGUF block weights run on torch's kernels: the block kernel has no vector code at level %s "
                    "(%s)", level.name, level.summary)
        return None
    logger.info("GGUF block weights run on the block kernel at level %s", level.name)
    return _bind(library)


def pack_units(block: BlockQuantized, library: ctypes.CDLL) -> torch.Tensor:
    """``block`` in the kernel's units: uint8 ``[ceil(N / 16), K / 32, unit bytes]``, codes then float16
    scales; ``library`` (the kernel's) lays them out in the order it reads them."""
    rows, columns = block.shape
    tiles, blocks = -(-rows // COLUMNS), columns // BLOCK_SIZE
    is_q8 = block.type_name == "Q8_0"
    units = torch.empty(tiles, blocks, (512 + 2 * COLUMNS) if is_q8 else (256 + 4 * COLUMNS), dtype=torch.uint8)
    codes = block.codes.contiguous()
    scales = block.scales.to(torch.float16).contiguous()
    # Q4_0 has no min: d (q - 8) is d q + (-8 d), exact in float16.
    mins = None if is_q8 else (block.mins if block.mins is not None else -8 * block.scales).to(torch.float16)
    mins = None if mins is None else mins.contiguous()
    library.tercet_block_pack(
        ctypes.c_void_p(codes.data_ptr()), ctypes.c_void_p(scales.data_ptr()),
        ctypes.c_void_p(None if mins is None else mins.data_ptr()), ctypes.c_int64(rows), ctypes.c_int64(columns),
        ctypes.c_int(KIND_CODES[block.type_name]), ctypes.c_void_p(units.data_ptr()),
    )
    return units


class KernelBlockLinear(nn.Module):
    """A Q4_0 / Q4_1 / Q8_0 weight run through the block kernel, ``dtype`` (bfloat16 or float32) in and out."""

    # A row's output does not depend on the other rows of the call (model.deterministic).
    batch_invariant = True

    def __init__(self, block: BlockQuantized, bias: torch.Tensor | None, library: ctypes.CDLL,
                 dtype: torch.dtype = torch.bfloat16):
        super().__init__()
        self.out_features, self.in_features = block.shape
        self.type_name = block.type_name
        self.units = pack_units(block, library)
        self.units_pointer = self.units.data_ptr()
        self.kind_code = KIND_CODES[block.type_name]
        self.dtype = dtype
        name, self.dtype_name = FUNCTIONS[dtype]
        self.kernel = getattr(library, name)
        self.bias = None if bias is None else nn.Parameter(bias.detach().to(dtype), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Called about 120 times a decode step: the common case (2-D rows of the layer's dtype) takes no detours.
        rows = x if x.dim() == 2 else x.reshape(-1, self.in_features)
        if rows.dtype != self.dtype or rows.stride(1) != 1:
            rows = rows.to(self.dtype).contiguous()
        count = rows.shape[0]
        out = torch.empty((count, self.out_features), dtype=self.dtype)
        status = count and self.kernel(rows.data_ptr(), rows.stride(0), count, self.in_features, self.units_pointer,
                                       self.kind_code, self.out_features, out.data_ptr(), self.out_features)
        if status:
            raise KERNEL_FAILURES[status]
        if self.bias is not None:
            out = out + self.bias
        return out if x.dim() == 2 else out.view(*x.shape[:-1], self.out_features)

    def native_matmul(self) -> NativeMatmul | None:
        """This layer for a caller in C (the model's layers in one call); none with a bias, which the kernel does not add."""
        if self.bias is not None:
            return None
        # Any number of rows: a float32 model's one call then takes its prompts too.
        return NativeMatmul(ctypes.cast(self.kernel, ctypes.c_void_p).value, self.units_pointer, self.kind_code,
                            self.out_features, self.in_features, self.dtype_name)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, {self.type_name}, "
                f"block kernel, {self.dtype_name}")
