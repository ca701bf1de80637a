"""The decode kernel, compiled once per machine and loaded with ctypes.

The C source ships in this package and is built by tercet's native build
(:func:`tercet.plugin_api.load_native_library`: the system's C compiler, at the
instruction-set level in use, into tercet's cache, once per source, compiler and level).
The served model's attention shape (query heads per KV head, head size) is
compiled in as constants, so each shape is its own small library.
No compiler, or one that fails, is a :class:`KernelUnavailable` with the
reason: the backend then runs as ``torch_native`` does, and says so once.
"""

from __future__ import annotations

import ctypes
from dataclasses import replace
from pathlib import Path

from tercet.plugin_api import AttentionLayout, IsaLevel, NativeBuildError, NativeSource, load_native_library

SOURCE = NativeSource(__package__, "decode_attention.c", "paged_decode_attention")
# The shapes whose query heads and sums fit the kernel's registers; others run its general loop.
SPECIALIZED_HEAD_DIMS = (64, 128)
MAX_SPECIALIZED_GROUP = 8
INT64_P = ctypes.POINTER(ctypes.c_int64)
# The flag that gives the kernel AVX512-BF16's dot products, which it takes for a bfloat16 cache (vec16_avx512.h).
BF16_DOT_FLAG = "-mavx512bf16"
KernelUnavailable = NativeBuildError


def source_for(layout: AttentionLayout | None) -> NativeSource:
    """The kernel's source with ``layout``'s shape compiled in, where the shape has a fast path."""
    if layout is None:
        return SOURCE
    group = layout.num_heads // layout.num_kv_heads
    if group > MAX_SPECIALIZED_GROUP or layout.head_dim not in SPECIALIZED_HEAD_DIMS:
        return SOURCE
    shape = (f"-DTERCET_ATTEND_GROUP={group}", f"-DTERCET_ATTEND_HEAD_DIM={layout.head_dim}")
    return replace(SOURCE, library_name=f"{SOURCE.library_name}_g{group}_d{layout.head_dim}",
                   flags=SOURCE.flags + shape)


def takes_bf16_dot_products(level: IsaLevel) -> bool:
    """Whether the kernel built at ``level`` runs a bfloat16 cache (head sizes that are multiples of 32) on
    bfloat16 dot products: its bits there are those of the other such levels, not of the float32 ones."""
    return BF16_DOT_FLAG in level.flags


def load_kernel(layout: AttentionLayout | None = None, cache_dir: Path | None = None, level: IsaLevel | None = None):
    """The kernel's C function for ``layout``'s shape at ``level`` (default: the level in use), built first if
    this machine has no copy yet."""
    function = load_native_library(source_for(layout), cache_dir, level=level).tercet_paged_decode_attention
    function.restype = ctypes.c_int
    function.argtypes = [
        ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int,
        ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, INT64_P, ctypes.c_int64,
        INT64_P, INT64_P, INT64_P,
        ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_float, ctypes.c_int,
    ]
    return function
