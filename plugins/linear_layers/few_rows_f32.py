"""float32 linear layers on CPU that run near the memory's speed for a few rows.

Up to :data:`KERNEL_MAX_ROWS` rows the layer runs :file:`few_rows_f32.c`,
which reads the weights once, on every thread, as one stream per thread, and
computes every row against them, at every instruction-set level with vector
code for it (AVX2 and AVX-512: the same bits, and the portable C path's too) where
a compiler built it. Measured with ``benchmarks/few_rows_f32.py`` (2 threads, all of
the default model's float32 decoder weights, best of 5):

- Zen 4: 19.0 ms at 1 row, 18.4 at 2, 19.1 at 5 and 20.3 at 8, against 32.4,
  22.3, 55.5 and 86.9 ms for ``W @ x.T`` below;
- a Xeon with AVX-512 and AMX: 19.9 ms at 1 row, 21.3 at 5, 23.8 at 8, 26.1
  at 12 and 29.5 at 16, against 44-46 ms for ``W @ x.T`` and 16.3, 30.7,
  36.6, 42.6 and 42.6 ms for ``F.linear`` (whose one-row kernel is the
  faster there).

Without the kernel the layer keeps torch's products (figures from the machine
the layer was first measured on, before the kernel):
``F.linear(x, W)`` computes ``x @ W.T``. For one row torch hands it to a
matrix-vector kernel that reads ``W`` on one thread; from two rows on it
takes a general matrix product that packs ``W`` first. Either way a decode
step's few rows read the weights well below the memory's speed: 43.6 ms at
1 row, 53.9 ms at 5, 63.9 ms at 9. ``W @ x.T`` is the same product with ``W``
as the left matrix, which the kernel streams on every thread without
packing: 17.4 ms at 2 rows, 29.3 ms at 5, 52.1 ms at 9. A single row is fed
twice (two rows are cheaper than one). Past :data:`MAX_ROWS` rows the packing
pays for itself (at 13 rows ``F.linear`` took 65 ms, ``W @ x.T`` 87 ms) and
the layer is ``F.linear`` again.

These are the steps of a float32 model serving few requests, and the
verification of speculative drafts (the last token plus ``k`` drafts). The
sums are the same in another order: results differ from ``F.linear``'s at
the level of float32's rounding, as ``F.linear``'s own differ between one row
and several.
"""

from __future__ import annotations

import ctypes
import functools
import logging

import torch
import torch.nn.functional as F
from torch import nn

from tercet.plugin_api import IsaLevel, NativeBuildError, NativeMatmul, NativeSource, level_in_use, load_native_library

logger = logging.getLogger(__name__)

MAX_ROWS = 9
KERNEL_MAX_ROWS = 16  # a verify step of speculative decoding: the last token and up to 15 drafts
SOURCE = NativeSource(__package__, "few_rows_f32.c", "few_rows_f32")
# The kernel's test build: the portable C path on any CPU.
PORTABLE_SOURCE = NativeSource(__package__, "few_rows_f32.c", "few_rows_f32_portable",
                               (*SOURCE.flags, "-DTERCET_PORTABLE"))


def bind_kernel(library: ctypes.CDLL):
    """The library's ``tercet_few_rows_f32``, with its argument types set."""
    function = library.tercet_few_rows_f32
    function.restype = ctypes.c_int
    function.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p,
                         ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64]
    return function


def kernel_library() -> ctypes.CDLL | None:
    """The kernel's library where the level in use has vector code for it, else None (the log says why,
    once per process and level)."""
    return _library_at(level_in_use())


@functools.cache
def _library_at(level: IsaLevel) -> ctypes.CDLL | None:
    try:
        library = load_native_library(SOURCE, level=level)
    except NativeBuildError as error:
        logger.warning("float32 layers at few rows run on torch's kernels: %s", error)
        return None
    if not library.tercet_few_rows_f32_vectorized():
        logger.info("float32 layers at few rows run on torch's kernels: the kernel has no vector code at level %s",
                    level.name)
        return None
    logger.info("float32 layers at few rows run on the few-rows kernel at level %s", level.name)
    return library


def load_kernel():
    """The kernel's function, with its argument types set, or None (see :func:`kernel_library`)."""
    return _kernel_at(level_in_use())


@functools.cache
def _kernel_at(level: IsaLevel):
    library = _library_at(level)
    return None if library is None else bind_kernel(library)


def can_use(device: torch.device, dtype: torch.dtype) -> bool:
    return device.type == "cpu" and dtype == torch.float32


class FewRowsLinear(nn.Linear):
    """``nn.Linear`` that runs the kernel at up to :data:`KERNEL_MAX_ROWS` rows, else at up to
    :data:`MAX_ROWS` rows multiplies with the weight on the left."""

    uses_kernel = True  # False: torch's products only (``model.native_kernels = false``)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight  # once: a module's attribute lookup is a cost at this size
        rows = x.reshape(-1, self.in_features)
        count = rows.shape[0]
        if 0 < count <= KERNEL_MAX_ROWS and self.uses_kernel and weight.is_contiguous():
            kernel = load_kernel()
            if kernel is not None:
                return self._by_kernel(kernel, x, rows, weight)
        if count > MAX_ROWS or count == 0:
            return F.linear(x, self.weight, self.bias)
        if count == 1:
            rows = torch.cat((rows, rows))
        out = torch.mm(self.weight, rows.t()).t()[:count]
        if self.bias is not None:
            out = out + self.bias
        return out.contiguous().view(*x.shape[:-1], self.out_features)

    def native_matmul(self) -> NativeMatmul | None:
        """This layer for a caller in C (a float32 model's few-row steps in one call), where the kernel
        runs here; none with a bias, which the kernel does not add."""
        library = kernel_library() if self.uses_kernel else None
        if self.bias is not None or not self.weight.is_contiguous() or library is None:
            return None
        function = library.tercet_few_rows_f32_matmul
        return NativeMatmul(ctypes.cast(function, ctypes.c_void_p).value, self.weight.data_ptr(), 0,
                            self.out_features, self.in_features, "float32", KERNEL_MAX_ROWS)

    def _by_kernel(self, kernel, x: torch.Tensor, rows: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        if rows.stride(1) != 1:
            rows = rows.contiguous()
        out_features, in_features = weight.shape
        out = torch.empty((rows.shape[0], out_features), dtype=torch.float32)
        kernel(rows.data_ptr(), rows.stride(0), rows.shape[0], in_features, weight.data_ptr(), out_features,
               out.data_ptr(), out_features)
        bias = self.bias
        if bias is not None:
            out += bias
        return out.view(*x.shape[:-1], out_features)
