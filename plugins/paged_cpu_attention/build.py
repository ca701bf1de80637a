"""The decode kernel, compiled once per machine and loaded with ctypes.

The C source ships in this package and is built by tercet's native build
(:func:`tercet.plugin_api.load_native_library`: the system's C compiler,
``-march=native``, into tercet's cache, once per source, compiler and CPU).
No compiler, or one that fails, is a :class:`KernelUnavailable` with the
reason: the backend then runs as ``torch_native`` does, and says so once.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

from tercet.plugin_api import NativeBuildError, NativeSource, load_native_library

SOURCE = NativeSource(__package__, "decode_attention.c", "paged_decode_attention")
INT64_P = ctypes.POINTER(ctypes.c_int64)
KernelUnavailable = NativeBuildError


def load_kernel(cache_dir: Path | None = None):
    """The kernel's C function, built first if this machine has no copy yet."""
    function = load_native_library(SOURCE, cache_dir).tercet_paged_decode_attention
    function.restype = ctypes.c_int
    function.argtypes = [
        ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int,
        ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, INT64_P, ctypes.c_int64,
        INT64_P, INT64_P, INT64_P,
        ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_float, ctypes.c_int,
    ]
    return function
